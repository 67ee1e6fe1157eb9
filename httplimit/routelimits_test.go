package httplimit_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// routeLimitsConfig is the quickstart with two more routes: /api/search,
// whose limit (5 a minute) adds to the plan's and whose refusals are a
// 503 with a JSON body of its own, and /api/bulk, whose limit (3 a
// day) replaces the plan's and whose refusals are a 420 problem.
func routeLimitsConfig(t *testing.T) *policy.Policy {
	t.Helper()
	return fixture.Quickstart(t, append(fixture.Trusting("[127.0.0.0/8]"),
		"  - name: api\n", `  - name: search
    path: /api/search
    upstream: builtin:echo
    limit: {algorithm: fixed_window, rate: 5, period: 1m}
    limit_mode: add
    refusal: {status: 503, body: '{"error":"search is busy"}', content_type: application/json}
  - name: bulk
    path: /api/bulk
    upstream: builtin:echo
    limit: {algorithm: fixed_window, rate: 3, period: 1d}
    limit_mode: replace
    refusal: {status: 420}
  - name: api
`)...)
}

// TestRouteLimitAddsAndRefusal: a route limit that adds to the plan's
// is charged with it, all or nothing (5 searches leave the free plan 95
// for other routes); one that replaces it leaves the plan alone; and a
// route's refusals are answered with its own status and body, with
// Retry-After and the RateLimit headers.
func TestRouteLimitAddsAndRefusal(t *testing.T) {
	c := fixture.StillClock() // fixed windows of a minute and a day
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		h := newService(t, routeLimitsConfig(t), s, c.Now)
		for i := 0; i < 5; i++ {
			rec := send(h, "GET", "/api/search", "", "", "X-API-Key", fixture.FreeKey)
			if rec.Code != 200 || !strings.Contains(rec.Header().Get("RateLimit-Policy"), `"search";q=5`) ||
				!strings.Contains(rec.Header().Get("RateLimit-Policy"), `"free.minute";q=100`) {
				t.Fatalf("search %d: %d, RateLimit-Policy %q", i, rec.Code, rec.Header().Get("RateLimit-Policy"))
			}
		}
		rec := send(h, "GET", "/api/search", "", "", "X-API-Key", fixture.FreeKey)
		if rec.Code != 503 || rec.Body.String() != `{"error":"search is busy"}` || rec.Header().Get("Content-Type") != "application/json" ||
			rec.Header().Get("Retry-After") == "" || rec.Header().Get("RateLimit") == "" {
			t.Fatalf("the 6th search: %d %q %v", rec.Code, rec.Body, rec.Header())
		}
		// The free plan was charged for the 5 searches, not for the
		// refused one.
		if n, _ := admitUntilRefused(t, h, "/api/items", 200, "X-API-Key", fixture.FreeKey); n != 95 {
			t.Fatalf("after 5 searches the free plan admitted %d, want 95", n)
		}
		// The plan refusing a search is answered the search route's way.
		if rec := send(h, "GET", "/api/search", "", "", "X-API-Key", fixture.FreeKey); rec.Code != 503 {
			t.Fatalf("a search over the plan: %d, want 503", rec.Code)
		}
		// bulk replaces the plan: 3 a day per subject, whatever is left
		// of the plan, and the plan is not charged.
		for i := 0; i < 3; i++ {
			if rec := send(h, "GET", "/api/bulk", "", "", "X-API-Key", fixture.FreeKey); rec.Code != 200 {
				t.Fatalf("bulk %d: %d", i, rec.Code)
			}
		}
		rec = send(h, "GET", "/api/bulk", "", "", "X-API-Key", fixture.FreeKey)
		if rec.Code != 420 || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(rec.Body.String(), `"status":420`) {
			t.Fatalf("the 4th bulk: %d %s", rec.Code, rec.Body)
		}
		// Other refusals keep their answers.
		if rec := send(h, "GET", "/api/search", "", "", "X-API-Key", "not-a-key"); rec.Code != 401 {
			t.Fatalf("an invalid key on search: %d", rec.Code)
		}
	})
}
