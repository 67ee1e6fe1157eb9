package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/httplimit"
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

// refusalGateway starts a gateway on refusalPolicy, its clock stopped at
// 09:00 (the hour's windows never roll over unless a test moves it), in
// front of an upstream that answers /slow?hold only once hold is closed,
// and logins as loginUpstream does.
func refusalGateway(t *testing.T, redisURL string, hold chan struct{}) (*running, *fakeClock, *atomic.Int64) {
	t.Helper()
	login := newLoginUpstream(t, 0)
	var holding atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/login":
			login.Config.Handler.ServeHTTP(w, r)
		case r.URL.Query().Has("hold"):
			holding.Add(1)
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(up.Close)
	p, err := policy.Parse([]byte(strings.ReplaceAll(refusalPolicy, "UPSTREAM", up.URL)), "refusals.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	g := startClock(t, p, redisURL, clock.Now)
	if redisURL != "" {
		g.waitReady(t)
	}
	return g, clock, &holding
}

// call sends a request from client address from and returns the status
// and the problem type of a refusal ("" for none).
func call(t *testing.T, g *running, method, path, from, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, g.public+path, strings.NewReader(body))
	req.Header.Set("X-Forwarded-For", from)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	typ := ""
	if resp.StatusCode >= 400 {
		typ = string(b)
		if i := strings.Index(typ, "urn:tollgate:problem:"); i >= 0 {
			typ = typ[i:]
			typ = typ[:strings.IndexByte(typ, '"')]
		}
	}
	return resp.StatusCode, typ
}

// admitted sends requests from from until the first refusal (at most
// max) and returns how many were admitted. A refusal for a slot still
// held is retried: the request before may not have given it back yet.
func admitted(t *testing.T, g *running, method, path, from, body string, max int) int {
	t.Helper()
	for i, tries := 0, 0; i < max; i++ {
		code, typ := call(t, g, method, path, from, body)
		if typ == httplimit.ProblemTooManyInFlight && tries < 100 {
			tries++
			i--
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if code == http.StatusTooManyRequests {
			return i
		}
		if code >= 400 && code != http.StatusUnauthorized {
			t.Fatalf("%s %s from %s: %d %s; gateway log:\n%s", method, path, from, code, typ, g.logs)
		}
	}
	return max
}

// TestConcurrencyRefusalChargesNothing is the reported case: requests
// refused because the route's one slot is taken spend neither their
// plan's budget nor the route's global budget; and a request the plan
// refuses gives its slot back.
func TestConcurrencyRefusalChargesNothing(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		hold := make(chan struct{})
		g, _, holding := refusalGateway(t, redisURL, hold)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, "GET", g.public+"/slow?hold", nil)
			req.Header.Set("X-Forwarded-For", "192.0.2.1")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitFor(t, "a request holding the slot", 5*time.Second, func() bool { return holding.Load() == 1 })
		for i := 0; i < 4; i++ {
			if code, typ := call(t, g, "GET", "/slow", "192.0.2.1", ""); code != 429 || typ != httplimit.ProblemTooManyInFlight {
				t.Fatalf("while the slot is taken: %d %s, want 429 %s", code, typ, httplimit.ProblemTooManyInFlight)
			}
		}
		close(hold)
		cancel()
		<-done
		// The plan charged only the request that held the slot: 4 left.
		if n := admitted(t, g, "GET", "/api", "192.0.2.1", "", 10); n != 4 {
			t.Errorf("the plan admitted %d more after 4 refusals for the slot, want 4 (5 less the one admitted)", n)
		}
		// The global budget (3) charged only that request too: 2 left,
		// for anyone. The first client, its plan now used up, is refused
		// by it, and gives the slot back.
		if n := admitted(t, g, "GET", "/slow", "192.0.2.1", "", 1); n != 0 {
			t.Fatalf("over its plan: admitted")
		}
		if n := admitted(t, g, "GET", "/slow", "192.0.2.2", "", 10); n != 2 {
			t.Errorf("the global budget of 3 admitted %d more after one request and 4 refusals for the slot, want 2", n)
		}
	})
}

