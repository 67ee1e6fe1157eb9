package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestSpacedGCRA: a lone GCRA decision on Redis' clock under a limit that
// spaces requests a whole number of milliseconds apart reads its debt
// from the key's TTL and writes it back with one SET (no TIME, no GET);
// it decides exactly as the batched path, which reads such a key through
// its TTL in turn, and as the algorithm. 10 per 10 s: each request adds
// a second of debt, so within the test's few milliseconds the remaining
// counts fall by one per admission, whichever path decides.
func TestSpacedGCRA(t *testing.T) {
	ctx := context.Background()
	c := srv.NewClient(t)
	for _, noFn := range []bool{false, true} {
		s, err := rstore.New(c, rstore.Options{NoFunctions: noFn})
		if err != nil {
			t.Fatal(err)
		}
		l := algo.Limit{Algorithm: algo.GCRA, Rate: 10, Period: 10 * time.Second}
		req := algo.Request{Name: unique("spaced"), Subject: "s", Limit: l, Cost: 1}
		key := rstore.KeyFor(req)
		want := int64(9)
		lone := func(step string) {
			t.Helper()
			d, err := s.Allow(ctx, req)
			if err != nil || !d.Allowed || d.Remaining != want {
				t.Fatalf("functions %v, %s: %+v %v, want allowed with %d remaining", !noFn, step, d, err, want)
			}
			want--
			if v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString(); err != nil || v != "" {
				t.Fatalf("%s: the key holds %q (%v), want the empty value of a state kept in its TTL", step, v, err)
			}
			ttl, _ := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
			if debt := (9 - want) * 1000; ttl > debt || ttl < debt-500 {
				t.Fatalf("%s: TTL %d ms, want the debt, %d ms (less the test's time)", step, ttl, debt)
			}
		}
		lone("first")
		lone("second")
		lone("third")
		// A batch reads the debt through the TTL and writes a state of its
		// own (a value), which the lone path reads through the TTL again.
		ds, errs := s.DecideBatch(ctx, []algo.Request{req, req})
		for i := range ds {
			if errs[i] != nil || !ds[i].Allowed || ds[i].Remaining != want {
				t.Fatalf("functions %v, batch %d: %+v %v, want allowed with %d remaining", !noFn, i, ds[i], errs[i], want)
			}
			want--
		}
		for want >= 0 {
			lone("after the batch")
		}
		d, err := s.Allow(ctx, req)
		if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Second {
			t.Fatalf("functions %v, the 11th: %+v %v, want refused for at most a second", !noFn, d, err)
		}
		// The algorithm, at one instant, says the same.
		var st algo.State
		now := int64(1_800_000_000_000)
		for i := range 11 {
			r, _, _ := algo.Decide(l, &st, now, 1)
			if r.Allowed != (i < 10) || (i < 10 && r.Remaining != int64(9-i)) || (i == 10 && r.RetryAfter != 1000) {
				t.Fatalf("algo, request %d: %+v", i+1, r)
			}
		}
	}
}

