package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// scalePolicy has a plan with two limits, a tenant budget, a route with a
// global budget, and three API keys (u1-key, u2-key, u3-key) of one tenant.
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
  - {name: api, path: /api/, upstream: UPSTREAM}
  - {name: search, path: /search, upstream: UPSTREAM, global: {algorithm: fixed_window, rate: 12, period: 1h}}
`

func scaleConfig(t *testing.T, upstream, extra string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(strings.ReplaceAll(scalePolicy, "UPSTREAM", upstream)+extra), "scale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHierarchyThroughGateways: three users limited to 10 each in a tenant
// limited to 25, hammering through two gateways on one Redis: exactly 25
// get through, none more than 10.
func TestHierarchyThroughGateways(t *testing.T) {
	flushShared(t)
	up := newUpstream(t)
	p := scaleConfig(t, up.URL, "")
	url := "redis://" + srv.Addr + "/0"
	gs := []*running{startStill(t, p, url), startStill(t, p, url)} // fixed windows of an hour
	keys := []string{"u1-key", "u2-key", "u3-key"}
	var per [3]atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 30; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				resp := get(t, gs[w%2].public+"/api/x", "X-API-Key", keys[w%3])
				if resp.StatusCode == 200 {
					per[w%3].Add(1)
				} else if resp.StatusCode != 429 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}(w)
	}
	wg.Wait()
	total := per[0].Load() + per[1].Load() + per[2].Load()
	t.Logf("per user: %d %d %d", per[0].Load(), per[1].Load(), per[2].Load())
	if total != 25 || up.hits.Load() != 25 {
		t.Fatalf("tenant admitted %d (upstream %d), want exactly 25", total, up.hits.Load())
	}
	for i := range per {
		if per[i].Load() > 10 {
			t.Fatalf("user %d got %d, more than 10", i+1, per[i].Load())
		}
	}
}

// TestTwoRegions: two regions, each a gateway on its own Redis, split a
// global limit of 100 (plan solo's hour limit raised) with a 10% margin:
// together they never admit more than 100.
func TestTwoRegions(t *testing.T) {
	t.Parallel() // its own Redis servers and gateways
	up := newUpstream(t)
	plan := `
  wide: {algorithm: fixed_window, rate: 100, period: 1h}
`
	base := strings.Replace(strings.ReplaceAll(scalePolicy, "UPSTREAM", up.URL), "plans:\n", "plans:"+plan, 1)
	base = strings.Replace(base, "anonymous_plan: team", "anonymous_plan: wide", 1)
	var gs []*running
	for _, region := range []string{"eu", "us"} {
		rs := redistest.Start(t)
		p, err := policy.Parse([]byte(base+fmt.Sprintf("region: {name: %s, count: 2, margin: 0.1}\n", region)), "region.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if q := p.Plans["wide"].Limits[0].Limit.Rate; q != 45 {
			t.Fatalf("region share %d, want 45", q)
		}
		gs = append(gs, startStill(t, p, "redis://"+rs.Addr+"/0")) // a fixed window of an hour
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if get(t, gs[(w+i)%2].public+"/api/x").StatusCode == http.StatusOK {
					admitted.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	t.Logf("two regions admitted %d of 320 against a global limit of 100 (90 after the margin)", admitted.Load())
	if admitted.Load() > 100 || admitted.Load() != 90 {
		t.Fatalf("admitted %d, want 90 (45 per region), never above 100", admitted.Load())
	}
}
