package policy

import (
	"iter"
	"maps"
	"slices"
	"strings"
)

// BudgetRole is what a budget limits. It decides what a file-level
// shadow: true and a region do to the budget: see Policy.Budgets.
type BudgetRole string

// The roles of budgets; each is also the kind that begins its store name
// (storenames.go).
const (
	// RolePlan is one of a plan's limits, per subject (Plan.Limits).
	RolePlan BudgetRole = "plan"
	// RoleTenant is one of a plan's budgets per tenant (Plan.Tenant).
	RoleTenant BudgetRole = "tenant"
	// RoleRoute is a route group's own limit, per subject (Route.Limit).
	RoleRoute BudgetRole = "route"
	// RoleGlobal is a route group's one budget shared by every subject
	// (Route.Global).
	RoleGlobal BudgetRole = "global"
	// RoleCandidate is a route group's candidate limit, per subject,
	// always in shadow (Route.Candidate).
	RoleCandidate BudgetRole = "candidate"
	// RoleInvalidKey limits, per client address, requests with an invalid
	// API key (Policy.InvalidKey). A guard.
	RoleInvalidKey BudgetRole = "invalid_key"
	// RoleLoginIP limits, per client address, the failed logins of one
	// route group (Login.IPFailures). A guard.
	RoleLoginIP BudgetRole = "login_ip"
)

// Guard reports whether budgets of role r guard against guessing (API keys,
// passwords) rather than share out capacity. A guard is always enforced:
// a file-level shadow: true leaves it so, and it takes no shadow of its
// own. An invalid key is refused whatever the guard says (the guard only
// stops an address from trying more), and a login's failures per address
// stand beside its account locks, which have no shadow mode; so a file
// tried in shadow tries its limits without opening a window for guessing.
func (r BudgetRole) Guard() bool {
	return r == RoleInvalidKey || r == RoleLoginIP
}

// Budgets yields every budget of the policy exactly once, with its role:
// the limits and tenant budget of every plan (the plans, and any other a
// key, a tenant or identity names), then each route's limit, global
// budget, candidate and login failures per address, then the invalid-key
// limit. Each budget is one pointer, yielded once however many plans,
// tenants and keys share it.
//
// Compiling walks it to apply the file-wide settings, so they reach every
// budget alike:
//   - region: every budget is this region's share (RegionShare), as each
//     counts in this region's store only: plan, tenant, route and global
//     budgets, candidates (which foretell what the enforced limit's share
//     would do), and the guards (else an address could guess count times
//     as often, once in each region).
//   - shadow: true: every budget is in shadow but the guards
//     (BudgetRole.Guard), which stay enforced.
func (p *Policy) Budgets() iter.Seq2[BudgetRole, *Budget] {
	return func(yield func(BudgetRole, *Budget) bool) {
		w := &budgetWalk{yield: yield, seen: map[*Budget]bool{}, seenPlan: map[*Plan]bool{}}
		if !w.plans(p) {
			return
		}
		for _, r := range p.Routes {
			if !w.route(r) {
				return
			}
		}
		w.budget(RoleInvalidKey, p.InvalidKey)
	}
}

// budgetWalk is one walk of Policy.Budgets: where it yields, and the
// budgets and plans it has visited, each visited once however many refer
// to it. Its methods return false when the walk stops.
type budgetWalk struct {
	yield    func(BudgetRole, *Budget) bool
	seen     map[*Budget]bool
	seenPlan map[*Plan]bool
}

// budget yields b with its role, unless b is nil or yielded already.
func (w *budgetWalk) budget(r BudgetRole, b *Budget) bool {
	if b == nil || w.seen[b] {
		return true
	}
	w.seen[b] = true
	return w.yield(r, b)
}

// plan yields a plan's limits and its tenant budget, unless pl is nil or
// walked already.
func (w *budgetWalk) plan(pl *Plan) bool {
	if pl == nil || w.seenPlan[pl] {
		return true
	}
	w.seenPlan[pl] = true
	for _, b := range pl.Limits {
		if !w.budget(RolePlan, b) {
			return false
		}
	}
	for _, b := range pl.Tenant {
		if !w.budget(RoleTenant, b) {
			return false
		}
	}
	return true
}

// plans walks the policy's plans in the order of their names, then any
// plan named elsewhere that is not one of them.
func (w *budgetWalk) plans(p *Policy) bool {
	for _, n := range slices.Sorted(maps.Keys(p.Plans)) {
		if !w.plan(p.Plans[n]) {
			return false
		}
	}
	for _, pl := range w.otherPlans(p) {
		if !w.plan(pl) {
			return false
		}
	}
	return true
}

// otherPlans returns the plans that identity, tenants and keys name and
// the walk has not visited, in the order of their names. Any plan named
// elsewhere is one of p.Plans, unless a policy was put together by hand.
func (w *budgetWalk) otherPlans(p *Policy) []*Plan {
	others := []*Plan{p.AnonymousPlan, p.UserPlan}
	for _, pl := range p.TenantPlans {
		others = append(others, pl)
	}
	for _, k := range p.Keys {
		others = append(others, k.Plan, k.OwnPlan)
	}
	others = slices.DeleteFunc(others, func(pl *Plan) bool { return pl == nil || w.seenPlan[pl] })
	slices.SortStableFunc(others, func(a, b *Plan) int { return strings.Compare(a.Name, b.Name) })
	return others
}

// route yields a route's limit, global budget, candidate and login
// failures per address.
func (w *budgetWalk) route(r *Route) bool {
	if r.Limit != nil {
		for _, b := range r.Limit.Limits {
			if !w.budget(RoleRoute, b) {
				return false
			}
		}
	}
	if !w.budget(RoleGlobal, r.Global) || !w.budget(RoleCandidate, r.Candidate) {
		return false
	}
	return r.Login == nil || w.budget(RoleLoginIP, r.Login.IPFailures)
}
