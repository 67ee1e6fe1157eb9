package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// refusalPolicy gives every client address (chosen with X-Forwarded-For)
// 5 requests an hour across routes, and routes where a later check can
// refuse after the plan: slots (one in flight, for the whole route) with
// a global budget, a global budget alone, a candidate limit in shadow,
// and a login guard.
const refusalPolicy = `version: refusals-1
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
store: {timeout: 5s}
identity: {secret: refusals-test-secret-0123456789, anonymous_plan: anon, trusted_proxies: [127.0.0.0/8]}
plans:
  anon: {algorithm: fixed_window, rate: 5, period: 1h}
routes:
  - {name: slow, path: /slow, upstream: UPSTREAM, concurrency: {limit: 1, per: route}, global: {algorithm: fixed_window, rate: 3, period: 1h}}
  - {name: search, path: /search, upstream: UPSTREAM, global: {algorithm: fixed_window, rate: 2, period: 1h}}
  - {name: cand, path: /cand, upstream: UPSTREAM, limit: {algorithm: fixed_window, rate: 3, period: 1h}, shadow_limit: {algorithm: fixed_window, rate: 4, period: 1h}}
  - name: login
    method: POST
    path: /login
    upstream: UPSTREAM
    limit: {algorithm: fixed_window, rate: 6, period: 1h}
    on_store_failure: fail_closed
    login: {account_field: username, failure_statuses: [401], max_failures: 3, lock: 1h, max_lock: 1h, ip_failures: {algorithm: fixed_window, rate: 4, period: 10m}}
  - {name: api, path: /, upstream: UPSTREAM}
`

// refusalEngine returns an engine on refusalPolicy over s, its clock
// stopped at 09:00 (the hour's windows never roll over unless a test
// moves it), with its metrics.
func refusalEngine(t *testing.T, s tollgate.Store, c *fixture.Clock) (*engine.Engine, *engine.Metrics) {
	t.Helper()
	p, err := policy.Parse([]byte(strings.ReplaceAll(refusalPolicy, "UPSTREAM", policy.BuiltinEcho)), "refusals.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, p, s, c.Now, func(o *engine.Options) { o.Metrics = m }), m
}

// refusalClock is the clock of refusalEngine, at 09:00.
func refusalClock() *fixture.Clock {
	return fixture.ClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
}

// admitted decides calls from from until the first refusal (at most
// max) and returns how many were admitted; a call neither admitted nor
// refused fails the test.
func admitted(t *testing.T, e *engine.Engine, method, path, from, body string, max int) int {
	t.Helper()
	for i := 0; i < max; i++ {
		v := decide(e, request(method, path, from, body), body)
		switch {
		case v.Outcome.Admitted():
		case v.Outcome == engine.Refused:
			return i
		default:
			t.Fatalf("%s %s from %s: %v %v", method, path, from, v.Outcome, v.Reason)
		}
	}
	return max
}

// TestConcurrencyRefusalChargesNothing is the reported case: requests
// refused because the route's one slot is taken spend neither their
// plan's budget nor the route's global budget; and a request the plan
// refuses gives its slot back.
func TestConcurrencyRefusalChargesNothing(t *testing.T) {
	c := refusalClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		e, _ := refusalEngine(t, s, c)
		ctx := context.Background()
		held := e.Decide(ctx, request(http.MethodGet, "/slow", "192.0.2.1", ""))
		if !held.Outcome.Admitted() {
			t.Fatalf("the request to hold the slot: %v %v", held.Outcome, held.Reason)
		}
		for i := 0; i < 4; i++ {
			if v := get(e, "/slow", "192.0.2.1"); !refusedBy(v, engine.ReasonConcurrency) {
				t.Fatalf("while the slot is taken: %v %v, want refused (429) for the slot", v.Outcome, v.Reason)
			}
		}
		held.Done(ctx)
		// The plan charged only the request that held the slot: 4 left.
		if n := admitted(t, e, "GET", "/api", "192.0.2.1", "", 10); n != 4 {
			t.Errorf("the plan admitted %d more after 4 refusals for the slot, want 4 (5 less the one admitted)", n)
		}
		// The global budget (3) charged only that request too: 2 left,
		// for anyone. The first client, its plan now used up, is refused
		// by it, and gives the slot back.
		if n := admitted(t, e, "GET", "/slow", "192.0.2.1", "", 1); n != 0 {
			t.Fatalf("over its plan: admitted")
		}
		if n := admitted(t, e, "GET", "/slow", "192.0.2.2", "", 10); n != 2 {
			t.Errorf("the global budget of 3 admitted %d more after one request and 4 refusals for the slot, want 2", n)
		}
	})
}

// TestGlobalRefusalChargesNothing: requests the route's global budget
// refuses do not spend the subject's plan, and requests the plan refuses
// do not spend the global budget.
func TestGlobalRefusalChargesNothing(t *testing.T) {
	c := refusalClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		e, _ := refusalEngine(t, s, c)
		// One address uses up its plan; its requests to /search, refused
		// by the plan, leave the global budget whole.
		if n := admitted(t, e, "GET", "/api", "192.0.2.10", "", 10); n != 5 {
			t.Fatalf("plan admitted %d, want 5", n)
		}
		for i := 0; i < 3; i++ {
			if v := get(e, "/search", "192.0.2.10"); !refusedBy(v, engine.ReasonRate) {
				t.Fatalf("over its plan: %v %v", v.Outcome, v.Reason)
			}
		}
		if n := admitted(t, e, "GET", "/search", "192.0.2.11", "", 10); n != 2 {
			t.Fatalf("the global budget of 2 admitted %d after refusals by a plan, want 2", n)
		}
		// The global budget is used up: another address is refused by it
		// three times, and still has its whole plan.
		for i := 0; i < 3; i++ {
			if v := get(e, "/search", "192.0.2.12"); v.Outcome != engine.Refused {
				t.Fatalf("global budget used up: %v %v", v.Outcome, v.Reason)
			}
		}
		if n := admitted(t, e, "GET", "/api", "192.0.2.12", "", 10); n != 5 {
			t.Errorf("the plan admitted %d after 3 refusals by the global budget, want 5", n)
		}
	})
}