// TestGlobalRefusalChargesNothing: requests the route's global budget
// refuses do not spend the subject's plan, and requests the plan refuses
// do not spend the global budget.
func TestGlobalRefusalChargesNothing(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		g, _, _ := refusalGateway(t, redisURL, nil)
		// One address uses up its plan; its requests to /search, refused
		// by the plan, leave the global budget whole.
		if n := admitted(t, g, "GET", "/api", "192.0.2.10", "", 10); n != 5 {
			t.Fatalf("plan admitted %d, want 5", n)
		}
		for i := 0; i < 3; i++ {
			if code, typ := call(t, g, "GET", "/search", "192.0.2.10", ""); code != 429 || typ != httplimit.ProblemRateLimited {
				t.Fatalf("over its plan: %d %s", code, typ)
			}
		}
		if n := admitted(t, g, "GET", "/search", "192.0.2.11", "", 10); n != 2 {
			t.Fatalf("the global budget of 2 admitted %d after refusals by a plan, want 2", n)
		}
		// The global budget is used up: another address is refused by it
		// three times, and still has its whole plan.
		for i := 0; i < 3; i++ {
			if code, _ := call(t, g, "GET", "/search", "192.0.2.12", ""); code != 429 {
				t.Fatalf("global budget used up: %d", code)
			}
		}
		if n := admitted(t, g, "GET", "/api", "192.0.2.12", "", 10); n != 5 {
			t.Errorf("the plan admitted %d after 3 refusals by the global budget, want 5", n)
		}
	})
}

// TestLoginRefusalChargesNothing: login attempts the guard refuses (the
// account locked, the address over its failure budget) do not spend the
// route's own limit.
func TestLoginRefusalChargesNothing(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		g, clock, _ := refusalGateway(t, redisURL, nil)
		wrong := func(acct string) string { return fmt.Sprintf(`{"username":%q,"password":"guess"}`, acct) }
		right := func(acct string) string { return fmt.Sprintf(`{"username":%q,"password":"demo"}`, acct) }
		// Three failures lock alice (the route's limit: 3 of 6 spent; the
		// address's failure budget: 3 of 4).
		for i := 0; i < 3; i++ {
			if code, typ := call(t, g, "POST", "/login", "192.0.2.20", wrong("alice")); code != 401 {
				t.Fatalf("wrong password %d: %d %s", i, code, typ)
			}
		}
		for i := 0; i < 3; i++ {
			if code, typ := call(t, g, "POST", "/login", "192.0.2.20", right("alice")); code != 429 || typ != httplimit.ProblemLoginLocked {
				t.Fatalf("alice locked: %d %s", code, typ)
			}
		}
		// The refusals spent nothing: 3 logins left.
		if n := admitted(t, g, "POST", "/login", "192.0.2.20", right("bob"), 10); n != 3 {
			t.Errorf("the route's limit admitted %d logins after 3 refused for a lock, want 3 (6 less 3 failures)", n)
		}
		// Another address fails 4 times (its failure budget), then is
		// refused by that budget twice.
		for i := 0; i < 4; i++ {
			if code, typ := call(t, g, "POST", "/login", "192.0.2.21", wrong(fmt.Sprintf("user%d", i))); code != 401 {
				t.Fatalf("wrong password %d: %d %s", i, code, typ)
			}
		}
		for i := 0; i < 2; i++ {
			if code, typ := call(t, g, "POST", "/login", "192.0.2.21", right("carol")); code != 429 || typ != httplimit.ProblemTooManyFailed {
				t.Fatalf("over the failure budget: %d %s", code, typ)
			}
		}
		// Once the failure budget's 10 minutes are over (the route's hour
		// is not), the route's limit has 2 left.
		clock.Add(10 * time.Minute)
		if n := admitted(t, g, "POST", "/login", "192.0.2.21", right("carol"), 10); n != 2 {
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
	onStores(t, func(t *testing.T, redisURL string) {
		g, _, _ := refusalGateway(t, redisURL, nil)
		if n := admitted(t, g, "GET", "/cand", "192.0.2.30", "", 3); n != 3 {
			t.Fatalf("admitted %d, want 3", n)
		}
		for i := 0; i < 3; i++ {
			if code, _ := call(t, g, "GET", "/cand", "192.0.2.30", ""); code != 429 {
				t.Fatalf("over the route's limit: %d", code)
			}
		}
		refused, allowed := shadowCounts(t, g, "candidate.cand", "cand", 3)
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
	onStores(t, func(t *testing.T, redisURL string) {
		g, _, _ := refusalGateway(t, redisURL, nil)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 30; i++ {
			wg.Go(func() {
				switch code, typ := call(t, g, "GET", "/slow", "192.0.2.40", ""); {
				case code == http.StatusOK:
					ok.Add(1)
				case code != http.StatusTooManyRequests:
					t.Errorf("%d %s", code, typ)
				}
			})
		}
		wg.Wait()
		k := int(ok.Load())
		t.Logf("30 at once: %d admitted", k)
		if k < 1 || k > 3 {
			t.Fatalf("%d admitted, want 1 to 3", k)
		}
		if n := admitted(t, g, "GET", "/api", "192.0.2.40", "", 10); n != 5-k {
			t.Errorf("the plan admitted %d more, want %d (5 less the %d admitted)", n, 5-k, k)
		}
		if n := admitted(t, g, "GET", "/slow", "192.0.2.41", "", 10); n != 3-k {
			t.Errorf("the global budget admitted %d more, want %d (3 less the %d admitted)", n, 3-k, k)
		}
	})
}