// TestSpacedGCRAForeignKeys: what a key holds that is not a state counts
// as none on the spaced path too, whatever its TTL says; a key of another
// type fails the request and is left alone.
func TestSpacedGCRAForeignKeys(t *testing.T) {
	ctx := context.Background()
	c := srv.NewClient(t)
	s := newStore(t)
	l := algo.Limit{Algorithm: algo.GCRA, Rate: 10, Period: 10 * time.Second}
	for _, ttl := range []time.Duration{time.Second, time.Minute} { // within the burst's debt, and beyond it
		req := algo.Request{Name: unique("spaced-junk"), Subject: "s", Limit: l, Cost: 1}
		key := rstore.KeyFor(req)
		if err := c.Do(ctx, c.B().Set().Key(key).Value("not a state").Px(ttl).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != 9 {
			t.Errorf("junk with a TTL of %v: %+v %v, want a fresh bucket charged once (9 remaining)", ttl, d, err)
		}
		if p, _ := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64(); p > 1000 || p < 500 {
			t.Errorf("junk with a TTL of %v: TTL %d ms after, want the request's debt, 1000 ms", ttl, p)
		}
	}
	// A key without a TTL is none of the spaced path's: the usual path
	// decides it (junk: none) and writes a state of its own.
	req := algo.Request{Name: unique("spaced-persistent"), Subject: "s", Limit: l, Cost: 1}
	key := rstore.KeyFor(req)
	c.Do(ctx, c.B().Set().Key(key).Value("persistent junk").Build())
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Errorf("persistent junk: %+v %v, want a fresh bucket charged once", d, err)
	}
	if v, _ := c.Do(ctx, c.B().Get().Key(key).Build()).ToString(); len(v) != 16 {
		t.Errorf("persistent junk: the key holds %q after, want a state of two doubles", v)
	}
	if p, _ := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64(); p <= 0 {
		t.Errorf("persistent junk: no TTL after (%d)", p)
	}
	req = algo.Request{Name: unique("spaced-list"), Subject: "s", Limit: l, Cost: 1}
	key = rstore.KeyFor(req)
	c.Do(ctx, c.B().Lpush().Key(key).Element("x").Build())
	c.Do(ctx, c.B().Pexpire().Key(key).Milliseconds(60_000).Build())
	if _, err := s.Allow(ctx, req); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("a list under the key: %v, want WRONGTYPE", err)
	}
	if n, _ := c.Do(ctx, c.B().Llen().Key(key).Build()).AsInt64(); n != 1 {
		t.Errorf("the list was changed: %d elements", n)
	}
}

// TestSpacedGCRAInBatches: in a batch on Redis' clock, the requests the
// spaced path can decide are decided by it, each on its own, beside
// others decided as usual; a key of another type fails its request alone.
func TestSpacedGCRAInBatches(t *testing.T) {
	ctx := context.Background()
	c := srv.NewClient(t)
	for _, noFn := range []bool{false, true} {
		s, err := rstore.New(c, rstore.Options{NoFunctions: noFn})
		if err != nil {
			t.Fatal(err)
		}
		spaced := algo.Request{Name: unique("spaced-batch"), Subject: "s", Limit: algo.Limit{Algorithm: algo.GCRA, Rate: 10, Period: 10 * time.Second}, Cost: 1}
		log := algo.Request{Name: unique("spaced-batch-log"), Subject: "s", Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 5, Period: time.Minute}, Cost: 1}
		odd := algo.Request{Name: unique("spaced-batch-odd"), Subject: "s", Limit: algo.Limit{Algorithm: algo.GCRA, Rate: 3, Period: time.Second}, Cost: 1} // 333.3 ms apart: not spaced
		list := algo.Request{Name: unique("spaced-batch-list"), Subject: "s", Limit: spaced.Limit, Cost: 1}
		c.Do(ctx, c.B().Lpush().Key(rstore.KeyFor(list)).Element("x").Build())
		c.Do(ctx, c.B().Pexpire().Key(rstore.KeyFor(list)).Milliseconds(60_000).Build())
		ds, errs := s.DecideBatch(ctx, []algo.Request{spaced, log, list, odd, spaced, log, odd, spaced})
		want := []int64{9, 4, -1, 2, 8, 3, 1, 7}
		for i, w := range want {
			if w < 0 {
				if errs[i] == nil || !strings.Contains(errs[i].Error(), "WRONGTYPE") {
					t.Errorf("functions %v, request %d on a list: %v, want WRONGTYPE", !noFn, i, errs[i])
				}
				continue
			}
			if errs[i] != nil || !ds[i].Allowed || ds[i].Remaining != w {
				t.Errorf("functions %v, request %d: %+v %v, want allowed with %d remaining", !noFn, i, ds[i], errs[i], w)
			}
		}
		if v, _ := c.Do(ctx, c.B().Get().Key(rstore.KeyFor(spaced)).Build()).ToString(); v != "" {
			t.Errorf("functions %v: the spaced key holds %q, want its state in its TTL", !noFn, v)
		}
		if v, _ := c.Do(ctx, c.B().Get().Key(rstore.KeyFor(odd)).Build()).ToString(); len(v) != 16 {
			t.Errorf("functions %v: the other GCRA key holds %q, want a state of two doubles", !noFn, v)
		}
	}
}

