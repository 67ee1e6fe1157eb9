package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// RunReset checks Reset: a reset key's limit is whole again, on every
// algorithm, in its own group or in another's, places held on it are
// gone, other keys (another subject, the same subject in another group)
// keep their state, and resetting a key never seen does nothing.
func RunReset(t *testing.T, s tollgate.Store) {
	for _, a := range algo.Algorithms() {
		t.Run(a.String(), func(t *testing.T) { testReset(t, s, a) })
	}
	t.Run("Holds", func(t *testing.T) { testResetHolds(t, s) })
}

// testReset checks that a reset key's limit, under algorithm a, is whole
// again in its own group or in another's, that other keys keep their
// state, and that resetting a key never seen does nothing.
func testReset(t *testing.T, s tollgate.Store, a algo.Algorithm) {
	ctx := context.Background()
	p := policy(t)
	l := limitFor(a, 3, time.Hour)
	own := algo.Request{Name: p, Subject: "x", Limit: l, Cost: 3, Now: base}
	grouped := algo.Request{Name: p, Subject: "x", Tag: "g", Limit: l, Cost: 3, Now: base}
	other := algo.Request{Name: p, Subject: "y", Limit: l, Cost: 3, Now: base}
	for _, r := range []algo.Request{own, grouped, other} {
		if d, err := s.Allow(ctx, r); !meets(d, err, allowed) {
			t.Fatalf("spending %+v: %+v %v", r, d, err)
		}
	}
	if err := s.Reset(ctx, []algo.Request{own, {Name: p, Subject: "never", Limit: l}}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, s, own); got != 3 {
		t.Errorf("the reset key has %d left, want 3", got)
	}
	if got, got2 := remaining(t, s, grouped), remaining(t, s, other); got != 0 || got2 != 0 {
		t.Errorf("keys not reset: grouped %d left, other subject %d left; want 0", got, got2)
	}
	if err := s.Reset(ctx, []algo.Request{grouped}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, s, grouped); got != 3 {
		t.Errorf("the reset grouped key has %d left, want 3", got)
	}
}

// remaining returns what r's limit has left for its key, asked of s with
// a cost of 0, failing the test on an error.
func remaining(t *testing.T, s tollgate.Store, r algo.Request) int64 {
	t.Helper()
	r.Cost = 0
	d, err := s.Allow(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// testResetHolds checks that a reset frees the places held on its key.
func testResetHolds(t *testing.T, s tollgate.Store) {
	ctx := context.Background()
	l := limitFor(algo.GCRA, 2, time.Hour)
	r := algo.Request{Name: policy(t), Subject: "x", Limit: l, Cost: 1, Now: base}
	for i := range 2 {
		if d, err := s.Reserve(ctx, r, algo.Hold{ID: "h" + string(rune('0'+i)), TTL: time.Minute}); !meets(d, err, allowed) {
			t.Fatalf("hold %d: %+v %v", i, d, err)
		}
	}
	if d, err := s.Reserve(ctx, r, algo.Hold{ID: "h2", TTL: time.Minute}); !meets(d, err, refused) {
		t.Fatalf("a third hold on 2: %+v %v", d, err)
	}
	if err := s.Reset(ctx, []algo.Request{r}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Reserve(ctx, r, algo.Hold{ID: "h3", TTL: time.Minute}); !meets(d, err, allowed) {
		t.Fatalf("a hold after the reset: %+v %v", d, err)
	}
}
