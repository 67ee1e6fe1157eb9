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
	s, err := rstore.New(srv.NewClient(t), rstore.Options{})
	if addr != srv.Addr {
		c, cerr := (&redistest.Server{Addr: addr}).Client()
		if cerr != nil {
			t.Fatal(cerr)
		}
		t.Cleanup(c.Close)
		s, err = rstore.New(c, rstore.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The wrapped store is still a Store: it passes the whole conformance
// suite with the deny cache off (with a deadline generous enough for -race
// on two cores), and the single-decision part with it on. (For a group
// refused from the cache only the refusing limit's decision is exact; see
// TestDenyCacheGroup.)
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tollgate.Store {
		s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: 5 * time.Second, DenyCacheSize: -1})
		t.Cleanup(func() { s.Close() })
		return s
	})
	t.Run("DenyCache", func(t *testing.T) {
		storetest.RunDecisions(t, func(t *testing.T) tollgate.Store {
			s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: 5 * time.Second})
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// TestDenyCacheGroup: a group refused by one limit is refused from the
// cache until that limit's RetryAfter, with that limit's decision exact.
func TestDenyCacheGroup(t *testing.T) {
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: 5 * time.Second})
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	pm, pd := uniq("g-min"), uniq("g-day")
	group := func(at time.Time) []algo.Decision {
		ds, err := s.AllowAll(ctx, []algo.Request{
			{Name: pm, Subject: "k", Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 2, Period: time.Minute}, Cost: 1, Now: at},
			{Name: pd, Subject: "k", Limit: algo.Limit{Algorithm: algo.FixedWindow, Rate: 100, Period: time.Hour}, Cost: 1, Now: at},
		})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	group(now)
	group(now)
	ds := group(now)
	if tollgate.Admitted(ds) || ds[0].RetryAfter != time.Minute {
		t.Fatalf("3rd: %+v", ds)
	}
	calls := s.Stats().Calls
	later := now.Add(20 * time.Second)
	ds = group(later)
	if s.Stats().Calls != calls || ds[0].Allowed || ds[0].RetryAfter != 40*time.Second || !ds[1].Allowed {
		t.Fatalf("cached group refusal: %+v (store calls %d -> %d)", ds, calls, s.Stats().Calls)
	}
	if ds = group(now.Add(time.Minute)); !tollgate.Admitted(ds) || s.Stats().Calls != calls+1 {
		t.Fatalf("after RetryAfter: %+v", ds)
	}
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
	s := resilience.New(redisStore(t, fp.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: 20 * time.Millisecond, OpenFor: 200 * time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	breakerP := uniq("breaker")
	req := algo.Request{Name: breakerP, Subject: "s", Limit: algo.Limit{Rate: 1000, Period: time.Minute}, Cost: 1}
	if _, err := s.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	// Redis now answers after 1 s; each call gives up at its 20 ms
	// deadline (the bound is loose: other tests share the machine).
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

// TestDenyCache checks that refusals are served locally until RetryAfter,
// only for costs at least the refused one, and with the same contract.
func TestDenyCache(t *testing.T) {
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: 5 * time.Second})
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	denyP, denySC := uniq("deny"), uniq("deny-sc")
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 10, Period: time.Minute}
	req := func(cost int64, at time.Time) algo.Decision {
		d, err := s.Allow(ctx, algo.Request{Name: denyP, Subject: "k", Limit: l, Cost: cost, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	req(8, now)
	d := req(5, now) // refused until the window ends
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("refusal: %+v", d)
	}
	calls := s.Stats().Calls
	later := now.Add(10 * time.Second)
	if c := req(5, later); c.Allowed || c.RetryAfter != 50*time.Second || c.Remaining != 2 || s.Stats().Calls != calls {
		t.Fatalf("cached refusal: %+v (store calls %d -> %d)", c, calls, s.Stats().Calls)
	}
	if c := req(2, later); !c.Allowed || s.Stats().Calls != calls+1 {
		t.Fatalf("a request of another cost must still ask the store: %+v", c)
	}
	// A sliding counter's Remaining grows before RetryAfter for costs above
	// 1, so such refusals are not cached; cost-1 refusals are.
	sc := algo.Limit{Algorithm: algo.SlidingWindowCounter, Rate: 4, Period: time.Minute}
	ask := func(cost int64) {
		if _, err := s.Allow(ctx, algo.Request{Name: denySC, Subject: "k", Limit: sc, Cost: cost, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	ask(4)
	before := s.Stats()
	ask(2)
	ask(2)
	ask(1)
	ask(1)
	ask(1)
	if st := s.Stats(); st.Calls-before.Calls != 3 || st.DenyHits-before.DenyHits != 2 {
		t.Fatalf("store calls %d, cache hits %d; want 3 and 2", st.Calls-before.Calls, st.DenyHits-before.DenyHits)
	}
	if c := req(5, now.Add(time.Minute)); !c.Allowed {
		t.Fatalf("after RetryAfter: %+v", c)
	}
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
