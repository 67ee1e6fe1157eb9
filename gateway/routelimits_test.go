package gateway_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// routeLimitsConfig is the quickstart with two more routes: /api/search,
// whose limit (5 a minute) adds to the plan's and whose refusals are a
// 503 with a JSON body of its own, and /api/bulk, whose limit (3 a
// minute) replaces the plan's and whose refusals are a 420 problem.
func routeLimitsConfig(t *testing.T) *policy.Policy {
	t.Helper()
	p := quickstart(t, policy.BuiltinEcho, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
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
`)
	return p
}

// TestRouteLimitAddsAndRefusal: a route limit that adds to the plan's
// is charged with it, all or nothing (5 searches leave the free plan 95
// for other routes); one that replaces it leaves the plan alone; and a
// route's refusals are answered with its own status and body, with
// Retry-After and the RateLimit headers.
func TestRouteLimitAddsAndRefusal(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		g := startStill(t, routeLimitsConfig(t), redisURL) // fixed windows of a minute and a day
		for i := 0; i < 5; i++ {
			resp := get(t, g.public+"/api/search", "X-API-Key", freeKey)
			if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"search";q=5`) ||
				!strings.Contains(resp.Header.Get("RateLimit-Policy"), `"free.minute";q=100`) {
				t.Fatalf("search %d: %d, RateLimit-Policy %q", i, resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
			}
		}
		resp, body := getBody(t, g.public+"/api/search", "X-API-Key", freeKey)
		if resp.StatusCode != 503 || string(body) != `{"error":"search is busy"}` || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
			t.Fatalf("the 6th search: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		// The free plan was charged for the 5 searches, not for the
		// refused one.
		if n, _, _ := admitUntilRefused(t, g.public+"/api/items", 200, "X-API-Key", freeKey); n != 95 {
			t.Fatalf("after 5 searches the free plan admitted %d, want 95", n)
		}
		// The plan refusing a search is answered the search route's way.
		if resp := get(t, g.public+"/api/search", "X-API-Key", freeKey); resp.StatusCode != 503 {
			t.Fatalf("a search over the plan: %d, want 503", resp.StatusCode)
		}
		// bulk replaces the plan: 3 a day per subject, whatever is left
		// of the plan, and the plan is not charged.
		for i := 0; i < 3; i++ {
			if resp := get(t, g.public+"/api/bulk", "X-API-Key", freeKey); resp.StatusCode != 200 {
				t.Fatalf("bulk %d: %d", i, resp.StatusCode)
			}
		}
		resp, body = getBody(t, g.public+"/api/bulk", "X-API-Key", freeKey)
		if resp.StatusCode != 420 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), `"status":420`) {
			t.Fatalf("the 4th bulk: %d %s", resp.StatusCode, body)
		}
		// Other refusals keep their answers.
		if resp := get(t, g.public+"/api/search", "X-API-Key", "not-a-key"); resp.StatusCode != 401 {
			t.Fatalf("an invalid key on search: %d", resp.StatusCode)
		}
	})
}
