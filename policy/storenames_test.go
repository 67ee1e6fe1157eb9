package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/policy"
)

// everyBudget is a policy with a budget of every kind, a login guard and
// a concurrency limit.
const everyBudget = `version: v1
listeners: {public: "127.0.0.1:8080", admin: "127.0.0.1:9090"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
time_zone: Europe/Paris
plans:
  free: {rate: 100, period: 1m}
  team:
    limits:
      - {name: second, rate: 10, period: 1s}
      - {name: day, calendar: day, rate: 1000}
    tenant: {rate: 25, period: 1m}
  shaped: {algorithm: leaky_bucket, rate: 10, period: 1s, burst: 5, max_delay: 2s}
invalid_key_limit: {algorithm: fixed_window, rate: 10, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo, limit: {rate: 50, period: 1m}, global: {rate: 500, period: 1s},
     shadow_limit: {rate: 40, period: 1m}, concurrency: {limit: 10}}
  - name: login
    method: POST
    path: /login
    upstream: builtin:echo
    login: {max_failures: 5, lock: 1m, ip_failures: {algorithm: fixed_window, rate: 20, period: 10m}}
`

// storeNames returns the store name of every budget, login guard and
// concurrency limit of the policy compiled from src with edits (pairs of
// text to find, which must be there, and its replacement).
func storeNames(t *testing.T, src string, edits ...string) map[string]string {
	t.Helper()
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(src, edits[i]) {
			t.Fatalf("the policy holds no %q", edits[i])
		}
		src = strings.Replace(src, edits[i], edits[i+1], 1)
	}
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{"invalid_key": p.InvalidKey.StoreName}
	for _, pl := range p.Plans {
		for _, b := range pl.Limits {
			m["plan "+b.Name] = b.StoreName
		}
		for _, b := range pl.Tenant {
			m["tenant "+b.Name] = b.StoreName
		}
	}
	for _, r := range p.Routes {
		if r.Limit != nil {
			m["route "+r.Name] = r.Limit.Limits[0].StoreName
		}
		if r.Global != nil {
			m["global "+r.Name] = r.Global.StoreName
		}
		if r.Candidate != nil {
			m["candidate "+r.Name] = r.Candidate.StoreName
		}
		if r.Login != nil {
			m["login "+r.Name] = r.Login.StoreName
			m["login ip "+r.Name] = r.Login.IPFailures.StoreName
		}
		if r.Concurrency != nil {
			m["concurrency "+r.Name] = r.Concurrency.StoreName
		}
	}
	return m
}

// TestStoreNamesFollowTheLimits: a budget's state is stored under the
// identity of its limit, not the policy's version, so a new version keeps
// the state of every limit it leaves as it was, and a limit that changes
// in anything it enforces starts afresh, alone. The login guard's state
// and the leases of a concurrency limit record what happened (failures,
// locks, requests in flight), which means the same under any rule: they
// keep their state across changes of the rule.
func TestStoreNamesFollowTheLimits(t *testing.T) {
	base := storeNames(t, everyBudget)
	if len(base) != 12 {
		t.Fatalf("%d store names, want 12: %v", len(base), base)
	}
	seen := map[string]string{}
	for what, n := range base {
		if strings.Contains(n, "v1") {
			t.Errorf("%s: store name %q holds the version", what, n)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%s and %s share the store name %q", what, other, n)
		}
		seen[n] = what
	}
	cases := []struct {
		name    string
		edits   []string
		changed []string // the budgets that start afresh
	}{
		{"a new version", []string{"version: v1", "version: v2"}, nil},
		{"a new version with other routes and keys", []string{"version: v1", "version: v2", "routes:\n",
			"routes:\n  - {name: more, path: /more, upstream: builtin:echo}\n"}, nil},
		{"the same limit spelt out", []string{"free: {rate: 100, period: 1m}", "free: {algorithm: gcra, rate: 100, period: 60s, burst: 100}"}, nil},
		{"shadow mode", []string{"version: v1", "version: v2\nshadow: true"}, nil},
		{"a rate", []string{"free: {rate: 100,", "free: {rate: 101,"}, []string{"plan free"}},
		{"a period", []string{"free: {rate: 100, period: 1m}", "free: {rate: 100, period: 2m}"}, []string{"plan free"}},
		{"an algorithm", []string{"free: {rate: 100,", "free: {algorithm: token_bucket, rate: 100,"}, []string{"plan free"}},
		{"a burst", []string{"burst: 5", "burst: 6"}, []string{"plan shaped"}},
		{"a max_delay", []string{"max_delay: 2s", "max_delay: 3s"}, []string{"plan shaped"}},
		{"a daily quota", []string{"calendar: day, rate: 1000", "calendar: day, rate: 1001"}, []string{"plan team.day"}},
		{"a calendar", []string{"calendar: day, rate: 1000", "calendar: month, rate: 1000"}, []string{"plan team.day"}},
		{"a quota's time zone", []string{"time_zone: Europe/Paris", "time_zone: Europe/Berlin"}, []string{"plan team.day"}},
		{"a tenant budget", []string{"tenant: {rate: 25,", "tenant: {rate: 26,"}, []string{"tenant team.tenant"}},
		{"a route limit", []string{"limit: {rate: 50,", "limit: {rate: 51,"}, []string{"route api"}},
		{"a global budget", []string{"global: {rate: 500,", "global: {rate: 501,"}, []string{"global api"}},
		{"a candidate", []string{"shadow_limit: {rate: 40,", "shadow_limit: {rate: 41,"}, []string{"candidate api"}},
		{"the invalid-key limit", []string{"rate: 10, period: 1m}\nroutes", "rate: 11, period: 1m}\nroutes"}, []string{"invalid_key"}},
		{"a login's failures per address", []string{"rate: 20, period: 10m", "rate: 21, period: 10m"}, []string{"login ip login"}},
		{"a login guard's rule", []string{"max_failures: 5, lock: 1m", "max_failures: 3, lock: 2m"}, nil},
		{"a concurrency limit", []string{"concurrency: {limit: 10}", "concurrency: {limit: 20, lease_ttl: 10s}"}, nil},
		{"a region's share", []string{"version: v1", "version: v1\nregion: {name: eu, count: 2}"}, []string{"plan free",
			"plan team.second", "plan team.day", "plan shaped", "tenant team.tenant", "route api", "global api", "candidate api",
			"invalid_key", "login ip login"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := storeNames(t, everyBudget, c.edits...)
			changed := map[string]bool{}
			for _, w := range c.changed {
				changed[w] = true
			}
			for what, n := range base {
				if (got[what] != n) != changed[what] {
					t.Errorf("%s: store name %q, was %q (want it changed: %v)", what, got[what], n, changed[what])
				}
			}
		})
	}
}

