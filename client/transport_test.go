package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

// fakeClock is an injected clock whose Sleep advances it and records the
// wait.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return ctx.Err()
}
func (c *fakeClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// script is a real HTTP server answering each request with the next of
// its handlers (the last one repeats), recording the bodies it got.
type script struct {
	*httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	bodies []string
}

func newScript(t *testing.T, steps ...http.HandlerFunc) *script {
	s := &script{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.hits.Add(1)) - 1
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.mu.Unlock()
		steps[min(n, len(steps)-1)](w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func refuse(status int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, "refused body")
	}
}

// tollgateRefusal is what a Tollgate gateway answers itself.
func tollgateRefusal(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.Header().Set("RateLimit", `"free.minute";r=0;t=1`)
	w.WriteHeader(http.StatusTooManyRequests)
	io.WriteString(w, `{"type":"urn:tollgate:problem:rate-limited","title":"Too Many Requests","status":429}`)
}

func ok(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fine") }

func newTransport(clk *fakeClock, opts client.Options) *client.Transport {
	opts.Now, opts.Sleep = clk.Now, clk.Sleep
	if opts.Rand == nil {
		opts.Rand = func() float64 { return 0 }
	}
	return &client.Transport{Options: opts}
}

func do(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestRetryAfterSeconds(t *testing.T) {
	s := newScript(t, refuse(429, "Retry-After", "2"), refuse(503, "Retry-After", "3"), ok)
	clk := &fakeClock{t: now}
	resp, body := do(t, newTransport(clk, client.Options{}), must(http.NewRequest("GET", s.URL, nil)))
	if resp.StatusCode != 200 || body != "fine" || s.hits.Load() != 3 {
		t.Fatalf("got %d %q after %d attempts", resp.StatusCode, body, s.hits.Load())
	}
	if got := clk.slept(); len(got) != 2 || got[0] != 2*time.Second || got[1] != 3*time.Second {
		t.Errorf("slept %v, want [2s 3s]", got)
	}
}

func TestRetryAfterDateFromServerDate(t *testing.T) {
	// The server's clock is an hour behind ours: the date counts from its
	// Date field.
	server := now.Add(-time.Hour)
	s := newScript(t, refuse(429, "Date", server.Format(http.TimeFormat), "Retry-After", server.Add(4*time.Second).Format(http.TimeFormat)), ok)
	clk := &fakeClock{t: now}
	do(t, newTransport(clk, client.Options{}), must(http.NewRequest("GET", s.URL, nil)))
	if got := clk.slept(); len(got) != 1 || got[0] != 4*time.Second {
		t.Errorf("slept %v, want [4s]", got)
	}
}

func TestJitterOnTopOfRetryAfter(t *testing.T) {
	s := newScript(t, refuse(429, "Retry-After", "1"), refuse(429, "Retry-After", "1"), refuse(429, "Retry-After", "1"), ok)
	clk := &fakeClock{t: now}
	do(t, newTransport(clk, client.Options{Rand: func() float64 { return 0.5 }, NoPacing: true}), must(http.NewRequest("GET", s.URL, nil)))
	// window = max(100ms·2^n, 1s) = 1s, 1s, 1s: half of it on top of 1s.
	want := []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond}
	if got := clk.slept(); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("slept %v, want %v", got, want)
	}
}

func TestBackoffWithoutRetryAfter(t *testing.T) {
	s := newScript(t, refuse(503))
	clk := &fakeClock{t: now}
	resp, body := do(t, newTransport(clk, client.Options{Rand: func() float64 { return 0.999999 }, MaxRetries: 5, MaxDelay: time.Second}), must(http.NewRequest("GET", s.URL, nil)))
	if resp.StatusCode != 503 || body != "refused body" || s.hits.Load() != 6 {
		t.Fatalf("got %d %q after %d attempts, want the last 503 after 6", resp.StatusCode, body, s.hits.Load())
	}
	got := clk.slept()
	caps := []time.Duration{100, 200, 400, 800, 1000}
	for i, c := range caps {
		if c *= time.Millisecond; i >= len(got) || got[i] > c || got[i] < c*99/100 {
			t.Errorf("retry %d slept %v, want just under %v (full jitter up to the capped exponential)", i, got, c)
		}
	}
}

func TestDeadlineReturnsResponseIntact(t *testing.T) {
	s := newScript(t, refuse(429, "Retry-After", "5"), ok)
	// A context's deadline is in real time: the clock starts there.
	clk := &fakeClock{t: time.Now()}
	ctx, cancel := context.WithDeadline(context.Background(), clk.t.Add(2*time.Second))
	defer cancel()
	resp, body := do(t, newTransport(clk, client.Options{}), must(http.NewRequestWithContext(ctx, "GET", s.URL, nil)))
	if resp.StatusCode != 429 || body != "refused body" || s.hits.Load() != 1 || len(clk.slept()) != 0 {
		t.Errorf("got %d %q after %d attempts and sleeps %v; want the 429 with its body, at once", resp.StatusCode, body, s.hits.Load(), clk.slept())
	}
}

func TestRetryAfterBeyondMaxDelay(t *testing.T) {
	s := newScript(t, refuse(429, "Retry-After", "60"), ok)
	clk := &fakeClock{t: now}
	resp, body := do(t, newTransport(clk, client.Options{MaxDelay: 10 * time.Second}), must(http.NewRequest("GET", s.URL, nil)))
	if resp.StatusCode != 429 || body != "refused body" || s.hits.Load() != 1 {
		t.Errorf("got %d %q after %d attempts; want the 429 returned", resp.StatusCode, body, s.hits.Load())
	}
}

func TestNonIdempotent(t *testing.T) {
	post := func(body io.Reader) *http.Request {
		return must(http.NewRequest("POST", "http://placeholder/", body))
	}
	for _, c := range []struct {
		name    string
		refusal http.HandlerFunc
		req     func(url string) *http.Request
		opts    client.Options
		hits    int64
	}{
		{"tollgate's own refusal, rewindable body: retried, same body", tollgateRefusal,
			func(url string) *http.Request {
				r := post(strings.NewReader("payload"))
				r.URL = must(r.URL.Parse(url))
				return r
			}, client.Options{}, 2},
		{"another server's bare 429: not retried", refuse(429, "Retry-After", "1"),
			func(url string) *http.Request {
				r := post(strings.NewReader("payload"))
				r.URL = must(r.URL.Parse(url))
				return r
			}, client.Options{}, 1},
		{"NotProcessed Never: not retried", tollgateRefusal,
			func(url string) *http.Request {
				r := post(strings.NewReader("payload"))
				r.URL = must(r.URL.Parse(url))
				return r
			}, client.Options{NotProcessed: client.Never}, 1},
		{"body that cannot be read twice: not retried", tollgateRefusal,
			func(url string) *http.Request {
				r := post(io.NopCloser(strings.NewReader("payload")))
				r.URL = must(r.URL.Parse(url))
				return r
			}, client.Options{}, 1},
		{"Idempotency-Key: retried", refuse(429, "Retry-After", "1"),
			func(url string) *http.Request {
				r := post(strings.NewReader("payload"))
				r.URL = must(r.URL.Parse(url))
				r.Header.Set("Idempotency-Key", "k1")
				return r
			}, client.Options{}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScript(t, c.refusal, ok)
			clk := &fakeClock{t: now}
			resp, body := do(t, newTransport(clk, c.opts), c.req(s.URL))
			if s.hits.Load() != c.hits {
				t.Fatalf("%d attempts, want %d", s.hits.Load(), c.hits)
			}
			if c.hits == 1 && (resp.StatusCode != 429 || !strings.Contains(body, "refused body") && !strings.Contains(body, "rate-limited")) {
				t.Errorf("got %d %q; want the refusal with its body intact", resp.StatusCode, body)
			}
			if c.hits == 2 {
				if resp.StatusCode != 200 {
					t.Errorf("got %d", resp.StatusCode)
				}
				for i, b := range s.bodies {
					if b != "payload" {
						t.Errorf("attempt %d sent body %q", i, b)
					}
				}
			}
		})
	}
}

