package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/capacity"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/policy"
)

// overloadPolicy sends /work to upstream under an adaptive limit that
// guarantees pro half of it and free a fifth, the plans' rates far above
// any load.
const overloadPolicy = `version: overload-test
identity: {secret: overload-test-secret-0123456789, anonymous_plan: free}
plans:
  free: {rate: 10000000, period: 1m}
  pro: {rate: 10000000, period: 1m}
api_keys:
  - {id: free-demo, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", plan: free}
  - {id: pro-demo, digest: "sha256:ff83448544d92a31f29f045bb4b32f207b8e8358882135d71cd07e235d682936", plan: pro}
routes:
  - name: work
    path: /work
    upstream: UPSTREAM
    adaptive: {sample_window: 500ms, min_rtt_samples: 20, rtt_buffer: 0, shares: {pro: 0.5, free: 0.2}}
`

// mixedLoad is half the requests from pro, half from free: at 3 C each
// alone is 1.5 C, more than the upstream serves, so that the shares
// bind.
func mixedLoad(i int) (string, http.Header) {
	if i%2 == 0 {
		return "pro", http.Header{"X-Api-Key": {fixture.ProKey}}
	}
	return "free", http.Header{"X-Api-Key": {fixture.FreeKey}}
}

// limitWatch polls a gateway's adaptive limit gauge every 100 ms.
type limitWatch struct {
	mu     sync.Mutex
	at     []time.Duration
	limits []float64
}

func watchLimit(ctx context.Context, t *testing.T, admin, upstream string) *limitWatch {
	re := regexp.MustCompile(`(?m)^tollgate_adaptive_limit\{upstream="` + regexp.QuoteMeta(upstream) + `"\} (\S+)$`)
	w := &limitWatch{}
	start := time.Now()
	go func() {
		for ctx.Err() == nil {
			resp, err := client.Get(admin + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if m := re.FindSubmatch(b); m != nil {
					v, _ := strconv.ParseFloat(string(m[1]), 64)
					w.mu.Lock()
					w.at, w.limits = append(w.at, time.Since(start)), append(w.limits, v)
					w.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// mean is the mean limit polled from from to to.
func (w *limitWatch) mean(from, to time.Duration) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum, n := 0.0, 0
	for i, at := range w.at {
		if at >= from && at < to {
			sum += w.limits[i]
			n++
		}
	}
	return sum / float64(max(n, 1))
}

// within returns how long after from the mean of 5 polls in a row first
// met ok, or -1 if it did not by from+d.
func (w *limitWatch) within(from, d time.Duration, ok func(float64) bool) time.Duration {
	for t := from; t < from+d; t += 100 * time.Millisecond {
		if ok(w.mean(t, t+500*time.Millisecond)) {
			return t + 500*time.Millisecond - from
		}
	}
	return -1
}

// TestAdaptiveOverload: an upstream that serves at most C = 50
// requests a second (16 workers of 320 ms: few enough for a loaded
// machine's CPU to serve them all through the gateway, each long beside
// its scheduling noise) and queues the rest, behind the
// real gateway, offered 3 C, open loop: the adaptive limit keeps its
// goodput at 90 % of C or more, the p99 of the requests it admits within
// twice the unloaded p99, and pro's part of the goodput at its share (a
// half) or more; when the upstream's capacity halves, the limit follows
// within 5 s, and comes back within 5 s of the capacity.
func TestAdaptiveOverload(t *testing.T) {
	up := capacity.New(16, 320*time.Millisecond)
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	t.Cleanup(up.Stop)
	p, err := policy.Parse([]byte(strings.Replace(overloadPolicy, "UPSTREAM", srv.URL, 1)), "overload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	defer c.CloseIdleConnections()
	C := up.Capacity()
	url := g.public + "/work"

	// Unloaded: 0.3 C, once the minimum RTT is measured.
	idle := capacity.Offer(ctx, c, url, 0.3*C, 6*time.Second, mixedLoad)
	unloaded := capacity.Summarize(idle, 3*time.Second, 6*time.Second)
	if unloaded.OK < 30 {
		t.Fatalf("unloaded: %+v: too few answered to measure a p99", unloaded)
	}

	// 3 C: 8 s at full capacity, 6 s at half of it, 6 s at full again.
	w := watchLimit(ctx, t, g.admin, srv.URL)
	time.AfterFunc(8*time.Second, func() { up.SetWorkers(8) })
	time.AfterFunc(14*time.Second, func() { up.SetWorkers(16) })
	shots := capacity.Offer(ctx, c, url, 3*C, 20*time.Second, mixedLoad)
	full := capacity.Summarize(shots, 2*time.Second, 8*time.Second)
	t.Logf("unloaded %+v", unloaded)
	t.Logf("at 3 C  %+v, pro %.2f", full, full.Share("pro"))
	t.Logf("limit: %.1f at full capacity, %.1f at half, %.1f back", w.mean(6*time.Second, 8*time.Second), w.mean(12*time.Second, 14*time.Second), w.mean(18*time.Second, 20*time.Second))
	if got := full.Goodput(); got < 0.9*C {
		t.Errorf("goodput %.0f/s, want at least 90%% of C = %.0f/s", got, 0.9*C)
	}
	if full.P99 > unloaded.P99*2 {
		t.Errorf("p99 of the admitted %v, want at most twice the unloaded p99 %v", full.P99, unloaded.P99)
	}
	if got := full.Share("pro"); got < 0.5 {
		t.Errorf("pro's part of the goodput %.2f, want at least its share 0.5", got)
	}
	if full.Errors > 0 {
		t.Errorf("%d requests failed or answered neither 2xx nor 503, the first: %v", full.Errors, firstError(shots))
	}
	before := w.mean(6*time.Second, 8*time.Second)
	if d := w.within(8*time.Second, 5*time.Second, func(l float64) bool { return l <= 0.75*before }); d < 0 {
		t.Errorf("the limit did not follow the capacity halved within 5 s: %.1f before, %.1f at 10-13 s", before, w.mean(10*time.Second, 13*time.Second))
	} else {
		t.Logf("the limit followed the capacity halved in %v", d)
	}
	if d := w.within(14*time.Second, 5*time.Second, func(l float64) bool { return l >= 0.85*before }); d < 0 {
		t.Errorf("the limit did not come back with the capacity within 5 s: %.1f before, %.1f at 16-19 s", before, w.mean(16*time.Second, 19*time.Second))
	} else {
		t.Logf("the limit came back in %v", d)
	}
}

// firstError is the first shot that failed or answered neither 2xx nor
// 503.
func firstError(shots []capacity.Shot) string {
	for _, s := range shots {
		if s.Err != nil {
			return s.Err.Error()
		}
		if s.Status != 0 && s.Status/100 != 2 && s.Status != http.StatusServiceUnavailable {
			return http.StatusText(s.Status)
		}
	}
	return "none"
}
