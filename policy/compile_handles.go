package policy

import "github.com/tollgate/tollgate/algo"

// handles prepares every budget's limit once, under its store name, now
// that regions and shadow mode have done with them.
func (c *compiler) handles(p *Policy) {
	for _, b := range p.Budgets() {
		h, err := algo.NewHandle(b.StoreName, b.Limit)
		if err != nil {
			// Every limit was validated where it was read; a region's
			// share of one is valid too.
			c.addf("", "budget %q: %v", b.Name, err)
			continue
		}
		b.Handle = h
	}
}