func TestPacingWaitsForReset(t *testing.T) {
	s := newScript(t, refuse(200, "RateLimit", `"p";r=0;t=5`), ok)
	clk := &fakeClock{t: now}
	tr := newTransport(clk, client.Options{})
	do(t, tr, must(http.NewRequest("GET", s.URL+"/a", nil)))
	// /b is not known yet: it goes under the host's last policy.
	resp, _ := do(t, tr, must(http.NewRequest("GET", s.URL+"/b", nil)))
	if resp.StatusCode != 200 || s.hits.Load() != 2 {
		t.Fatalf("got %d after %d attempts", resp.StatusCode, s.hits.Load())
	}
	if got := clk.slept(); len(got) != 1 || got[0] != 5*time.Second {
		t.Errorf("slept %v, want [5s] before the second request", got)
	}
}

func TestPacingFailFast(t *testing.T) {
	s := newScript(t, refuse(200, "RateLimit", `"p";r=0;t=5`), ok)
	clk := &fakeClock{t: now}
	tr := newTransport(clk, client.Options{FailFast: true})
	do(t, tr, must(http.NewRequest("GET", s.URL+"/a", nil)))
	clk.t = clk.t.Add(2 * time.Second)
	_, err := tr.RoundTrip(must(http.NewRequest("GET", s.URL+"/a", nil)))
	var pe *client.PacedError
	if !errors.Is(err, client.ErrPaced) || !errors.As(err, &pe) || pe.Wait != 3*time.Second || pe.Policy != "p" {
		t.Fatalf("got %v; want ErrPaced with 3s to wait for policy p", err)
	}
	if s.hits.Load() != 1 {
		t.Errorf("the server saw %d requests; the paced one must not be sent", s.hits.Load())
	}
	clk.t = clk.t.Add(3 * time.Second)
	if resp, _ := do(t, tr, must(http.NewRequest("GET", s.URL+"/a", nil))); resp.StatusCode != 200 {
		t.Errorf("after the reset: %d", resp.StatusCode)
	}
}

