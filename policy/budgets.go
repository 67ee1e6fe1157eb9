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
	// RoleTenant is a plan's budget per tenant (Plan.Tenant).
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
		seen := map[*Budget]bool{}
		emit := func(r BudgetRole, b *Budget) bool {
			if b == nil || seen[b] {
				return true
			}
			seen[b] = true
			return yield(r, b)
		}
		seenPlan := map[*Plan]bool{}
		plan := func(pl *Plan) bool {
			if pl == nil || seenPlan[pl] {
				return true
			}
			seenPlan[pl] = true
			for _, b := range pl.Limits {
				if !emit(RolePlan, b) {
					return false
				}
			}
			return emit(RoleTenant, pl.Tenant)
		}
		for _, n := range slices.Sorted(maps.Keys(p.Plans)) {
			if !plan(p.Plans[n]) {
				return
			}
		}
		// Any plan named elsewhere is one of p.Plans, unless a policy was
		// put together by hand: walk them anyway, in the order of their
		// names.
		others := []*Plan{p.AnonymousPlan, p.UserPlan}
		for _, pl := range p.TenantPlans {
			others = append(others, pl)
		}
		for _, k := range p.Keys {
			others = append(others, k.Plan, k.OwnPlan)
		}
		others = slices.DeleteFunc(others, func(pl *Plan) bool { return pl == nil || seenPlan[pl] })
		slices.SortStableFunc(others, func(a, b *Plan) int { return strings.Compare(a.Name, b.Name) })
		for _, pl := range others {
			if !plan(pl) {
				return
			}
		}
		for _, r := range p.Routes {
			if r.Limit != nil {
				for _, b := range r.Limit.Limits {
					if !emit(RoleRoute, b) {
						return
					}
				}
			}
			if !emit(RoleGlobal, r.Global) || !emit(RoleCandidate, r.Candidate) {
				return
			}
			if r.Login != nil && !emit(RoleLoginIP, r.Login.IPFailures) {
				return
			}
		}
		emit(RoleInvalidKey, p.InvalidKey)
	}
}
