package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// testWithin: a request's queue threshold (algo.Request.Within) is
// honoured alone and in a group, and one that is invalid (on a limit that
// does not shape, longer than the max delay, negative) is an error that
// charges nothing. The arithmetic is in the shared vectors.
func testWithin(t *testing.T, s tollgate.Store) {
	ctx := context.Background()
	p := policy(t)
	shaper := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: time.Second}
	req := func(cost int64, within time.Duration) algo.Request {
		return algo.Request{Name: p, Subject: "w", Limit: shaper, Cost: cost, Now: base, Within: within}
	}
	for i := range 4 { // turns 0 to 300 ms
		if d, err := s.Allow(ctx, req(1, 0)); err != nil || !d.Allowed || d.Delay != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("place %d: %+v, %v", i, d, err)
		}
	}
	d, err := s.Allow(ctx, req(1, 300*time.Millisecond))
	if err != nil || d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Errorf("a turn 400 ms away under a threshold of 300 ms: %+v, %v; want refused for 100ms", d, err)
	}
	ds, err := s.AllowAll(ctx, []algo.Request{req(1, 300*time.Millisecond)})
	if err != nil || ds[0].Allowed || ds[0].RetryAfter != 100*time.Millisecond {
		t.Errorf("the same in a group: %+v, %v", ds, err)
	}
	if d, err := s.Allow(ctx, req(1, 400*time.Millisecond)); err != nil || !d.Allowed || d.Delay != 400*time.Millisecond {
		t.Errorf("a turn 400 ms away under a threshold of 400 ms: %+v, %v", d, err)
	}
	before, err := s.Allow(ctx, req(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	meter := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second}
	for _, bad := range []algo.Request{
		req(1, 2*time.Second),
		req(1, -time.Millisecond),
		req(1, time.Microsecond),
		{Name: p, Subject: "w", Limit: meter, Cost: 1, Now: base, Within: time.Millisecond},
		{Name: p, Subject: "w", Limit: algo.Limit{Rate: 10, Period: time.Second}, Cost: 1, Now: base, Within: time.Millisecond},
	} {
		if _, err := s.Allow(ctx, bad); !errors.Is(err, algo.ErrInvalidRequest) {
			t.Errorf("Within %v on %v: err = %v, want ErrInvalidRequest", bad.Within, bad.Limit, err)
		}
		var ie *algo.ItemError
		if _, err := s.AllowAll(ctx, []algo.Request{bad}); !errors.Is(err, algo.ErrInvalidRequest) || !errors.As(err, &ie) {
			t.Errorf("Within %v on %v in a group: err = %v, want an ItemError of ErrInvalidRequest", bad.Within, bad.Limit, err)
		}
	}
	if after, err := s.Allow(ctx, req(0, 0)); err != nil || after != before {
		t.Errorf("invalid requests changed the state: %+v, was %+v (%v)", after, before, err)
	}
}

// testPushBack: a push back on the store's clock postpones the next turn
// by what was asked, whether the request carries its handle or not, and
// invalid push backs (a limit that does not shape, a duration that is not
// positive) are errors that change nothing. The arithmetic is in the
// shared vectors.
func testPushBack(t *testing.T, s tollgate.Store) {
	ctx := context.Background()
	p := policy(t)
	shaper := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: 2 * time.Second}
	h, err := algo.NewHandle(p, shaper)
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range []algo.Request{
		{Name: p, Subject: "pb", Limit: shaper},
		h.Request("pb-handle", 0),
	} {
		d, err := s.PushBack(ctx, req, 500*time.Millisecond)
		if err != nil || !d.Allowed || d.Delay <= 400*time.Millisecond || d.Delay > 500*time.Millisecond {
			t.Fatalf("request %d: push back 500ms on the store's clock: %+v, %v; want a turn taken now 400-500ms away", i, d, err)
		}
		req.Cost = 1
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Delay <= 500*time.Millisecond || d.Delay > 600*time.Millisecond {
			t.Fatalf("request %d: the first place after the push back: %+v, %v; want it 500-600ms away", i, d, err)
		}
		// A push back is kept, like a charge, until it has drained.
		if d, err := s.Allow(ctx, algo.Request{Name: req.Name, Subject: req.Subject, Limit: shaper}); err != nil || d.ResetAfter <= 500*time.Millisecond {
			t.Errorf("request %d: query after: %+v, %v", i, d, err)
		}
	}
	gcra := algo.Limit{Rate: 10, Period: time.Second}
	meter := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second}
	for _, bad := range []struct {
		l algo.Limit
		d time.Duration
	}{{gcra, time.Second}, {meter, time.Second}, {shaper, 0}, {shaper, -time.Second}, {shaper, algo.MaxHorizon + time.Hour}} {
		req := algo.Request{Name: p, Subject: "pb-bad", Limit: bad.l, Now: base}
		if _, err := s.PushBack(ctx, req, bad.d); !errors.Is(err, algo.ErrInvalidRequest) {
			t.Errorf("push back %v on %v: err = %v, want ErrInvalidRequest", bad.d, bad.l, err)
		}
	}
	if d, err := s.Allow(ctx, algo.Request{Name: p, Subject: "pb-bad", Limit: shaper, Cost: 1, Now: base}); err != nil || d.Delay != 0 {
		t.Errorf("invalid push backs changed the schedule: %+v, %v", d, err)
	}
}