func TestPacingPastDeadlineFails(t *testing.T) {
	s := newScript(t, refuse(200, "RateLimit", `"p";r=0;t=50`), ok)
	// A context's deadline is in real time: the clock starts there.
	clk := &fakeClock{t: time.Now()}
	tr := newTransport(clk, client.Options{})
	do(t, tr, must(http.NewRequest("GET", s.URL, nil)))
	ctx, cancel := context.WithDeadline(context.Background(), clk.t.Add(2*time.Second))
	defer cancel()
	if _, err := tr.RoundTrip(must(http.NewRequestWithContext(ctx, "GET", s.URL, nil))); !errors.Is(err, client.ErrPaced) {
		t.Errorf("got %v; want ErrPaced at once, the wait outlasting the deadline", err)
	}
	if len(clk.slept()) != 0 {
		t.Errorf("slept %v", clk.slept())
	}
}

func TestNoHeadersNoPacing(t *testing.T) {
	s := newScript(t, ok)
	clk := &fakeClock{t: now}
	tr := newTransport(clk, client.Options{FailFast: true})
	for range 5 {
		do(t, tr, must(http.NewRequest("GET", s.URL, nil)))
	}
	if s.hits.Load() != 5 || len(clk.slept()) != 0 {
		t.Errorf("%d sent, slept %v", s.hits.Load(), clk.slept())
	}
}

