package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/httplimit"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestDailyQuotaResetsAtLocalMidnight: the quickstart's Free plan allows
// 1,000 requests a day beside its 100 a minute; the day ends at midnight in
// the file's zone (Asia/Ho_Chi_Minh, UTC+7), not at UTC midnight.
func TestDailyQuotaResetsAtLocalMidnight(t *testing.T) {
	hcm, err := time.LoadLocation("Asia/Ho_Chi_Minh")
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	clock := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, hcm)}
	g := startClock(t, config(t, up.URL, "[]"), "", clock.Now)
	for round := 0; round < 10; round++ {
		if n, _, _ := admitUntilRefused(t, g.public+"/api/items", 100, "X-API-Key", freeKey); n != 100 {
			t.Fatalf("round %d: admitted %d of 100", round, n)
		}
		clock.Add(61 * time.Second) // past the per-minute limit, same day
	}
	resp := get(t, g.public+"/api/items", "X-API-Key", freeKey)
	untilMidnight := time.Date(2026, 12, 2, 0, 0, 0, 0, hcm).Sub(clock.Now())
	wantT := strconv.FormatInt(int64((untilMidnight+time.Second-1)/time.Second), 10)
	if resp.StatusCode != 429 || resp.Header.Get("RateLimit") != `"free.day";r=0;t=`+wantT || resp.Header.Get("Retry-After") != wantT {
		t.Fatalf("1,001st request of the day: %d, RateLimit %q, Retry-After %q (want t=%s)",
			resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"), wantT)
	}
	// 17:00 UTC is midnight in Ho Chi Minh City: the quota is back.
	clock.Set(time.Date(2026, 12, 1, 16, 59, 59, 0, time.UTC))
	if code := get(t, g.public+"/api/items", "X-API-Key", freeKey).StatusCode; code != 429 {
		t.Fatalf("one second before local midnight: %d", code)
	}
	clock.Set(time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC))
	resp = get(t, g.public+"/api/items", "X-API-Key", freeKey)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"free.day";q=1000;w=86400`) {
		t.Fatalf("at local midnight: %d %v", resp.StatusCode, resp.Header)
	}
	if up.hits.Load() != 1001 {
		t.Fatalf("upstream saw %d, want 1,001", up.hits.Load())
	}
}

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

// TestLoginGuard: 5 wrong passwords lock the account; the 6th attempt is
// refused without reaching the upstream, from another client IP and with
// the right password; the lock doubles on the next offence; once it ends
// the right password works. A user who logs in fine is never locked.
func TestLoginGuard(t *testing.T) {
	up := newEchoUpstream(t)
	clock := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	g := startClock(t, config(t, up.URL, "[127.0.0.1/32]"), "", clock.Now)
	for i := 0; i < 5; i++ {
		if i > 0 {
			clock.Add(time.Second)
		}
		if code, _, body := login(t, g, "203.0.113.1", "Alice", "guess"); code != 401 {
			t.Fatalf("wrong password %d: %d %s", i+1, code, body)
		}
	}
	// Locked at the 5th failure (t+4s) for a minute.
	clock.Add(time.Second)
	code, h, body := login(t, g, "198.51.100.9", "alice", "demo")
	if code != 429 || h.Get("Retry-After") != "59" || !strings.Contains(body, httplimit.ProblemLoginLocked) {
		t.Fatalf("6th attempt, other IP, right password: %d Retry-After %q %s", code, h.Get("Retry-After"), body)
	}
	if up.hits.Load() != 5 {
		t.Fatalf("the upstream saw %d attempts, want 5", up.hits.Load())
	}
	// The lock ends at t+64s; five more failures lock it for twice as long.
	clock.Add(59 * time.Second)
	for i := 0; i < 5; i++ {
		login(t, g, "203.0.113.1", "alice", "guess")
	}
	if code, h, _ := login(t, g, "203.0.113.1", "alice", "demo"); code != 429 || h.Get("Retry-After") != "120" {
		t.Fatalf("second offence: %d Retry-After %q, want a 2-minute lock", code, h.Get("Retry-After"))
	}
	clock.Add(2 * time.Minute)
	if code, _, body := login(t, g, "203.0.113.1", "alice", "demo"); code != 200 {
		t.Fatalf("after the lock, the right password: %d %s", code, body)
	}
	// Good logins never count.
	for i := 0; i < 30; i++ {
		if code, _, body := login(t, g, "203.0.113.7", "bob", "demo"); code != 200 {
			t.Fatalf("bob's login %d: %d %s", i, code, body)
		}
		clock.Add(7 * time.Second) // under the route's 10 a minute
	}
}

// TestLoginIPSpray: one IP trying 50 accounts, one guess each, is stopped
// by the per-IP failure limit (20 per 10 minutes), not by account locks.
func TestLoginIPSpray(t *testing.T) {
	up := newEchoUpstream(t)
	clock := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	g := startClock(t, config(t, up.URL, "[127.0.0.1/32]"), "", clock.Now)
	stoppedAt := -1
	for i := 0; i < 50; i++ {
		code, _, body := login(t, g, "203.0.113.66", fmt.Sprintf("user%d", i), "guess")
		if code == 429 {
			if !strings.Contains(body, httplimit.ProblemTooManyFailed) {
				t.Fatalf("attempt %d: refused for another reason: %s", i, body)
			}
			if stoppedAt < 0 {
				stoppedAt = i
			}
		} else if code != 401 || stoppedAt >= 0 {
			t.Fatalf("attempt %d: %d after being stopped at %d", i, code, stoppedAt)
		}
		clock.Add(7 * time.Second) // under the route's 10 a minute
	}
	if stoppedAt != 20 || up.hits.Load() != 20 {
		t.Fatalf("stopped at attempt %d, upstream saw %d; want both 20", stoppedAt, up.hits.Load())
	}
	// Another address is not affected.
	if code, _, _ := login(t, g, "203.0.113.67", "user1", "demo"); code != 200 {
		t.Fatalf("another IP: %d", code)
	}
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
