package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/resilience"
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
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: time.Second}
	t0 := time.Now()
	fastest := time.Hour
	for range 3 {
		req := algo.Request{Name: "logtrim", Subject: unique("attacker"), Limit: l, Cost: 1000, Now: t0}
		for i := range algo.MaxLogRate / 1000 {
			if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("filling the log, call %d: %+v %v", i, d, err)
			}
		}
		req.Cost, req.Now = 1, t0.Add(l.Period+time.Millisecond)
		start := time.Now()
		d, err := s.Allow(ctx, req)
		took := time.Since(start)
		if err != nil || !d.Allowed {
			t.Fatalf("after the window: %+v %v", d, err)
		}
		if d.Remaining != algo.MaxLogRate-1 {
			t.Fatalf("after the window: remaining %d, want %d", d.Remaining, algo.MaxLogRate-1)
		}
		fastest = min(fastest, took)
	}
	t.Logf("one request after a full log's window: %v (fastest of 3)", fastest)
	// The fastest of three, so that a busy machine does not fail it.
	if limit := resilience.DefaultTimeout / 4; fastest > limit {
		t.Errorf("one request after a full log's window took Redis %v (fastest of 3), want under %v (a quarter of the store deadline)", fastest, limit)
	}
}

// TestSlidingLogTrimBoundedInBatch: the same attack through a batch. While
// Redis is busy, up to 64 decisions go in one script call; 64 subjects
// each back after a full log's window (2,000 members here) made one call
// remove 128,000 members, and with a per-decision bound of 1,024 still
// 65,536. What a batch removes of what has left the window must stay far
// below the deadline too.
func TestSlidingLogTrimBoundedInBatch(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 2000, Period: 10 * time.Second}
	fastest := time.Hour
	for range 3 {
		// Filled at a time one window ago (the batch decides on Redis'
		// clock, now), so everything in the logs has left the window.
		past := time.Now().Add(-l.Period - time.Second)
		reqs := make([]algo.Request, 64)
		for i := range reqs {
			reqs[i] = algo.Request{Name: "logtrim", Subject: unique("attacker"), Limit: l, Cost: 1000, Now: past}
			for range 2 {
				if d, err := s.Allow(ctx, reqs[i]); err != nil || !d.Allowed {
					t.Fatalf("filling log %d: %+v %v", i, d, err)
				}
			}
			reqs[i].Cost, reqs[i].Now = 1, time.Time{}
		}
		start := time.Now()
		ds, errs := s.DecideBatch(ctx, reqs)
		took := time.Since(start)
		for i := range ds {
			if errs[i] != nil || !ds[i].Allowed || ds[i].Remaining != l.Rate-1 {
				t.Fatalf("request %d of the batch: %+v %v, want admitted with %d remaining", i, ds[i], errs[i], l.Rate-1)
			}
		}
		fastest = min(fastest, took)
	}
	t.Logf("a batch of 64 after full logs' window: %v (fastest of 3)", fastest)
	// A batch of 64 logs costs about 2 ms with nothing to remove.
	if limit := resilience.DefaultTimeout / 2; fastest > limit {
		t.Errorf("a batch of 64 requests after full logs' window took Redis %v (fastest of 3), want under %v (half the store deadline)", fastest, limit)
	}
}
