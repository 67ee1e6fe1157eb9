package redis_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/resilience"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestSlidingLogTrimBounded is the attack on everyone's store deadline
// through one subject's own sliding log. A limit of 100,000 a second kept
// as a log (algo.MaxLogRate) holds one member per admitted unit; the
// subject spends it all at t0 and comes back once the window has passed.
// Its next request used to remove all 100,000 members in one script:
// about 37 ms of Redis, single-threaded, during which every other
// gateway's call waited past the 20 ms deadline — five such failures in a
// row open the breaker, and everyone is on the fallback (login and OTP
// refused). A decision's work on the log must not grow with what has
// left the window.
func TestSlidingLogTrimBounded(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: 10 * time.Second}
	// Filled one window ago, so the next request on Redis' clock finds it
	// all out of the window.
	req := algo.Request{Name: "logtrim", Subject: unique("attacker"), Limit: l, Cost: 1}
	fill(t, s, req, time.Now().Add(-l.Period-time.Second), algo.MaxLogRate)
	key := rstore.Key(req.Name, req.Subject, l.Algorithm)
	start := time.Now()
	d, err := s.Allow(ctx, req)
	took := time.Since(start)
	if err != nil || !d.Allowed || d.Remaining != algo.MaxLogRate-1 {
		t.Fatalf("after the window: %+v %v, want admitted with %d remaining", d, err, algo.MaxLogRate-1)
	}
	t.Logf("one request after a full log's window: %v", took)
	if left := zcard(t, c, key); left < algo.MaxLogRate-40 {
		t.Errorf("one request after a full log's window left %d of its %d members: it removed them all at once", left, algo.MaxLogRate+1)
	}
	if limit := resilience.DefaultTimeout / 2; took > limit {
		t.Errorf("one request after a full log's window took Redis %v, want under %v (half the store deadline)", took, limit)
	}
}

// fill charges n requests of req, at, from 64 goroutines.
func fill(t *testing.T, s *rstore.Store, req algo.Request, at time.Time, n int) {
	t.Helper()
	req.Now = at
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				if d, err := s.Allow(context.Background(), req); err != nil || !d.Allowed {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("filling the log: %d of %d requests not admitted", f, n)
	}
}

func zcard(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Zcard().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSlidingLogTrimBoundedInBatch: the same attack through a batch. While
// Redis is busy, up to 64 decisions go in one script call; 64 subjects
// each back after a full log's window (500 members here) made one call
// remove 32,000 members, and with a per-decision bound of 1,024 all the
// same. What a batch removes of what has left the window must stay far
// below the deadline too.
func TestSlidingLogTrimBoundedInBatch(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 500, Period: 10 * time.Second}
	past := time.Now().Add(-l.Period - time.Second)
	reqs := make([]algo.Request, 64)
	for i := range reqs {
		reqs[i] = algo.Request{Name: "logtrim", Subject: unique("attacker"), Limit: l, Cost: 1}
		fill(t, s, reqs[i], past, int(l.Rate))
	}
	start := time.Now()
	ds, errs := s.DecideBatch(ctx, reqs)
	took := time.Since(start)
	for i := range ds {
		if errs[i] != nil || !ds[i].Allowed || ds[i].Remaining != l.Rate-1 {
			t.Fatalf("request %d of the batch: %+v %v, want admitted with %d remaining", i, ds[i], errs[i], l.Rate-1)
		}
		if left := zcard(t, c, rstore.Key(reqs[i].Name, reqs[i].Subject, l.Algorithm)); left < l.Rate-40 {
			t.Errorf("request %d of the batch left %d of its log's %d members", i, left, l.Rate+1)
		}
	}
	t.Logf("a batch of 64 after full logs' window: %v", took)
	// A batch of 64 logs costs about 2 ms with nothing to remove.
	if limit := resilience.DefaultTimeout / 2; took > limit {
		t.Errorf("a batch of 64 requests after full logs' window took Redis %v, want under %v (half the store deadline)", took, limit)
	}
}

// TestSlidingLogCostBounded is the attack through a request's cost: a
// sliding log kept one member per unit, so one admitted request of cost
// 100,000 (a limit of 100,000 spent at once: an Envoy descriptor's
// hits_addend taken from the request, a library's Cost func counting
// tokens) wrote 100,000 members in one script, about 360 ms of Redis
// during which every other call missed its deadline. What one decision
// writes must not grow with its cost.
func TestSlidingLogCostBounded(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: time.Second}
	fastest := time.Hour
	for range 3 {
		req := algo.Request{Name: "logcost", Subject: unique("attacker"), Limit: l, Cost: algo.MaxLogRate}
		start := time.Now()
		d, err := s.Allow(ctx, req)
		took := time.Since(start)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("the whole limit at once: %+v %v", d, err)
		}
		req.Cost = 1
		if d, err := s.Allow(ctx, req); err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > l.Period {
			t.Fatalf("one more: %+v %v, want refused until the window has passed", d, err)
		}
		fastest = min(fastest, took)
	}
	t.Logf("one request of cost %d: %v (fastest of 3)", algo.MaxLogRate, fastest)
	if limit := resilience.DefaultTimeout / 4; fastest > limit {
		t.Errorf("one request of cost %d took Redis %v (fastest of 3), want under %v (a quarter of the store deadline)", algo.MaxLogRate, fastest, limit)
	}
}

// TestResetLargeLogAtOnce: resetting a subject (the admin API) deleted
// its state with DEL, which frees a sliding log of 100,000 members on
// Redis' one thread, tens of ms past every gateway's deadline. The key
// must go at once and its members be freed in the background (UNLINK).
func TestResetLargeLogAtOnce(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: time.Minute}
	req := algo.Request{Name: "logreset", Subject: unique("subject"), Limit: l, Cost: 1}
	fill(t, s, req, time.Now(), algo.MaxLogRate)
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", "0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	defer c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", "10000").Build())
	if err := c.Do(ctx, c.B().SlowlogReset().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, []algo.Request{req}); err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, rstore.Key(req.Name, req.Subject, l.Algorithm)); n != 0 {
		t.Fatalf("after Reset the log holds %d members", n)
	}
	entries, err := c.Do(ctx, c.B().SlowlogGet().Count(-1).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fields, _ := e.ToArray()
		if len(fields) < 4 {
			continue
		}
		us, _ := fields[2].AsInt64()
		args, _ := fields[3].AsStrSlice()
		if d := time.Duration(us) * time.Microsecond; d > resilience.DefaultTimeout/4 {
			t.Errorf("%v took Redis %v, want under %v", args, d, resilience.DefaultTimeout/4)
		}
	}
}
