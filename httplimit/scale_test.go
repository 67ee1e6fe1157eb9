package httplimit_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// scalePolicy has a plan with two limits, a tenant budget, a route with a
// global budget, and three API keys (u1-key, u2-key, u3-key) of one
// tenant, beside the solo key (free-demo-key).
const scalePolicy = `version: scale-1
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
store: {timeout: 5s}
identity: {secret: scale-test-secret-0123456789, anonymous_plan: team}
plans:
  team:
    limits:
      - {name: burst, algorithm: fixed_window, rate: 10, period: 1h}
      - {name: daily, algorithm: sliding_log, rate: 1000, period: 24h}
    tenant: {algorithm: fixed_window, rate: 25, period: 1h}
  solo:
    limits:
      - {name: minute, algorithm: fixed_window, rate: 3, period: 1h}
      - {name: hour, algorithm: fixed_window, rate: 5, period: 24h}
api_keys:
  - {id: u1, digest: "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b", tenant: acme, user: u1, plan: team}
  - {id: u2, digest: "sha256:e244b2e3463f8e91cefe435f48a5fbd97335dc814920ae67c861e5950d4f04f4", tenant: acme, user: u2, plan: team}
  - {id: u3, digest: "sha256:c0ad84be416f65df1e13b1eea82361d05acbdd7225fc9e870b3812a2e950a14f", tenant: acme, user: u3, plan: team}
  - {id: solo, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", plan: solo}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
  - {name: search, path: /search, upstream: builtin:echo, global: {algorithm: fixed_window, rate: 12, period: 1h}}
`

func scaleConfig(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(scalePolicy), "scale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSeveralLimitsHeaders: both limits are charged together; the headers
// list both policies and report the most restrictive.
func TestSeveralLimitsHeaders(t *testing.T) {
	// Fixed windows of an hour and a day: a clock that stands still.
	c := stillClock()
	h := newService(t, scaleConfig(t), memoryStore(t, c.Now), c.Now)
	rec := send(h, "GET", "/api/a", "", "", "X-API-Key", freeKey) // the solo key
	if got := rec.Header().Get("RateLimit-Policy"); got != `"solo.minute";q=3;w=3600, "solo.hour";q=5;w=86400` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := rec.Header().Get("RateLimit"); !strings.HasPrefix(got, `"solo.minute";r=2;`) {
		t.Fatalf("RateLimit = %q, want the minute limit (2 left)", got)
	}
	send(h, "GET", "/api/a", "", "", "X-API-Key", freeKey)
	send(h, "GET", "/api/a", "", "", "X-API-Key", freeKey)
	rec = send(h, "GET", "/api/a", "", "", "X-API-Key", freeKey)
	if rec.Code != 429 || !strings.HasPrefix(rec.Header().Get("RateLimit"), `"solo.minute";r=0;`) {
		t.Fatalf("4th: %d %q", rec.Code, rec.Header().Get("RateLimit"))
	}
	if h.hits.Load() != 3 {
		t.Fatalf("the service saw %d", h.hits.Load())
	}
}

// TestRouteGlobalBudget: the search route's global budget (12) is shared
// by everyone, on Redis; each user's own limits still apply first.
func TestRouteGlobalBudget(t *testing.T) {
	c := stillClock() // fixed windows of an hour
	s, err := rstore.New(redistest.Start(t).NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newService(t, scaleConfig(t), s, c.Now)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, k := range []string{"u1-key", "u2-key", "u3-key", freeKey} {
		wg.Go(func() {
			for i := 0; i < 8; i++ {
				if send(h, "GET", "/search", "", "", "X-API-Key", k).Code == 200 {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 12 {
		t.Fatalf("global budget admitted %d, want exactly 12", admitted.Load())
	}
	rec := send(h, "GET", "/search", "", "", "X-API-Key", "u1-key")
	if rec.Code != 429 || !strings.Contains(rec.Header().Get("RateLimit-Policy"), `"global.search";q=12`) {
		t.Fatalf("after the global budget: %d %v", rec.Code, rec.Header())
	}
}
