package policy_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// kinds names every budget of the policy compiled from src (everyBudget,
// edited) by the kind and names of its store name ("plan/team/day",
// "invalid_key").
func kinds(t *testing.T, src string) map[string]*policy.Budget {
	t.Helper()
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return budgetsOf(t, p)
}

// budgetsOf names every budget of p as kinds does: a walk written here,
// apart from the package's.
func budgetsOf(t *testing.T, p *policy.Policy) map[string]*policy.Budget {
	t.Helper()
	m := map[string]*policy.Budget{}
	add := func(b *policy.Budget) {
		if b != nil {
			m[b.StoreName[:strings.IndexByte(b.StoreName, '@')]] = b
		}
	}
	add(p.InvalidKey)
	for _, pl := range p.Plans {
		for b := range pl.All() {
			add(b)
		}
	}
	for _, r := range p.Routes {
		if r.Limit != nil {
			add(r.Limit.Limits[0])
		}
		add(r.Global)
		add(r.Candidate)
		if r.Login != nil {
			add(r.Login.IPFailures)
		}
	}
	if len(m) != 10 {
		t.Fatalf("%d budgets, want 10: %v", len(m), m)
	}
	return m
}

// TestFileShadow: shadow: true puts every limit that shares out capacity
// in shadow, and leaves the two guards enforced: the invalid-key limit
// (an invalid key is refused whatever it says; the guard only stops the
// guessing) and a login's failures per address (beside the account locks,
// which have no shadow mode). An operator trying a new file in shadow
// tries its limits, not a window for guessing keys and passwords.
func TestFileShadow(t *testing.T) {
	enforced := map[string]bool{"invalid_key": true, "login_ip/login": true}
	for id, b := range kinds(t, everyBudget+"shadow: true\n") {
		if b.Shadow == enforced[id] {
			t.Errorf("%s: shadow %v, want %v", id, b.Shadow, !enforced[id])
		}
	}
	for id, b := range kinds(t, everyBudget) {
		if b.Shadow != (id == "candidate/api") {
			t.Errorf("without shadow: %s: shadow %v", id, b.Shadow)
		}
	}
	// Nor can a guard be put in shadow alone: that was silently ignored.
	for _, c := range []struct{ edit, with, want string }{
		{"invalid_key_limit: {", "invalid_key_limit: {shadow: true, ", "invalid_key_limit.shadow"},
		{"ip_failures: {", "ip_failures: {shadow: true, ", "routes[1].login.ip_failures.shadow"},
	} {
		_, err := policy.Parse([]byte(strings.Replace(everyBudget, c.edit, c.with, 1)), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "always enforced") {
			t.Errorf("%s: %v", c.with, err)
		}
	}
}

// TestRegionSharesEveryBudget: a region enforces its share of every
// budget, each counted in the region's own store: the candidate (else it
// would foretell what a limit twice the enforced one would do), the
// invalid-key limit and a login's failures per address (else an address
// could guess count times as often, once in each region) as much as the
// plans, tenants, route limits and globals.
func TestRegionSharesEveryBudget(t *testing.T) {
	whole := kinds(t, everyBudget)
	shared := kinds(t, everyBudget+"region: {name: eu, count: 2}\n")
	for id, b := range whole {
		want := policy.RegionShare(b.Limit, 2, 0)
		if got := shared[id].Limit; got.Rate != want.Rate || got.Burst != want.Burst {
			t.Errorf("%s: %d (burst %d) in the region, want %d (burst %d) of %d", id, got.Rate, got.Burst, want.Rate, want.Burst, b.Limit.Rate)
		}
	}
}