// TestRLSBudgetNames: descriptors whose domain, keys and values hold the
// bytes that delimit a name never share one, and the limit is part of it.
func TestRLSBudgetNames(t *testing.T) {
	l := tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 5, Period: time.Minute}
	type entry = policy.RLSEntry
	cases := []struct {
		domain string
		path   []entry
	}{
		{"d", []entry{{Key: "a", Value: "b"}}},
		{"d", []entry{{Key: "a=b"}}},
		{"d", []entry{{Key: "a"}, {Key: "b"}}},
		{"d", []entry{{Key: "a/b"}}},
		{"d/a", []entry{{Key: "b"}}},
		{"d", []entry{{Key: "a@b"}}},
		{"d", []entry{{Key: "a%2Fb"}}},
	}
	seen := map[string]int{}
	for i, c := range cases {
		b, err := policy.RLSBudget("n", c.domain, c.path, l, false)
		if err != nil {
			t.Fatal(err)
		}
		if j, dup := seen[b.StoreName]; dup {
			t.Fatalf("cases %d and %d share %q", j, i, b.StoreName)
		}
		seen[b.StoreName] = i
		if !strings.HasPrefix(b.StoreName, "rls/") || b.Handle == nil || b.Handle.Name() != b.StoreName {
			t.Fatalf("case %d: %q, handle %v", i, b.StoreName, b.Handle)
		}
	}
	other, _ := policy.RLSBudget("n", "d", cases[0].path, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 6, Period: time.Minute}, false)
	first, _ := policy.RLSBudget("n", "d", cases[0].path, l, true)
	if other.StoreName == first.StoreName || first.StoreName != "rls/d/a=b@"+first.StoreName[len("rls/d/a=b@"):] {
		t.Fatalf("a changed limit keeps the name, or shadow changes it: %q, %q", other.StoreName, first.StoreName)
	}
}

// TestRouteKeyIDsDistinct: two different lists of key values never share
// an id, however their bytes could be read across the separators.
func TestRouteKeyIDsDistinct(t *testing.T) {
	parts := []policy.KeyPart{{Kind: "header", Name: "X-Org"}, {Kind: "path", Name: "id"}}
	values := [][]string{
		{"a", "b"}, {"a;", "b"}, {"a", ";b"}, {"a=1:b", ""}, {"", "a=1:b"}, {"ab", ""}, {"", "ab"},
		{"a;path:id=1:b", ""}, {"1:a", "b"}, {"\x00", "b"}, {"", "b"}, {"a", "b;"}, {"A", "b"},
	}
	seen := map[string][]string{}
	for _, v := range values {
		id := policy.RouteKeyID(parts, v)
		if prev, dup := seen[id]; dup {
			t.Fatalf("%q and %q share the id %q", prev, v, id)
		}
		seen[id] = v
	}
	other := []policy.KeyPart{{Kind: "query", Name: "X-Org"}, {Kind: "path", Name: "id"}}
	if policy.RouteKeyID(parts, values[0]) == policy.RouteKeyID(other, values[0]) {
		t.Fatal("the same values under other parts share an id")
	}
}
