package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// plans compiles the plans, and the plans identity names.
func (c *compiler) plans(p *Policy, f *File) {
	c.rejectIf(len(f.Plans) == 0, "plans", "define at least one plan")
	for _, n := range slices.Sorted(maps.Keys(f.Plans)) {
		path := "plans." + n
		c.rejectIf(!namePattern.MatchString(n), path, "plan names are 1-64 letters, digits, '.', '_' or '-'")
		if pl := c.plan(path, n, f.Plans[n]); pl != nil {
			p.Plans[n] = pl
		}
	}
	id := f.Identity
	anonymous := id.AnonymousPlan
	if anonymous == "" && len(f.Plans) == 1 {
		anonymous = planNames(f.Plans) // a file's one plan is everyone's
	}
	c.rejectIf(anonymous == "" && len(f.Plans) > 1, "identity.anonymous_plan", "name the plan for requests identified only by client IP (one of %s)", planNames(f.Plans))
	p.AnonymousPlan = c.planRef(p, f, "identity.anonymous_plan", anonymous)
	p.UserPlan = c.planRef(p, f, "identity.user_plan", id.UserPlan)
	if p.UserPlan == nil && id.UserPlan == "" {
		p.UserPlan = p.AnonymousPlan
	}
}

// planRef returns the plan named at path, or nil: for "", and for a name
// no plan has (a problem, unless the plan is defined but did not compile).
func (c *compiler) planRef(p *Policy, f *File, path, name string) *Plan {
	if name == "" {
		return nil
	}
	pl, ok := p.Plans[name]
	if !ok {
		if _, defined := f.Plans[name]; !defined {
			c.addf(path, "no plan named %q (the plans are %s)", name, planNames(f.Plans))
		}
	}
	return pl
}

// planNames lists the names of plans, sorted, for a message.
func planNames[P any](plans map[string]P) string {
	return strings.Join(slices.Sorted(maps.Keys(plans)), ", ")
}

// plan compiles one plan.
func (c *compiler) plan(path, name string, spec PlanSpec) *Plan {
	if spec.Unlimited {
		return c.unlimitedPlan(path, name, spec)
	}
	limits, ok := c.planBudgets(path, name, spec)
	if !ok {
		return nil
	}
	pl := &Plan{Name: name, Limits: limits}
	pl.Tenant = c.budgetOf(path+".tenant", spec.Tenant, name+".tenant", tenantID(name))
	if len(pl.Limits) == 0 {
		return nil
	}
	return pl
}

// planBudgets compiles a plan's limit, written inline, or its limits
// listed under limits; ok is false when it has neither, or both.
func (c *compiler) planBudgets(path, name string, spec PlanSpec) (limits []*Budget, ok bool) {
	inline := spec.LimitSpec != (LimitSpec{})
	switch {
	case inline && len(spec.Limits) > 0:
		c.addf(path, "write the plan's limit inline or under limits, not both")
		return nil, false
	case inline:
		if l, ok := c.limit(path, spec.LimitSpec); ok {
			limits = []*Budget{newBudget(name, planID(name), l, spec.Shadow)}
		}
	case len(spec.Limits) > 0:
		limits = c.planLimits(path, name, spec.Limits)
	default:
		c.addf(path, "a plan needs a limit (rate and period), limits, or unlimited: true")
		return nil, false
	}
	return limits, true
}

// unlimitedPlan compiles a plan of unlimited: true, which takes no limits.
func (c *compiler) unlimitedPlan(path, name string, spec PlanSpec) *Plan {
	if spec.LimitSpec != (LimitSpec{}) || len(spec.Limits) > 0 || spec.Tenant != nil {
		c.addf(path+".unlimited", "an unlimited plan takes no limits (no rate, limits or tenant)")
		return nil
	}
	return &Plan{Name: name, Unlimited: true}
}

// planLimits compiles the limits listed under a plan's limits.
func (c *compiler) planLimits(path, plan string, limits []NamedLimitSpec) []*Budget {
	c.rejectIf(len(limits) > 8, path+".limits", "at most 8 limits per plan")
	var out []*Budget
	seen := map[string]bool{}
	for i, ls := range limits {
		lp := fmt.Sprintf("%s.limits[%d]", path, i)
		ln := ls.Name
		if ln == "" {
			ln = strconv.Itoa(i)
		}
		c.rejectIf(!namePattern.MatchString(ln) || seen[ln], lp+".name", "limit names are unique in a plan, 1-64 letters, digits, '.', '_' or '-' (got %q)", ls.Name)
		seen[ln] = true
		if l, ok := c.limit(lp, ls.LimitSpec); ok {
			b := newBudget(plan+"."+ln, planLimitID(plan, ln), l, ls.Shadow)
			c.budgetUnit(lp, b, ls)
			out = append(out, b)
		}
	}
	return out
}
