package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

func scaleConfig(t *testing.T, upstream, extra string) *policy.Policy {
	t.Helper()
	return fixture.Parse(t, fixture.Scale+extra, upstream)
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
	base := strings.Replace(strings.ReplaceAll(fixture.Scale, "UPSTREAM", up.URL), "plans:\n", "plans:"+plan, 1)
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