// TestBudgets: Budgets yields every budget once, with its role, however
// many plans, tenants, keys and identities share it, and stops when told.
func TestBudgets(t *testing.T) {
	src := everyBudget + `tenants:
  acme: {plan: team}
api_keys:
  - {id: a, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", tenant: acme, plan: free}
  - {id: b, digest: "sha256:ff83448544d92a31f29f045bb4b32f207b8e8358882135d71cd07e235d682936", plan: team}
`
	src = strings.Replace(src, "anonymous_plan: free}", "anonymous_plan: free, user_plan: team}", 1)
	role := map[string]policy.BudgetRole{
		"plan/free": policy.RolePlan, "plan/team/second": policy.RolePlan, "plan/team/day": policy.RolePlan, "plan/shaped": policy.RolePlan,
		"tenant/team": policy.RoleTenant, "route/api": policy.RoleRoute, "global/api": policy.RoleGlobal,
		"candidate/api": policy.RoleCandidate, "invalid_key": policy.RoleInvalidKey, "login_ip/login": policy.RoleLoginIP,
	}
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := budgetsOf(t, p)
	seen := map[*policy.Budget]bool{}
	for r, b := range p.Budgets() {
		id := b.StoreName[:strings.IndexByte(b.StoreName, '@')]
		if seen[b] {
			t.Errorf("%s yielded twice", id)
		}
		seen[b] = true
		if r != role[id] || r.Guard() != (r == policy.RoleInvalidKey || r == policy.RoleLoginIP) {
			t.Errorf("%s: role %q (guard %v), want %q", id, r, r.Guard(), role[id])
		}
		if want[id] != b {
			t.Errorf("%s: not the policy's budget", id)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d budgets yielded, want %d", len(seen), len(want))
	}
	n := 0
	for range p.Budgets() {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("stopped after %d", n)
	}
	// An override's keys and tenants add no budget and repeat none.
	q, err := p.Override(policy.Overrides{Tenants: map[string]string{"other": "shaped"},
		Keys: map[string]*policy.KeySpec{"c": {Digest: "sha256:" + strings.Repeat("ab", 32), Plan: "shaped"}}})
	if err != nil {
		t.Fatal(err)
	}
	n = 0
	for range q.Budgets() {
		n++
	}
	if n != len(want) {
		t.Errorf("after an override: %d budgets, want %d", n, len(want))
	}
	// A plan put together by hand, sharing a budget with another: each
	// budget still once.
	own := &policy.Budget{Name: "own", Limit: want["plan/free"].Limit}
	q.AnonymousPlan = &policy.Plan{Name: "hand", Limits: []*policy.Budget{want["plan/free"], own}}
	n = 0
	for _, b := range q.Budgets() {
		if n++; b == own && n > len(want)+1 {
			t.Errorf("the hand-made budget came %dth", n)
		}
	}
	if n != len(want)+1 {
		t.Errorf("with a plan made by hand: %d budgets, want %d", n, len(want)+1)
	}
}

// TestCostWithinRegionShare: a route cost that no budget could admit is an
// error, and a region's share is what its budgets admit: a cost of 5 fits
// team.second's 10 but not the 4 the region enforces, a cost of 300 the
// global 500 but not its share 225.
func TestCostWithinRegionShare(t *testing.T) {
	for _, c := range []struct{ edit, with, want string }{
		{"upstream: builtin:echo, global", "upstream: builtin:echo, cost: 5, global", `cost 5 exceeds plan "team"'s capacity 4 (team.second)`},
		{"upstream: builtin:echo, global", "upstream: builtin:echo, cost: 300, limit: {rate: 1000, period: 1s}, global", "cost 300 exceeds the global budget's capacity 225"},
	} {
		src := strings.Replace(scaled, c.edit, c.with, 1)
		if _, err := policy.Parse([]byte(strings.Replace(src, "region:", "#", 1)), "s.yaml"); err != nil {
			t.Fatalf("%s without the region: %v", c.with, err)
		}
		_, err := policy.Parse([]byte(src), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "region") {
			t.Errorf("%s: %v, want %q", c.with, err, c.want)
		}
	}
}

// TestBudgetHandles: compiling prepares every budget once: its handle
// names its state as the budget does and holds its limit (after the
// region's share), so the requests it makes need no validating.
func TestBudgetHandles(t *testing.T) {
	for _, src := range []string{everyBudget, everyBudget + "region: {name: eu, count: 2}\n"} {
		p, err := policy.Parse([]byte(src), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, b := range p.Budgets() {
			n++
			if b.Handle == nil || b.Handle.Name() != b.StoreName || b.Handle.Limit() != b.Limit {
				t.Fatalf("%s: handle %+v does not match the budget", b.StoreName, b.Handle)
			}
			r := b.Request("s", "g", 1)
			if r.Prepared() != b.Handle || r.Tag != "g" || r.Subject != "s" {
				t.Fatalf("%s: request %+v does not carry the handle", b.StoreName, r)
			}
		}
		if n < 10 {
			t.Fatalf("only %d budgets", n)
		}
	}
}
