package policy

// shadow puts every budget in shadow but the guards (shadow: true; see
// Policy.Budgets).
func (c *compiler) shadow(p *Policy) {
	for role, b := range p.Budgets() {
		if !role.Guard() {
			b.Shadow = true
		}
	}
}