// TestSpacedGCRAMatchesAlgo: the spaced path, and the usual path reading
// the same key (multi.lua's, through AllowAll), decide as the algorithm does from the same debt, over
// random limits, costs and debts, up to three times the burst (a settle's
// debt, a TAT far past the burst). A key is
// set to a debt (its TTL) the way the spaced path keeps it, decided once
// on Redis' clock, and compared with algo.Decide from a state owing that
// debt; debts lie half a spacing off the multiples, so the time between
// the write and the decision moves no rounding as long as it is under
// half a spacing, and durations are compared within that time, measured
// for each trial. A trial that a loaded machine stretched past half a
// spacing (seen: 800 ms) tells nothing and is written and decided again.
func TestSpacedGCRAMatchesAlgo(t *testing.T) {
	ctx := context.Background()
	c := srv.NewClient(t)
	s := newStore(t)
	rng := testenv.Rand(t)
	for trial := range 300 {
		n := 1 + rng.Int64N(20)
		spacing := 200 + rng.Int64N(2000) // ms between requests
		l := algo.Limit{Algorithm: algo.GCRA, Rate: n, Period: time.Duration(n*spacing) * time.Millisecond}
		if rng.IntN(2) == 0 {
			l.Burst = 1 + rng.Int64N(30)
		}
		capacity := l.Capacity()
		cost := rng.Int64N(capacity + 1)
		// The debt may exceed the capacity: a settle's, or a limit's that shrank.
		debt := rng.Int64N(3*capacity+2)*spacing + spacing/2
		usual := trial%2 == 1 // else the spaced path
		req := algo.Request{Name: unique("spaced-rand"), Subject: "s", Limit: l, Cost: cost}
		key := rstore.KeyFor(req)
		// slack is the most the trial's own time may take off the debt.
		var got algo.Decision
		var start time.Time
		var slack int64
		for try := 0; ; try++ {
			start = time.Now()
			if err := c.Do(ctx, c.B().Set().Key(key).Value("").Px(time.Duration(debt)*time.Millisecond).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if usual {
				ds, err := s.AllowAll(ctx, []algo.Request{req})
				if err != nil {
					t.Fatal(err)
				}
				got = ds[0]
			} else {
				var err error
				if got, err = s.Allow(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			if slack = time.Since(start).Milliseconds() + 1; slack < spacing/2 {
				break
			}
			if try == 9 {
				t.Fatalf("trial %d: ten tries each took over half the spacing, %d ms, between the write and the decision", trial, spacing/2)
			}
		}
		// The algorithm from a state owing debt ms at now: a TAT of now + debt.
		now := int64(1_800_000_000_000)
		st := algo.State{A: now + debt}
		want, _, err := algo.Decide(l, &st, now, cost)
		if err != nil {
			t.Fatal(err)
		}
		near := func(a time.Duration, b int64) bool {
			d := a.Milliseconds() - b
			return d <= 0 && d >= -slack
		}
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || !near(got.ResetAfter, want.ResetAfter) || !near(got.RetryAfter, want.RetryAfter) {
			t.Fatalf("trial %d (usual path %v): %v, cost %d, debt %d ms:\nredis %+v\n algo %+v", trial, usual, l, cost, debt, got, want)
		}
		// The TTL read back loses to the trial's own time, and up to 2 ms
		// more to rounding: PTTL's, and on the usual path the script's
		// NOW, Redis' TIME truncated to the millisecond, which the
		// absolute expiry it writes (PXAT) counts from.
		if ttl, _ := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64(); want.Allowed && cost > 0 {
			if wantTTL := st.A - now; ttl > wantTTL || ttl < wantTTL-time.Since(start).Milliseconds()-2 {
				t.Fatalf("trial %d: %v, cost %d, debt %d ms: TTL %d ms after, want the new debt, %d ms", trial, l, cost, debt, ttl, wantTTL)
			}
		}
	}
}
