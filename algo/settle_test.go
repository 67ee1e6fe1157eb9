package algo_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// t0 is the tests' time zero: on a whole second, and sday on a UTC day.
const (
	t0   = int64(1_800_000_000_000)
	sday = int64(1_800_057_600_000)
	hour = int64(3_600_000)
)

// step is a decision of cost at at (ms after the case's start), or a
// settle of a reservation of est made at res, whose actual cost was act.
type step struct {
	at, cost      int64
	settle        bool
	res, est, act int64
	want          algo.Result // Quota is filled in
	err           error
}

func dec(at, cost int64, want algo.Result) step { return step{at: at, cost: cost, want: want} }

func set(at, res, est, act int64, want algo.Result) step {
	return step{at: at, settle: true, res: res, est: est, act: act, want: want}
}

func setErr(at, res, est, act int64, err error) step {
	return step{at: at, settle: true, res: res, est: est, act: act, err: err}
}

// ok and no are an allowed result and a refusal.
func ok(remaining, reset int64) algo.Result {
	return algo.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func no(remaining, reset, retry int64) algo.Result {
	return algo.Result{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

func owing(r algo.Result, debt int64) algo.Result { r.Debt = debt; return r }

var (
	buckets = []algo.Algorithm{algo.GCRA, algo.TokenBucket}
	ten     = algo.Limit{Rate: 10, Period: time.Second}
	three   = algo.Limit{Rate: 3, Period: time.Second}
	one     = algo.Limit{Rate: 1, Period: time.Second}
	daily   = algo.Limit{Algorithm: algo.FixedWindow, Rate: 100, Period: algo.Day, Calendar: algo.Daily}
)

// TestSettle holds Settle to worked cases. The main semantics are also in
// testdata/vectors/settle.json, for the stores; these are the edges.
func TestSettle(t *testing.T) {
	for _, c := range []struct {
		reason string
		algs   []algo.Algorithm
		limit  algo.Limit
		start  int64
		steps  []step
	}{
		{"an exact estimate changes nothing", buckets, ten, t0, []step{
			dec(0, 4, ok(6, 400)),
			set(100, 0, 4, 4, ok(7, 300)),
		}},
		{"a refund gives back what the refill has not replaced: 5 tokens less 100 ms × 10/s", buckets, ten, t0, []step{
			dec(0, 8, ok(2, 800)),
			set(100, 0, 8, 3, ok(7, 300)),
		}},
		{"a reservation held longer than its refill gets nothing back: the bucket refilled it already", buckets, ten, t0, []step{
			dec(0, 5, ok(5, 500)),
			dec(500, 10, ok(0, 1000)),
			set(500, 0, 5, 0, ok(0, 1000)),
			dec(500, 1, no(0, 1000, 100)),
		}},
		{"a reservation settled twice (a retry the store did not tell) gives back no more than a fresh key", buckets, ten, t0, []step{
			dec(0, 5, ok(5, 500)),
			set(0, 0, 5, 2, ok(8, 200)),
			set(0, 0, 5, 2, ok(10, 0)),
		}},
		{"a reservation reported from another instance's clock ahead of this one is refunded in full", buckets, ten, t0, []step{
			dec(0, 5, ok(5, 500)),
			set(0, 50, 5, 2, ok(8, 200)),
		}},
		{"a debt past the burst: refused until the refill pays it and the cost back, exactly", buckets, ten, t0, []step{
			dec(0, 8, ok(2, 800)),
			set(0, 0, 8, 13, owing(ok(0, 1300), 3)),
			dec(0, 0, ok(0, 1300)),
			dec(0, 1, no(0, 1300, 400)),
			dec(399, 1, no(0, 901, 1)),
			dec(400, 1, ok(0, 1000)),
		}},
		{"a debt is rounded up to a whole ms of refill: 1 token past 3/s is 334 ms", buckets, three, t0, []step{
			dec(0, 1, ok(2, 334)),
			set(0, 0, 1, 4, owing(ok(0, 1334), 2)),
			dec(667, 1, no(0, 667, 1)),
			dec(668, 1, ok(0, 1000)),
		}},
		{"a debt is rounded up to a whole ms of refill (10 tokens at 10,000/s), so GCRA lets nothing in before it is paid back",
			buckets, algo.Limit{Rate: 10_000, Period: time.Second}, t0, []step{
				dec(0, 10_000, ok(0, 1000)),
				set(0, 0, 10_000, 10_001, owing(ok(0, 1001), 10)),
				dec(0, 1, no(0, 1001, 2)),
				dec(1, 1, no(0, 1000, 1)),
				dec(2, 1, ok(9, 1000)),
			}},
		{"a refund while in debt lowers the debt", buckets, ten, t0, []step{
			dec(0, 10, ok(0, 1000)),
			set(0, 0, 0, 5, owing(ok(0, 1500), 5)),
			set(0, 0, 10, 8, owing(ok(0, 1300), 3)),
		}},
		{"an actual of 2^63-1 is capped at 200 years of refill, and the state still decides", buckets, one, t0, []step{
			set(0, 0, 0, math.MaxInt64, owing(ok(0, algo.MaxHorizon.Milliseconds()), algo.MaxHorizon.Milliseconds()/1000-1)),
			dec(0, 1, no(0, algo.MaxHorizon.Milliseconds(), algo.MaxHorizon.Milliseconds())),
			set(0, 0, 0, 1, owing(ok(0, algo.MaxHorizon.Milliseconds()), algo.MaxHorizon.Milliseconds()/1000-1)),
		}},
		{"a fixed window refunds a reservation of the current window, down to 0", []algo.Algorithm{algo.FixedWindow}, ten, t0, []step{
			dec(100, 6, ok(4, 900)),
			set(900, 100, 6, 2, ok(8, 100)),
			set(900, 100, 6, 2, ok(10, 0)),
		}},
		{"a fixed window's debt is charged to the window the settle falls in", []algo.Algorithm{algo.FixedWindow}, ten, t0, []step{
			dec(900, 6, ok(4, 100)),
			set(1100, 900, 6, 15, ok(1, 900)),
			dec(1100, 2, no(1, 900, 900)),
		}},
		{"a fixed window in debt allows a query and forgives the rest at its end", []algo.Algorithm{algo.FixedWindow}, ten, t0, []step{
			dec(100, 6, ok(4, 900)),
			set(500, 100, 6, 15, owing(ok(0, 500), 5)),
			dec(999, 0, ok(0, 1)),
			dec(999, 1, no(0, 1, 1)),
			dec(1000, 10, ok(0, 1000)),
		}},
		{"a sliding counter refunds a reservation of the previous window from its count", []algo.Algorithm{algo.SlidingWindowCounter}, ten, t0, []step{
			dec(900, 6, ok(4, 1100)),
			dec(1200, 0, ok(5, 800)),
			set(1200, 900, 6, 0, ok(10, 0)),
		}},
		{"a sliding counter refunds nothing of a reservation two windows old", []algo.Algorithm{algo.SlidingWindowCounter}, ten, t0, []step{
			dec(900, 6, ok(4, 1100)),
			dec(1500, 3, ok(4, 1500)),
			set(2100, 900, 6, 0, ok(7, 900)),
		}},
		{"a sliding counter's debt carries into the next window, weighted", []algo.Algorithm{algo.SlidingWindowCounter}, ten, t0, []step{
			dec(500, 5, ok(5, 1500)),
			set(500, 500, 5, 25, owing(ok(0, 1500), 15)),
			dec(500, 1, no(0, 1500, 1140)),
			dec(1639, 1, no(0, 361, 1)),
			dec(1640, 1, ok(0, 1360)),
		}},
		{"a sliding counter a settle wrote decides at now, not when its counts would first fit (which would let a cost in early)",
			[]algo.Algorithm{algo.SlidingWindowCounter}, algo.Limit{Rate: 10, Period: 10 * time.Millisecond}, t0, []step{
				dec(5, 10, ok(0, 15)),
				set(5, 5, 10, 40, owing(ok(0, 15), 30)),
				set(11, 11, 0, 1, owing(ok(0, 19), 27)),
				dec(12, 1, no(0, 18, 6)),
				dec(18, 1, ok(0, 12)),
			}},
		{"a sliding counter in debt decides a request timed before the settle as of the settle", []algo.Algorithm{algo.SlidingWindowCounter}, ten, t0, []step{
			dec(900, 10, ok(0, 1100)),
			set(1100, 900, 10, 12, owing(ok(0, 1900), 1)),
			dec(1050, 1, no(0, 1950, 250)),
		}},
		{"a calendar day in debt refuses until local midnight, which forgives it", []algo.Algorithm{algo.FixedWindow}, daily, sday, []step{
			dec(23*hour, 60, ok(40, hour)),
			set(23*hour+hour/2, 23*hour, 60, 150, owing(ok(0, hour/2), 50)),
			dec(23*hour+hour/2, 1, no(0, hour/2, hour/2)),
			dec(24*hour, 100, ok(0, 24*hour)),
		}},
		{"a calendar day refunds nothing of yesterday's reservation", []algo.Algorithm{algo.FixedWindow}, daily, sday, []step{
			dec(23*hour, 60, ok(40, hour)),
			dec(24*hour, 30, ok(70, 24*hour)),
			set(24*hour+1, 23*hour, 60, 0, ok(70, 24*hour-1)),
		}},
	} {
		for _, a := range c.algs {
			t.Run(a.String()+"/"+c.reason, func(t *testing.T) {
				l := c.limit
				l.Algorithm = a
				pl, err := l.Prepare()
				if err != nil {
					t.Fatal(err)
				}
				var s algo.State
				for i, st := range c.steps {
					now := c.start + st.at
					before := s
					var r algo.Result
					if st.settle {
						_, err = pl.Settle(&r, &s, now, c.start+st.res, st.est, st.act)
					} else {
						_, err = pl.DecideInto(&r, &s, now, st.cost)
					}
					if st.err != nil {
						if !errors.Is(err, st.err) || s != before {
							t.Fatalf("step %d: err %v, state %+v -> %+v; want %v and no change", i, err, before, s, st.err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					want := st.want
					want.Quota = l.Capacity()
					if r != want {
						t.Errorf("step %d (at %d): got %+v, want %+v", i, st.at, r, want)
					}
				}
			})
		}
	}
}

// TestSettleErrors: a settle with a bad cost or time is refused with its
// sentinel and leaves the state as it was.
func TestSettleErrors(t *testing.T) {
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow, algo.SlidingWindowCounter} {
		l := ten
		l.Algorithm = a
		pl, err := l.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		var s algo.State
		var r algo.Result
		if _, err := pl.DecideInto(&r, &s, t0, 4); err != nil || !r.Allowed {
			t.Fatalf("%v: %+v %v", a, r, err)
		}
		before := s
		for _, c := range []struct {
			reason             string
			now, res, est, act int64
			want               error
		}{
			{"a negative actual", t0, t0, 4, -1, algo.ErrNegativeCost},
			{"a negative estimate", t0, t0, -1, 1, algo.ErrNegativeCost},
			{"an estimate no reservation could have had", t0, t0, 11, 1, algo.ErrCostExceedsBurst},
			{"a settle before the epoch", -1, t0, 4, 1, algo.ErrInvalidRequest},
			{"a reservation before the epoch", t0, -1, 4, 1, algo.ErrInvalidRequest},
		} {
			r := algo.Result{Allowed: true, Debt: 9}
			_, err := pl.Settle(&r, &s, c.now, c.res, c.est, c.act)
			if !errors.Is(err, c.want) || !algo.IsInvalid(err) || s != before || r != (algo.Result{}) {
				t.Errorf("%v, %s: err %v, state %+v -> %+v, result %+v; want %v, no change, a zero result", a, c.reason, err, before, s, r, c.want)
			}
		}
	}
}

// TestSettleUnsupported: the algorithms that cannot settle say so, as an
// invalid request, and CanSettle tells them apart beforehand.
func TestSettleUnsupported(t *testing.T) {
	for _, l := range []algo.Limit{
		{Algorithm: algo.SlidingWindowLog, Rate: 10, Period: time.Second},
		{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second},
		{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, MaxDelay: time.Second},
	} {
		pl, err := l.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		var s algo.State
		var r algo.Result
		_, err = pl.Settle(&r, &s, t0, t0, 1, 2)
		if !errors.Is(err, algo.ErrSettleUnsupported) || !algo.IsInvalid(err) || l.CanSettle() {
			t.Errorf("%v: Settle error %v, CanSettle %v; want ErrSettleUnsupported, invalid, false", l, err, l.CanSettle())
		}
	}
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow, algo.SlidingWindowCounter} {
		if !(algo.Limit{Algorithm: a}).CanSettle() {
			t.Errorf("%v cannot settle", a)
		}
	}
	var zero algo.Prepared
	var s algo.State
	var r algo.Result
	if _, err := zero.Settle(&r, &s, t0, t0, 1, 2); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("zero Prepared settled: %v, want ErrInvalidLimit", err)
	}
}
