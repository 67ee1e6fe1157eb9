package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
)

// fakeClock is a clock that stands still at t.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

// echoUpstream is the demo upstream (password "demo") behind a counter.
type echoUpstream struct {
	*httptest.Server
	hits atomic.Int64
}

func newEchoUpstream(t *testing.T) *echoUpstream {
	u := &echoUpstream{}
	echo := gateway.Echo()
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		echo.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func login(t *testing.T, g *running, from, user, password string) (int, http.Header, string) {
	t.Helper()
	body := fmt.Sprintf(`{"username":%q,"password":%q}`, user, password)
	req, _ := http.NewRequest("POST", g.public+"/login", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", from)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestConcurrencyLimit: 100 concurrent slow requests against a limit of 10
// in flight: never more than 10 reach the upstream at once; slots come
// back when clients disconnect.
func TestConcurrencyLimit(t *testing.T) {
	var inFlight, peak, hits atomic.Int64
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	g := start(t, config(t, up.URL, "[]"), "")
	var codes sync.Map
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := get(t, g.public+"/api/reports", "X-API-Key", proKey).StatusCode
			n, _ := codes.LoadOrStore(code, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}()
	}
	// Released once the 90 are refused and the 10 admitted are all at the
	// upstream: one admitted but still on its way there when the others
	// were released (a loaded machine) passed without waiting, and the
	// peak was 9.
	waitFor(t, "the refusals, and the admitted at the upstream", 10*time.Second, func() bool {
		n, ok := codes.Load(429)
		return ok && n.(*atomic.Int64).Load() == 90 && inFlight.Load() >= 10
	})
	close(release)
	wg.Wait()
	ok, _ := codes.Load(200)
	t.Logf("100 concurrent: peak in flight at the upstream %d; %d admitted", peak.Load(), ok.(*atomic.Int64).Load())
	if peak.Load() != 10 || ok.(*atomic.Int64).Load() != 10 {
		t.Fatalf("peak %d, admitted %d; want 10 and 10", peak.Load(), ok.(*atomic.Int64).Load())
	}

	// Ten clients hold every slot, then hang up: the slots come back.
	release = make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	before := hits.Load()
	for i := 0; i < 10; i++ {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", g.public+"/api/reports", nil)
			req.Header.Set("X-API-Key", proKey)
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "ten slow requests in flight", 5*time.Second, func() bool { return hits.Load()-before == 10 })
	if code := get(t, g.public+"/api/reports", "X-API-Key", proKey).StatusCode; code != 429 {
		t.Fatalf("an 11th while ten are held: %d", code)
	}
	cancel()
	took := waitFor(t, "slots back after the clients left", 5*time.Second, func() bool {
		req, _ := http.NewRequest("GET", g.public+"/api/reports?probe", nil)
		req.Header.Set("X-API-Key", proKey)
		rctx, rcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer rcancel()
		resp, err := client.Do(req.WithContext(rctx))
		if err != nil {
			return true // admitted: it is waiting at the upstream
		}
		resp.Body.Close()
		return resp.StatusCode != 429
	})
	t.Logf("slots came back %v after the clients disconnected", took)
}

// TestShaping: 50 requests at once against 10/s with burst 1 and a 2 s
// max delay: 21 pass (one at once, then one every 100 ms up to 2 s),
// spread out at the rate; the rest are refused. "At once" is the still
// clock's doing: every decision is at the same instant however the
// machine schedules the 50 (on the real clock, a loaded machine spread
// them out and more passed).
func TestShaping(t *testing.T) {
	t.Parallel() // its own gateway; it mostly waits out the delays
	var mu sync.Mutex
	var arrivals []time.Time
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	defer up.Close()
	g := startStill(t, config(t, up.URL, "[]"), "")
	var passed, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			switch get(t, g.public+"/api/webhooks", "X-API-Key", proKey).StatusCode {
			case 200:
				passed.Add(1)
			case 429:
				refused.Add(1)
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	span := arrivals[len(arrivals)-1].Sub(arrivals[0])
	t.Logf("shaping: %d passed, %d refused; upstream saw them over %v (%.0f ms apart on average)",
		passed.Load(), refused.Load(), span, float64(span.Milliseconds())/float64(len(arrivals)-1))
	if passed.Load() != 21 || refused.Load() != 29 {
		t.Fatalf("passed %d, refused %d; want 21 passed and the rest refused", passed.Load(), refused.Load())
	}
	// Spread at the rate: the delays are waited in real time (time is the
	// property: they fire), the k-th admitted held k × 100 ms from its
	// decision, made after began. So the k-th arrival is at least k ×
	// 100 ms after began: a lower bound, which load only helps to meet.
	// A request held far past its delay fails at the client's timeout.
	for k, a := range arrivals {
		if d, want := a.Sub(began), time.Duration(k)*100*time.Millisecond; d < want {
			t.Fatalf("arrival %d came %v after the requests were sent, want at least %v: not held to the rate", k, d, want)
		}
	}
}
