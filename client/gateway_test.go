package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/policy"
)

const freeKey = "free-demo-key"

// startGateway serves examples/quickstart.yaml, with the free plan's
// minute limit edited to minuteLimit, on loopback with the memory store,
// in front of an upstream that counts what reaches it. It returns the
// public URL and the count.
func startGateway(t *testing.T, minuteLimit string) (string, *atomic.Int64) {
	t.Helper()
	hits := &atomic.Int64{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const old = "{name: minute, algorithm: sliding_log, rate: 100, period: 1m}"
	if !strings.Contains(string(b), old) {
		t.Fatalf("examples/quickstart.yaml no longer holds %q; update the test", old)
	}
	s := strings.ReplaceAll(string(b), "builtin:echo", up.URL)
	s = strings.Replace(s, old, minuteLimit, 1)
	p, err := policy.Parse([]byte(s), "quickstart-client-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Policy: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, pub, adm) }()
	t.Cleanup(func() {
		cancel()
		<-done
		g.Close()
	})
	return "http://" + pub.Addr().String(), hits
}

// counting is a Base transport that records every attempt the server
// answered: its status and when it was sent.
type counting struct {
	base http.RoundTripper
	mu   sync.Mutex
	sent []attempt
}

type attempt struct {
	at     time.Time
	status int
	retry  bool
	took   time.Duration // until the answer came back
}

func (c *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := c.base.RoundTrip(req)
	if err == nil {
		c.mu.Lock()
		c.sent = append(c.sent, attempt{at: at, status: resp.StatusCode, retry: req.Header.Get("X-Attempt") != "", took: time.Since(at)})
		c.mu.Unlock()
	}
	return resp, err
}

func (c *counting) attempts() []attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sent)
}

