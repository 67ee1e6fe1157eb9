package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/store/memory"
)

// shapeBase is the fake clocks' start, an hour ahead of the real clock,
// so that a context deadline set on the fake clock never ends for real.
var shapeBase = time.Now().Add(time.Hour).Truncate(time.Second)

var provider10 = tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: 2 * time.Second}

// shapers returns n Shapers, as n instances would have, sharing one
// memory store and the fake clock c, sending to url's server.
func shapers(t *testing.T, n int, c *fakeClock, opts client.ShaperOptions) ([]*client.Shaper, *tollgate.Limiter) {
	t.Helper()
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	var out []*client.Shaper
	var lim *tollgate.Limiter
	for range n {
		l, err := tollgate.NewLimiter(st, provider10, tollgate.Options{Name: "provider"})
		if err != nil {
			t.Fatal(err)
		}
		lim = l.WithClock(c)
		opts.Now = c.Now
		s, err := client.NewShaper(nil, lim, opts)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out, lim
}

// A provider's 429 with Retry-After pushes the schedule back for every
// instance: the next request, through another instance, leaves only once
// the Retry-After has passed, one drain time after it.
func TestShaperPushBack(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	}))
	defer srv.Close()
	c := &fakeClock{t: shapeBase}
	ss, _ := shapers(t, 2, c, client.ShaperOptions{})
	get := func(s *client.Shaper) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		return s.RoundTrip(req)
	}
	resp, err := get(ss[0])
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first call: %v, %v; want the provider's 429", resp, err)
	}
	resp.Body.Close()
	start := c.Now()
	resp, err = get(ss[1])
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("second call: %v, %v", resp, err)
	}
	resp.Body.Close()
	if got := c.Now().Sub(start); got != 1100*time.Millisecond {
		t.Errorf("the other instance's call waited %v, want 1.1s (the Retry-After, then one drain time)", got)
	}
}

// Classes: batch (threshold 500 ms) fails at once, taking no turn, once
// the schedule's backlog is longer; critical still queues up to the max
// delay; a class not configured is an error; a context deadline closer
// than the turn fails before any turn is taken.
func TestShaperClasses(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	defer srv.Close()
	c := &fakeClock{t: shapeBase}
	ss, lim := shapers(t, 1, c, client.ShaperOptions{Classes: map[string]time.Duration{"critical": 0, "batch": 500 * time.Millisecond}})
	host := srv.Listener.Addr().String()
	for range 8 { // 8 turns taken by others: the next is 800 ms away
		if r, err := lim.Reserve(context.Background(), host, 1); err != nil || !r.OK() {
			t.Fatal(r, err)
		}
	}
	send := func(ctx context.Context, class string) error {
		req, _ := http.NewRequestWithContext(client.WithClass(ctx, class), http.MethodGet, srv.URL, nil)
		resp, err := ss[0].RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	before, _ := lim.AllowAt(context.Background(), host, 0, c.Now())
	err := send(context.Background(), "batch")
	var se *client.ShapeError
	if !errors.Is(err, tollgate.ErrWouldExceedDeadline) || !errors.As(err, &se) || se.Class != "batch" || se.Key != host {
		t.Fatalf("batch behind 800 ms: err = %v, want a ShapeError wrapping ErrWouldExceedDeadline", err)
	}
	dctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(500*time.Millisecond))
	defer cancel()
	if err := send(dctx, "critical"); !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
		t.Fatalf("critical with 500 ms left behind 800 ms: err = %v, want ErrWouldExceedDeadline", err)
	}
	if err := send(context.Background(), "bulk"); !errors.Is(err, client.ErrUnknownClass) {
		t.Fatalf("unknown class: err = %v", err)
	}
	if after, _ := lim.AllowAt(context.Background(), host, 0, c.Now()); after != before || calls.Load() != 0 {
		t.Fatalf("refused calls took turns or were sent: %+v, was %+v; %d sent", after, before, calls.Load())
	}
	start := c.Now()
	if err := send(context.Background(), "critical"); err != nil {
		t.Fatal(err)
	}
	if got := c.Now().Sub(start); got != 800*time.Millisecond || calls.Load() != 1 {
		t.Errorf("critical waited %v (%d sent), want 800ms", got, calls.Load())
	}
}

// NewShaper refuses a limit that does not shape and thresholds past the
// max delay.
func TestNewShaperInvalid(t *testing.T) {
	st := memory.New(memory.Options{})
	defer st.Close()
	gl, _ := tollgate.NewLimiter(st, tollgate.PerSecond(10), tollgate.Options{})
	if _, err := client.NewShaper(nil, gl, client.ShaperOptions{}); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("gcra limit: err = %v", err)
	}
	sl, _ := tollgate.NewLimiter(st, provider10, tollgate.Options{})
	if _, err := client.NewShaper(nil, sl, client.ShaperOptions{Classes: map[string]time.Duration{"batch": 3 * time.Second}}); err == nil {
		t.Error("a threshold past max delay was accepted")
	}
	if _, err := client.NewShaper(nil, nil, client.ShaperOptions{}); err == nil {
		t.Error("a nil limiter was accepted")
	}
}

// cancelingClock is a fakeClock whose Sleep is interrupted: the caller's
// context ends while it sleeps for its turn.
type cancelingClock struct {
	*fakeClock
	cancel context.CancelFunc
}

func (c cancelingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.cancel()
	return ctx.Err()
}

// A call whose context ends while it sleeps for its turn gives the turn
// back when it is still the last one, and is not sent.
func TestShaperGivesBackAbandonedTurn(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	defer srv.Close()
	st := memory.New(memory.Options{})
	defer st.Close()
	lim, err := tollgate.NewLimiter(st, provider10, tollgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := cancelingClock{&fakeClock{t: shapeBase}, cancel}
	lim = lim.WithClock(c)
	s, err := client.NewShaper(nil, lim, client.ShaperOptions{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	host := srv.Listener.Addr().String()
	for range 3 { // the next turn is 300 ms away
		if r, err := lim.Reserve(context.Background(), host, 1); err != nil || !r.OK() {
			t.Fatal(r, err)
		}
	}
	before, _ := lim.AllowAt(context.Background(), host, 0, c.Now())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if _, err := s.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if after, _ := lim.AllowAt(context.Background(), host, 0, c.Now()); after != before || calls.Load() != 0 {
		t.Errorf("after the abandoned turn: %+v, was %+v (%d sent); want it given back", after, before, calls.Load())
	}
}

// A Retry-After longer than MaxPushBack pushes the shared schedule back by
// MaxPushBack only: one response cannot stop every instance for days.
func TestShaperPushBackCapped(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "999999999")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	c := &fakeClock{t: shapeBase}
	ss, _ := shapers(t, 2, c, client.ShaperOptions{MaxPushBack: 1500 * time.Millisecond})
	for i, s := range ss {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		start := c.Now()
		resp, err := s.RoundTrip(req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		resp.Body.Close()
		if i == 1 {
			if got := c.Now().Sub(start); got != 1600*time.Millisecond {
				t.Errorf("the other instance's call waited %v, want 1.6s (MaxPushBack, then one drain time)", got)
			}
		}
	}
}
