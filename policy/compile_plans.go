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
	limits, ok := c.limitSet(path, RolePlan, name, spec.LimitSpec, spec.UnitSpec, spec.Limits)
	if !ok {
		return nil
	}
	pl := &Plan{Name: name, Limits: limits}
	if t := spec.Tenant; t != nil {
		pl.Tenant, _ = c.limitSet(path+".tenant", RoleTenant, name, t.LimitSpec, t.UnitSpec, t.Limits)
	}
	if len(pl.Limits) == 0 {
		return nil
	}
	return pl
}

// limitSet compiles plan's limits (role RolePlan) or its tenant's
// (RoleTenant): one written inline (limit, counting unit), or those listed
// under limits; ok is false when it has neither, or both.
func (c *compiler) limitSet(path string, role BudgetRole, plan string, limit LimitSpec, unit UnitSpec, limits []NamedLimitSpec) (budgets []*Budget, ok bool) {
	name := plan // as the RateLimit-Policy header and the metrics name it
	if role == RoleTenant {
		name += ".tenant"
	}
	inline := limit != (LimitSpec{})
	switch {
	case inline && len(limits) > 0:
		c.addf(path, "write the limit inline or under limits, not both")
		return nil, false
	case inline:
		if l, ok := c.limit(path, limit); ok {
			b := newBudget(name, storeID(string(role), plan), l, limit.Shadow)
			c.budgetUnit(path, b, unit)
			budgets = []*Budget{b}
		}
	case len(limits) > 0:
		c.rejectIf(!unit.zero(), path+".unit", "unit, models and per_model belong to the limit written inline: with limits, give each its own")
		budgets = c.namedLimits(path, role, plan, name, limits)
	case role == RoleTenant:
		c.addf(path, "a tenant budget needs a limit (rate and period) or limits")
		return nil, false
	default:
		c.addf(path, "a plan needs a limit (rate and period), limits, or unlimited: true")
		return nil, false
	}
	return budgets, true
}

// unlimitedPlan compiles a plan of unlimited: true, which takes no limits.
func (c *compiler) unlimitedPlan(path, name string, spec PlanSpec) *Plan {
	if spec.LimitSpec != (LimitSpec{}) || !spec.UnitSpec.zero() || len(spec.Limits) > 0 || spec.Tenant != nil {
		c.addf(path+".unlimited", "an unlimited plan takes no limits (no rate, limits or tenant)")
		return nil
	}
	return &Plan{Name: name, Unlimited: true}
}

// namedLimits compiles the limits listed under plan's limits, or its
// tenant's (role), named name and each limit's.
func (c *compiler) namedLimits(path string, role BudgetRole, plan, name string, limits []NamedLimitSpec) []*Budget {
	c.rejectIf(len(limits) > 8, path+".limits", "at most 8 limits per plan or tenant")
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
			b := newBudget(name+"."+ln, storeID(string(role), plan, ln), l, ls.Shadow)
			c.budgetUnit(lp, b, ls.UnitSpec)
			out = append(out, b)
		}
	}
	return out
}
