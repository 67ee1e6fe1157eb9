package resilience_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/faultproxy"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
	"github.com/tollgate/tollgate/storetest"

	"github.com/tollgate/tollgate"
)

var srv *redistest.Server

var runs atomic.Int64

// uniq keeps repeated runs (-count) against one server apart.
func uniq(name string) string { return name + "-" + strconv.FormatInt(runs.Add(1), 10) }

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv, "rl:*")) }

func redisStore(t *testing.T, addr string) *rstore.Store {
	t.Helper()
	server := srv
	if addr != srv.Addr {
		server = &redistest.Server{Addr: addr} // a proxy in front of srv, or another server
	}
	s, err := rstore.New(server.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The wrapped store is still a Store: it passes the whole conformance
// suite (with a deadline generous enough for -race on two cores).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tollgate.Store {
		s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestShare(t *testing.T) {
	cases := []struct {
		in   algo.Limit
		n    int
		rate int64
		cap  int64
	}{
		{algo.Limit{Rate: 100, Period: time.Minute}, 2, 50, 50},
		{algo.Limit{Rate: 100, Period: time.Minute}, 1, 100, 100},
		{algo.Limit{Rate: 10, Period: time.Minute, Burst: 40}, 4, 2, 10},
		{algo.Limit{Rate: 3, Period: time.Minute}, 10, 1, 1},
		{algo.Limit{Algorithm: algo.FixedWindow, Rate: 100, Period: time.Minute, Burst: 100}, 3, 33, 33},
	}
	for _, c := range cases {
		got := resilience.Share(c.in, c.n)
		if got.Rate != c.rate || got.Capacity() != c.cap || got.Validate() != nil {
			t.Errorf("Share(%v, %d) = %v (capacity %d), want rate %d capacity %d", c.in, c.n, got, got.Capacity(), c.rate, c.cap)
		}
	}
}

// TestBreakerOpensAndCloses drives the breaker with injected latency: calls
// time out at the deadline, then fail at once, then recover.
func TestBreakerOpensAndCloses(t *testing.T) {
	fp, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	st := redisStore(t, fp.Addr)
	s := resilience.New(st, memory.New(memory.Options{}), resilience.Options{Timeout: testenv.ShortStoreTimeout, OpenFor: 200 * time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	breakerP := uniq("breaker")
	req := algo.Request{Name: breakerP, Subject: "s", Limit: algo.Limit{Rate: 1000, Period: time.Minute}, Cost: 1}
	// The store's first calls are made without the breaker's deadline,
	// which a loaded machine misses: they must succeed. They load the
	// script, and open the client's connections (rueidis opens its four
	// one by one, on first use) in pipelining mode, as a busy gateway's
	// are: a context without a deadline does that. A connection still in
	// its first mode (one call at a time) is closed by a call that times
	// out, and the next call on it opens another: while Redis is slow,
	// rueidis (v1.0.79) can hold that call up to a second, past any
	// deadline, when the new connection's handshake fails.
	warm, stopWarm := context.WithCancel(ctx)
	defer stopWarm()
	for range 64 {
		if _, err := st.Allow(warm, req); err != nil {
			t.Fatal(err)
		}
	}
	// Redis now answers after 1 s each way; each call gives up at its
	// 20 ms deadline. Time is the property: the bound, 500 ms, is 25
	// times the deadline, and half of what waiting for Redis would take.
	fp.SetLatency(time.Second)
	for i := 0; i < resilience.DefaultFailuresToOpen; i++ {
		start := time.Now()
		_, err := s.Allow(ctx, req)
		if !errors.Is(err, resilience.ErrUnavailable) {
			t.Fatalf("call %d: %v", i, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("call %d took %v, past the 20ms deadline", i, d)
		}
	}
	if !s.Degraded() || s.State() != "open" {
		t.Fatalf("breaker %s after %d timeouts", s.State(), resilience.DefaultFailuresToOpen)
	}
	calls := s.Stats().Calls
	if _, err := s.Allow(ctx, req); !errors.Is(err, resilience.ErrUnavailable) || s.Stats().Calls != calls {
		t.Fatalf("open breaker still called the store: %v", err)
	}
	// Invalid input is reported as itself, not as unavailability.
	bad := req
	bad.Cost = 5000
	if _, err := s.Allow(ctx, bad); !errors.Is(err, algo.ErrCostExceedsBurst) && !errors.Is(err, resilience.ErrUnavailable) {
		t.Fatalf("cost above burst: %v", err)
	}
	fp.SetLatency(0)
	deadline := time.Now().Add(5 * time.Second)
	for s.Degraded() && time.Now().Before(deadline) {
		s.Allow(ctx, req)
		time.Sleep(20 * time.Millisecond)
	}
	if s.Degraded() {
		t.Fatal("breaker never closed after the latency went away")
	}
}

// deafStore is a real store behind a client that does not heed its
// context: every call waits until the test lets it go (as rueidis
// v1.0.79 makes a call wait for a connection being dialled, whatever its
// deadline).
type deafStore struct {
	tollgate.Store
	letGo chan struct{}
}

func (d *deafStore) Allow(ctx context.Context, r algo.Request) (algo.Decision, error) {
	<-d.letGo
	return d.Store.Allow(ctx, r)
}

func (d *deafStore) AllowAll(ctx context.Context, rs []algo.Request) ([]algo.Decision, error) {
	<-d.letGo
	return d.Store.AllowAll(ctx, rs)
}

// TestDeadlineHeldByTheWrapper: the deadline is the wrapper's promise,
// whatever the store's client does. Behind a 20 ms deadline, a gateway's
// request waited 5 s for rueidis to dial a connection to a slow Redis.
// With a store that answers only when let go, every call gives up as
// unavailable near its deadline, the breaker opens, and the calls given
// up on finish harmlessly once let go. Time is the property: the bound,
// 2 s, is 100 times the deadline; without the wrapper's own deadline the
// calls would wait until the test let them go, after the bound.
func TestDeadlineHeldByTheWrapper(t *testing.T) {
	deaf := &deafStore{Store: memory.New(memory.Options{}), letGo: make(chan struct{})}
	s := resilience.New(deaf, memory.New(memory.Options{}), resilience.Options{Timeout: testenv.ShortStoreTimeout})
	defer s.Close()
	req := algo.Request{Name: uniq("deaf"), Subject: "s", Limit: algo.Limit{Rate: 1000, Period: time.Minute}, Cost: 1}
	const calls = 16
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, calls)
	for i := range calls {
		go func() {
			start := time.Now()
			var err error
			if i%2 == 0 {
				_, err = s.Allow(context.Background(), req)
			} else {
				_, err = s.AllowAll(context.Background(), []algo.Request{req})
			}
			results <- result{time.Since(start), err}
		}()
	}
	bound := time.After(2 * time.Second)
	for i := range calls {
		select {
		case r := <-results:
			if !errors.Is(r.err, resilience.ErrUnavailable) && !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("a call behind the deadline: %v, want unavailable", r.err)
			}
		case <-bound:
			close(deaf.letGo)
			t.Fatalf("%d of %d calls still waiting 2 s behind a %v deadline", calls-i, calls, testenv.ShortStoreTimeout)
		}
	}
	if s.State() != "open" {
		t.Errorf("breaker %s after %d calls past the deadline", s.State(), calls)
	}
	close(deaf.letGo) // the calls given up on finish, their answers dropped
}

// TestFallbackShare checks the local share and a cost larger than it.
func TestFallbackShare(t *testing.T) {
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Instances: 4})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 100, Period: time.Minute}
	fbP := uniq("fb")
	admitted := 0
	for i := 0; i < 100; i++ {
		d, err := s.Fallback(ctx, algo.Request{Name: fbP, Subject: "k", Limit: l, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 25 {
		t.Fatalf("fallback admitted %d, want the share 25", admitted)
	}
	if d, err := s.Fallback(ctx, algo.Request{Name: fbP, Subject: "j", Limit: l, Cost: 30}); err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("cost above the share: %+v %v", d, err)
	}
}

// A push back reaches the local fallback too: while Redis is cut off,
// PushBack reports ErrUnavailable, and the fallback's share of the limit
// keeps to the pushed-back schedule.
func TestPushBackReachesFallback(t *testing.T) {
	fp, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	// The fallback decides on a still clock: the turn it gives is the
	// push back's, however long the calls take.
	now := minute
	s := resilience.New(redisStore(t, fp.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.ShortStoreTimeout, Now: fixedClock(&now)})
	defer s.Close()
	ctx := context.Background()
	shaper := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: 2 * time.Second}
	req := algo.Request{Name: uniq("pushback"), Subject: "s", Limit: shaper}
	fp.Cut()
	if _, err := s.PushBack(ctx, req, time.Second); !errors.Is(err, resilience.ErrUnavailable) {
		t.Fatalf("push back with Redis cut off: err = %v, want ErrUnavailable", err)
	}
	req.Cost = 1
	d, err := s.Fallback(ctx, req)
	if err != nil || !d.Allowed || d.Delay <= 900*time.Millisecond {
		t.Fatalf("fallback after the push back: %+v, %v; want a turn about 1.1 s away", d, err)
	}
	if _, err := s.PushBack(ctx, algo.Request{Name: req.Name, Subject: "s", Limit: algo.Limit{Rate: 1, Period: time.Second}}, time.Second); !errors.Is(err, algo.ErrInvalidRequest) {
		t.Errorf("push back of a limit that does not shape: err = %v, want ErrInvalidRequest", err)
	}
}

// BenchmarkAllow is a decision through the wrapper (breaker, deadline,
// memo) on a memory store: what the wrapper adds to a store call.
func BenchmarkAllow(b *testing.B) {
	s := resilience.New(memory.New(memory.Options{}), memory.New(memory.Options{}), resilience.Options{})
	defer s.Close()
	req := algo.Request{Name: "bench", Subject: "s", Limit: algo.Limit{Rate: 1 << 40, Period: time.Second}, Cost: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Allow(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