func TestRetryBudget(t *testing.T) {
	s := newScript(t, refuse(503, "Retry-After", "1"))
	clk := &fakeClock{t: now}
	// Two retries saved up, none coming back with time, a tenth per
	// request: the first request retries twice, the next few not at all.
	tr := newTransport(clk, client.Options{RetryBurst: 2, RetryPerSecond: 1e-9, RetryRatio: 0.1, NoPacing: true})
	for range 5 {
		do(t, tr, must(http.NewRequest("GET", s.URL, nil)))
	}
	if got := s.hits.Load(); got != 5+2 {
		t.Errorf("%d attempts for 5 requests, want 7 (2 retries in the budget)", got)
	}
}

// TestPacingWaitCappedByMaxDelay: a server that says a policy has nothing
// left for centuries (RateLimit t, or Retry-After, of any size) cannot
// make a request without a deadline wait past MaxDelay: it fails with
// ErrPaced at once, as a retry asked to wait past MaxDelay returns the
// refusal instead.
func TestPacingWaitCappedByMaxDelay(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"RateLimit t": refuse(200, "RateLimit", `"p";r=0;t=9999999999999`),
		"Retry-After": refuse(429, "Retry-After", "9999999999999"),
		"just past":   refuse(200, "RateLimit", `"p";r=0;t=31`),
		"HTTP-date":   refuse(429, "Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"),
	} {
		t.Run(name, func(t *testing.T) {
			s := newScript(t, h, ok)
			clk := &fakeClock{t: now}
			tr := newTransport(clk, client.Options{})
			do(t, tr, must(http.NewRequest("GET", s.URL+"/a", nil)))
			_, err := tr.RoundTrip(must(http.NewRequest("GET", s.URL+"/a", nil)))
			if !errors.Is(err, client.ErrPaced) {
				t.Errorf("got %v; want ErrPaced at once", err)
			}
			for _, d := range clk.slept() {
				if d > 30*time.Second {
					t.Fatalf("slept %v, past MaxDelay (30s)", d)
				}
			}
		})
	}
}

// inProcess is a Base that answers each request to host with h in
// process, as a server would over the loopback but without one, and
// sends the others on.
type inProcess struct {
	host string
	h    http.HandlerFunc
}

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != p.host {
		return http.DefaultTransport.RoundTrip(req)
	}
	rec := httptest.NewRecorder()
	p.h(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// TestPacerBounded: what the pacer keeps is bounded whatever the paths a
// client calls (ids in them) and the policy names servers answer with (a
// new one each time): a long-lived client must not grow without end. The
// 6,000 calls (past the 4,096 paths kept) are answered in process (the
// pacer reads only their answers): over the loopback they took 2.4 s.
func TestPacerBounded(t *testing.T) {
	var n atomic.Int64
	clk := &fakeClock{t: now}
	tr := newTransport(clk, client.Options{})
	tr.Base = inProcess{"pacer.test", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit", fmt.Sprintf(`"p%d";r=5;t=60`, n.Add(1)))
		io.WriteString(w, "fine")
	}}
	const calls = 6000
	for i := range calls {
		do(t, tr, must(http.NewRequest("GET", fmt.Sprintf("http://pacer.test/items/%d", i), nil)))
	}
	paths, hosts, policies := client.PacerSizes(tr)
	if paths > 4096 || hosts > 1024 || policies > 1024 {
		t.Fatalf("after %d calls to new paths under new policies the pacer keeps %d paths, %d hosts, %d policies", calls, paths, hosts, policies)
	}
	// It still paces: a policy with nothing left holds the next request.
	s2 := newScript(t, refuse(200, "RateLimit", `"q";r=0;t=5`), ok)
	do(t, tr, must(http.NewRequest("GET", s2.URL+"/a", nil)))
	do(t, tr, must(http.NewRequest("GET", s2.URL+"/a", nil)))
	if got := clk.slept(); len(got) != 1 || got[0] != 5*time.Second {
		t.Errorf("slept %v, want [5s]", got)
	}
}
