package httplimit_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
	rstore "github.com/tollgate/tollgate/store/redis"
)

func scaleConfig(t *testing.T) *policy.Policy {
	t.Helper()
	return fixture.Parse(t, fixture.Scale, policy.BuiltinEcho)
}

// TestSeveralLimitsHeaders: both limits are charged together; the headers
// list both policies and report the most restrictive.
func TestSeveralLimitsHeaders(t *testing.T) {
	// Fixed windows of an hour and a day: a clock that stands still.
	c := fixture.StillClock()
	h := newService(t, scaleConfig(t), fixture.MemoryStore(t, c.Now), c.Now)
	rec := send(h, "GET", "/api/a", "", "", "X-API-Key", fixture.FreeKey) // the solo key
	if got := rec.Header().Get("RateLimit-Policy"); got != `"solo.minute";q=3;w=3600, "solo.hour";q=5;w=86400` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := rec.Header().Get("RateLimit"); !strings.HasPrefix(got, `"solo.minute";r=2;`) {
		t.Fatalf("RateLimit = %q, want the minute limit (2 left)", got)
	}
	send(h, "GET", "/api/a", "", "", "X-API-Key", fixture.FreeKey)
	send(h, "GET", "/api/a", "", "", "X-API-Key", fixture.FreeKey)
	rec = send(h, "GET", "/api/a", "", "", "X-API-Key", fixture.FreeKey)
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
	c := fixture.StillClock() // fixed windows of an hour
	s, err := rstore.New(redistest.Start(t).NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newService(t, scaleConfig(t), s, c.Now)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, k := range []string{"u1-key", "u2-key", "u3-key", fixture.FreeKey} {
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