// TestLoginRefusalChargesNothing: login attempts the guard refuses (the
// account locked, the address over its failure budget) do not spend the
// route's own limit.
func TestLoginRefusalChargesNothing(t *testing.T) {
	c := refusalClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		e, _ := refusalEngine(t, s, c)
		wrong := func(acct string) string { return fmt.Sprintf(`{"username":%q,"password":"guess"}`, acct) }
		right := func(acct string) string { return fmt.Sprintf(`{"username":%q,"password":"demo"}`, acct) }
		// Three failures lock alice (the route's limit: 3 of 6 spent; the
		// address's failure budget: 3 of 4).
		for i := 0; i < 3; i++ {
			if v := login(e, "/login", "192.0.2.20", wrong("alice")); !v.Outcome.Admitted() {
				t.Fatalf("wrong password %d: %v %v, want admitted (for the upstream's 401)", i, v.Outcome, v.Reason)
			}
		}
		for i := 0; i < 3; i++ {
			if v := login(e, "/login", "192.0.2.20", right("alice")); !refusedBy(v, engine.ReasonLoginLocked) {
				t.Fatalf("alice locked: %v %v", v.Outcome, v.Reason)
			}
		}
		// The refusals spent nothing: 3 logins left.
		if n := admitted(t, e, "POST", "/login", "192.0.2.20", right("bob"), 10); n != 3 {
			t.Errorf("the route's limit admitted %d logins after 3 refused for a lock, want 3 (6 less 3 failures)", n)
		}
		// Another address fails 4 times (its failure budget), then is
		// refused by that budget twice.
		for i := 0; i < 4; i++ {
			if v := login(e, "/login", "192.0.2.21", wrong(fmt.Sprintf("user%d", i))); !v.Outcome.Admitted() {
				t.Fatalf("wrong password %d: %v %v, want admitted (for the upstream's 401)", i, v.Outcome, v.Reason)
			}
		}
		for i := 0; i < 2; i++ {
			if v := login(e, "/login", "192.0.2.21", right("carol")); !refusedBy(v, engine.ReasonLoginAddress) {
				t.Fatalf("over the failure budget: %v %v", v.Outcome, v.Reason)
			}
		}
		// Once the failure budget's 10 minutes are over (the route's hour
		// is not), the route's limit has 2 left.
		c.Add(10 * time.Minute)
		if n := admitted(t, e, "POST", "/login", "192.0.2.21", right("carol"), 10); n != 2 {
			t.Errorf("the route's limit admitted %d logins after 2 refused by the failure budget, want 2 (6 less 4 failures)", n)
		}
	})
}

// TestShadowChargedOnlyWhenAdmitted: a candidate limit in shadow is
// charged as if it were enforced beside the route's limit, so only for
// requests that limit admits: 6 requests against an enforced 3 and a
// candidate 4 admit 3, and the candidate, charged 3, would have refused
// none of them.
func TestShadowChargedOnlyWhenAdmitted(t *testing.T) {
	c := refusalClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		e, m := refusalEngine(t, s, c)
		if n := admitted(t, e, "GET", "/cand", "192.0.2.30", "", 3); n != 3 {
			t.Fatalf("admitted %d, want 3", n)
		}
		for i := 0; i < 3; i++ {
			if v := get(e, "/cand", "192.0.2.30"); v.Outcome != engine.Refused {
				t.Fatalf("over the route's limit: %v %v", v.Outcome, v.Reason)
			}
		}
		refused := counterValue(m.Shadow.WithLabelValues("candidate.cand", "cand", "refused"))
		allowed := counterValue(m.Shadow.WithLabelValues("candidate.cand", "cand", "allowed"))
		if allowed != 3 || refused != 0 {
			t.Errorf("the candidate counted %v allowed, %v refused; want 3 and 0 (charged only for admitted requests)", allowed, refused)
		}
	})
}

// TestRefusalsAtOnceChargeNothing: 30 requests at once from one address
// on the route with one slot and a global budget of 3: whatever mix of
// slot, plan and global refusals they meet, the plan and the global
// budget are charged exactly for the requests admitted.
func TestRefusalsAtOnceChargeNothing(t *testing.T) {
	c := refusalClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		e, _ := refusalEngine(t, s, c)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 30; i++ {
			wg.Go(func() {
				switch v := get(e, "/slow", "192.0.2.40"); {
				case v.Outcome.Admitted():
					ok.Add(1)
				case v.Outcome != engine.Refused:
					t.Errorf("%v %v", v.Outcome, v.Reason)
				}
			})
		}
		wg.Wait()
		k := int(ok.Load())
		t.Logf("30 at once: %d admitted", k)
		if k < 1 || k > 3 {
			t.Fatalf("%d admitted, want 1 to 3", k)
		}
		if n := admitted(t, e, "GET", "/api", "192.0.2.40", "", 10); n != 5-k {
			t.Errorf("the plan admitted %d more, want %d (5 less the %d admitted)", n, 5-k, k)
		}
		if n := admitted(t, e, "GET", "/slow", "192.0.2.41", "", 10); n != 3-k {
			t.Errorf("the global budget admitted %d more, want %d (3 less the %d admitted)", n, 3-k, k)
		}
	})
}