// TestPacedThroughGateway sends 300 requests with the free key at three
// times its rate through one client: every one succeeds, and the client
// paces itself so that fewer than 5% of them are refused at the server.
func TestPacedThroughGateway(t *testing.T) {
	const rate = 50 // a second
	url, hits := startGateway(t, fmt.Sprintf("{name: minute, algorithm: sliding_log, rate: %d, period: 1s}", rate))
	base := &http.Transport{MaxIdleConnsPerHost: 256}
	defer base.CloseIdleConnections()
	cnt := &counting{base: base}
	hc := &http.Client{Transport: &client.Transport{Base: cnt}}

	const n = 300
	start := time.Now()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / (3 * rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The deadline only bounds a hang: a request waits for the
			// ones paced before it (300 at 50/s: 6 s, 17 s on a loaded
			// machine), so it is ten times the run's.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/items/%d", url, i), nil)
			req.Header.Set("X-API-Key", freeKey)
			resp, err := hc.Do(req)
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("request %d: %s", i, resp.Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	took := time.Since(start)
	refused := 0
	all := cnt.attempts()
	var rtts []time.Duration
	for _, a := range all {
		if a.status == http.StatusTooManyRequests {
			refused++
		}
		rtts = append(rtts, a.took)
	}
	slices.Sort(rtts)
	t.Logf("%d requests in %v (%.0f/s offered, %d/s allowed): %d attempts, %d refused at the server (%.1f%%), %d reached the upstream; answers took p50 %v max %v",
		n, took.Round(time.Millisecond), float64(3*rate), rate, len(all), refused, 100*float64(refused)/n, hits.Load(),
		rtts[len(rtts)/2].Round(time.Millisecond), rtts[len(rtts)-1].Round(time.Millisecond))
	if got := hits.Load(); got != n {
		t.Errorf("upstream saw %d requests, want %d", got, n)
	}
	if refused*100 >= 5*n {
		t.Errorf("%d of %d requests refused at the server, want under 5%%", refused, n)
	}
}

// herd releases clients together, each with its own Transport (opts), at
// a limit that admits a few of them, and returns when each retry was
// sent, in seconds after the release, the waits the Transports chose
// before them (their Sleep, in seconds), and how many clients succeeded.
func herd(t *testing.T, clients int, opts client.Options) ([]float64, []float64, int64) {
	url, _ := startGateway(t, "{name: minute, algorithm: sliding_log, rate: 20, period: 1s}")
	base := &http.Transport{MaxIdleConnsPerHost: 256}
	defer base.CloseIdleConnections()
	cnt := &counting{base: base}
	// Warm the connections so the herd is not held up dialing.
	var warm sync.WaitGroup
	for range clients {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if resp, err := base.RoundTrip(must(http.NewRequest(http.MethodGet, url+"/nowhere", nil))); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	warm.Wait()

	var mu sync.Mutex
	var waits []float64
	opts.Sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d.Seconds())
		mu.Unlock()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range clients {
		tr := &client.Transport{Base: &markRetries{next: cnt}, Options: opts}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := must(http.NewRequest(http.MethodGet, url+"/api/herd", nil))
			req.Header.Set("X-API-Key", freeKey)
			<-release
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		}()
	}
	t0 := time.Now()
	close(release)
	wg.Wait()
	var retries []float64
	for _, a := range cnt.attempts() {
		if a.retry {
			retries = append(retries, a.at.Sub(t0).Seconds())
		}
	}
	slices.Sort(retries)
	mu.Lock()
	defer mu.Unlock()
	return retries, slices.Sorted(slices.Values(waits)), ok.Load()
}

// crowding returns the most retries in one 10 ms bucket.
func crowding(retries []float64) int {
	buckets := map[int64]int{}
	worst := 0
	for _, s := range retries {
		b := int64(s * 100)
		buckets[b]++
		worst = max(worst, buckets[b])
	}
	return worst
}

// TestHerdSpreads releases 50 clients together at a limit that admits 20
// of them: the refused ones' retries must spread out over the time after
// Retry-After, not come back together, and all must get through. Without
// jitter (the control) the same measure sees them return together. The
// measure is of the waits the Transports chose (their Sleep seam, a real
// sleep): when a retry then goes is that wait after its refusal, plus the
// machine's lateness, which on a loaded machine woke a bunch of sleepers
// together (11 in 10 ms) and spread the control's. The retries' spread
// and the first of them are checked on when they went.
func TestHerdSpreads(t *testing.T) {
	t.Parallel() // it waits in real time, on its own gateways
	const clients = 50
	retries, waits, ok := herd(t, clients, client.Options{MaxRetries: 10})
	if len(retries) < clients/3 {
		t.Fatalf("only %d retries; the limit should have refused most of the herd", len(retries))
	}
	mean, sd := meanSD(retries)
	worst := crowding(waits)
	t.Logf("jittered: %d clients, %d succeeded, %d retries from %.3fs to %.3fs after release, mean %.3fs, sd %.3fs; at most %d in one 10 ms bucket (%d of the waits chosen)",
		clients, ok, len(retries), retries[0], retries[len(retries)-1], mean, sd, crowding(retries), worst)
	if retries[0] < 0.9 {
		t.Errorf("a retry went %.3fs after release, before the Retry-After of 1 s", retries[0])
	}
	if sd < 0.15 {
		t.Errorf("retry times have a standard deviation of %.3fs; the herd did not spread", sd)
	}
	if limit := max(3, len(waits)/6); worst > limit {
		t.Errorf("%d waits in one 10 ms bucket (of %d), want at most %d", worst, len(waits), limit)
	}
	if ok != clients {
		t.Errorf("%d of %d clients succeeded", ok, clients)
	}

	// The control: no jitter, one retry each.
	ctl, ctlWaits, _ := herd(t, clients, client.Options{MaxRetries: 1, Rand: func() float64 { return 0 }})
	_, ctlSD := meanSD(ctl)
	t.Logf("control without jitter: %d retries, sd %.3fs; at most %d in one 10 ms bucket (%d of the waits chosen)", len(ctl), ctlSD, crowding(ctl), crowding(ctlWaits))
	if crowding(ctlWaits) <= max(3, len(ctlWaits)/6) {
		t.Errorf("without jitter the waits still spread (%d at most in a bucket): the measure cannot tell", crowding(ctlWaits))
	}
}

// markRetries marks every attempt of one client's request after the
// first as a retry, for the counting transport.
type markRetries struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (m *markRetries) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.n.Add(1) > 1 {
		req = req.Clone(req.Context())
		req.Header.Set("X-Attempt", "retry")
	}
	return m.next.RoundTrip(req)
}

func meanSD(xs []float64) (float64, float64) {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
