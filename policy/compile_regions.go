package policy

import (
	"github.com/tollgate/tollgate"
)

// region scales every budget to this region's share (see Policy.Budgets).
func (c *compiler) region(p *Policy, r *RegionSpec) {
	switch {
	case !namePattern.MatchString(r.Name):
		c.addf("region.name", "name the region (1-64 letters, digits, '.', '_' or '-')")
	case r.Count < 1:
		c.addf("region.count", "the number of regions must be at least 1")
	case r.Margin < 0 || r.Margin >= 1:
		c.addf("region.margin", "the safety margin is a fraction in [0, 1), e.g. 0.1")
	}
	if len(c.problems) > 0 {
		return
	}
	p.Region = r.Name
	for _, b := range p.Budgets() {
		b.setLimit(RegionShare(b.Limit, r.Count, r.Margin))
	}
}

// RegionShare returns the part of l that one of count regions enforces
// with a safety margin: floor(x × (1 - margin) / count) of the rate and the
// burst, at least 1. The shares of all regions sum to at most l.
func RegionShare(l tollgate.Limit, count int, margin float64) tollgate.Limit {
	f := (1 - margin) / float64(count)
	share := func(x int64) int64 { return max(1, int64(float64(x)*f)) }
	wasRate := l.Burst == l.Rate
	l.Rate = share(l.Rate)
	if l.Burst != 0 {
		if wasRate {
			l.Burst = l.Rate
		} else {
			l.Burst = share(l.Burst)
		}
	}
	return l
}
