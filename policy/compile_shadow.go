package policy

// shadow puts the file's every limit in shadow (shadow: true).
func (c *compiler) shadow(p *Policy) {
	for _, pl := range p.Plans {
		for _, b := range pl.Limits {
			b.Shadow = true
		}
		if pl.Tenant != nil {
			pl.Tenant.Shadow = true
		}
	}
	for _, rt := range p.Routes {
		if rt.Limit != nil {
			rt.Limit.Limits[0].Shadow = true
		}
		if rt.Global != nil {
			rt.Global.Shadow = true
		}
	}
}
