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
