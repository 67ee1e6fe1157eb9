package algo_test

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/vectors"
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

// TestSettleVectors runs the shared settle vectors against Settle.
func TestSettleVectors(t *testing.T) {
	vectors.RunSettle(t, func(t *testing.T) (vectors.DecideFunc, vectors.SettleFunc) {
		var s algo.State
		decide := func(l algo.Limit, now time.Time, a vectors.Ask) (algo.Decision, error) {
			r, _, err := algo.Decide(l, &s, now.UnixMilli(), a.Cost)
			return r.Decision(), err
		}
		settle := func(l algo.Limit, now time.Time, a vectors.SettleAsk) (algo.Decision, error) {
			pl, err := l.Prepare()
			if err != nil {
				return algo.Decision{}, err
			}
			var r algo.Result
			_, err = pl.Settle(&r, &s, now.UnixMilli(), a.ReservedAt.UnixMilli(), a.Estimate, a.Actual)
			return r.Decision(), err
		}
		return decide, settle
	})
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

// reservation is one admitted reservation of the bound's simulation:
// admitted at seq (the simulation's event count) and time at, settled at
// event settled (math.MaxInt: never).
type reservation struct {
	seq, settled int
	at, est, act int64
}

func (r reservation) excess() int64 { return max(0, r.act-r.est) }

// simulate reserves and settles at random on one state per limit (all of
// them deciding alike: GCRA and TokenBucket are checked in lockstep) and
// returns the reservations admitted, in order. Estimates are at least
// their actual cost unless over is set.
func simulate(t *testing.T, ls []algo.Limit, over bool, maxStep int64) []reservation {
	rng := testenv.Rand(t)
	pls := make([]algo.Prepared, len(ls))
	for i, l := range ls {
		var err error
		if pls[i], err = l.Prepare(); err != nil {
			t.Fatal(err)
		}
	}
	states := make([]algo.State, len(ls))
	var admitted []reservation
	var inflight []int
	now, seq := t0, 0
	var refused, refunds, debts int
	capacity := ls[0].Capacity()
	for range 4000 {
		now += rng.Int64N(maxStep)
		var rs [2]algo.Result
		var ttls [2]int64
		if len(inflight) > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(len(inflight))
			res := &admitted[inflight[k]]
			inflight = append(inflight[:k], inflight[k+1:]...)
			res.settled = seq
			for i := range pls {
				var err error
				if ttls[i], err = pls[i].Settle(&rs[i], &states[i], now, res.at, res.est, res.act); err != nil {
					t.Fatal(err)
				}
			}
			if res.act < res.est {
				refunds++
			} else if res.act > res.est {
				debts++
			}
		} else {
			est := 1 + rng.Int64N(capacity)
			act := rng.Int64N(est + 1)
			if over {
				act = rng.Int64N(2*est + 1)
			}
			for i := range pls {
				var err error
				if ttls[i], err = pls[i].DecideInto(&rs[i], &states[i], now, est); err != nil {
					t.Fatal(err)
				}
			}
			if rs[0].Allowed {
				inflight = append(inflight, len(admitted))
				admitted = append(admitted, reservation{seq: seq, settled: math.MaxInt, at: now, est: est, act: act})
			} else {
				refused++
			}
		}
		if len(pls) > 1 && (rs[0] != rs[1] || ttls[0] != ttls[1]) {
			t.Fatalf("at %d: %v %+v ttl %d, %v %+v ttl %d", now-t0, ls[0].Algorithm, rs[0], ttls[0], ls[1].Algorithm, rs[1], ttls[1])
		}
		seq++
	}
	if refused == 0 || refunds == 0 || (over && debts == 0) || len(admitted) < 100 {
		t.Fatalf("a vacuous run: %d admitted, %d refused, %d refunds, %d debts", len(admitted), refused, refunds, debts)
	}
	return admitted
}

// TestSettleOvershootBound holds random reservations, settled later at
// random, to Settle's bound. A bucket: over any interval [t_i, t_j]
// between admissions, the actual cost admitted in it is at most Burst +
// Rate × (t_j − t_i) / Period + the excess (actual − estimate, when
// positive) of those admitted in it still unsettled at t_j. A window:
// the actual cost of a window's reservations is at most Rate + the
// excess of those unsettled at its last admission. With no estimate
// below its actual, no excess: the limit holds exactly.
func TestSettleOvershootBound(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ls      []algo.Limit
		maxStep int64
	}{
		{[]algo.Limit{{Algorithm: algo.GCRA, Rate: 10, Period: time.Second}, {Algorithm: algo.TokenBucket, Rate: 10, Period: time.Second}}, 150},
		{[]algo.Limit{{Algorithm: algo.GCRA, Rate: 3, Period: 700 * time.Millisecond, Burst: 11}, {Algorithm: algo.TokenBucket, Rate: 3, Period: 700 * time.Millisecond, Burst: 11}}, 400},
		{[]algo.Limit{{Algorithm: algo.GCRA, Rate: 5000, Period: time.Second, Burst: 300}, {Algorithm: algo.TokenBucket, Rate: 5000, Period: time.Second, Burst: 300}}, 30},
		{[]algo.Limit{{Algorithm: algo.FixedWindow, Rate: 10, Period: time.Second}}, 150},
		{[]algo.Limit{{Algorithm: algo.SlidingWindowCounter, Rate: 10, Period: time.Second}}, 150},
		{[]algo.Limit{{Algorithm: algo.SlidingWindowCounter, Rate: 7, Period: 333 * time.Millisecond}}, 80},
		{[]algo.Limit{{Algorithm: algo.FixedWindow, Rate: 1000, Period: algo.Day, Calendar: algo.Daily, Zone: ny}}, 2 * hour},
	} {
		l := c.ls[0]
		for _, over := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/over=%v", l, over), func(t *testing.T) {
				admitted := simulate(t, c.ls, over, c.maxStep)
				if l.Algorithm == algo.GCRA {
					checkBucketBound(t, l, admitted)
				} else {
					checkWindowBound(t, l, admitted)
				}
			})
		}
	}
}

// checkBucketBound checks the bound on every interval between two
// admissions, in units of 1/Period of a token.
func checkBucketBound(t *testing.T, l algo.Limit, admitted []reservation) {
	period, n := l.Period.Milliseconds(), l.Rate
	capU := l.Capacity() * period
	// settledBefore[j]: the reservations settled between admissions j-1 and j.
	settledBefore := make([][]int, len(admitted))
	for k, r := range admitted {
		if r.settled == math.MaxInt {
			continue
		}
		j := sort.Search(len(admitted), func(j int) bool { return admitted[j].seq > r.settled })
		if j < len(admitted) {
			settledBefore[j] = append(settledBefore[j], k)
		}
	}
	for i := range admitted {
		var used, excess int64
		for j := i; j < len(admitted); j++ {
			for _, k := range settledBefore[j] {
				if k >= i {
					excess -= admitted[k].excess()
				}
			}
			used += admitted[j].act
			excess += admitted[j].excess()
			if bound := capU + n*(admitted[j].at-admitted[i].at) + excess*period; used*period > bound {
				t.Fatalf("admitted %d in [%d, %d] ms: %d/%d tokens past the bound (%d in flight over their estimates)",
					used, admitted[i].at-t0, admitted[j].at-t0, used*period-bound, period, excess)
			}
		}
	}
}

// checkWindowBound checks the bound on every window.
func checkWindowBound(t *testing.T, l algo.Limit, admitted []reservation) {
	window := func(at int64) int64 {
		if l.Calendar != algo.NoCalendar {
			return l.CalendarBounds(at)[2]
		}
		return at / l.Period.Milliseconds()
	}
	for i := 0; i < len(admitted); {
		w := window(admitted[i].at)
		j := i
		for j < len(admitted) && window(admitted[j].at) == w {
			j++
		}
		last := admitted[j-1].seq
		var used, excess int64
		for _, r := range admitted[i:j] {
			used += r.act
			if r.settled > last {
				excess += r.excess()
			}
		}
		if used > l.Rate+excess {
			t.Fatalf("window %d: admitted %d, past %d + %d in flight over their estimates", w, used, l.Rate, excess)
		}
		i = j
	}
}

var fuzzPeriods = []time.Duration{time.Millisecond, 7 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute, time.Hour}

// FuzzSettle decodes a limit that can settle and a timeline of decisions
// and settles, and requires that no settle panics or fails on valid input,
// that a failed one changes nothing, and that every state a settle leaves
// is one DecideInto decides soundly (checkDecidable).
//
// Layout: data[0] algorithm (4: calendar days), data[1] rate, data[2]
// period, data[3] burst; then groups of 4 bytes (op, x, y, z). op's low
// bit picks a settle (else a decision of cost x); op>>1 advances the
// clock by that many 64ths of the period. A settle's estimate is x (past
// the capacity: an error), its actual y << (z%48), or 2^63-1 for z >= 240,
// and its reservation (z-32) 16ths of the period before now.
func FuzzSettle(f *testing.F) {
	for a := range byte(5) {
		f.Add([]byte{a, 9, 3, 12, 0, 9, 0, 0, 1, 9, 30, 3, 1, 1, 0, 240, 64, 1, 0, 0, 3, 0, 1, 40})
		f.Add([]byte{a, 3, 1, 0, 0, 3, 0, 0, 33, 3, 200, 2, 0x81, 1, 0, 32, 17, 2, 0, 0, 0xff, 1, 0, 0})
		f.Add([]byte{a, 15, 4, 19, 7, 15, 0, 0, 9, 15, 1, 33, 9, 14, 3, 20, 64, 7, 0, 0, 1, 20, 255, 250})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		l := algo.Limit{Algorithm: []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow, algo.SlidingWindowCounter, algo.FixedWindow}[data[0]%5],
			Rate: 1 + int64(data[1]%32), Period: fuzzPeriods[int(data[2])%len(fuzzPeriods)]}
		if l.Algorithm == algo.GCRA || l.Algorithm == algo.TokenBucket {
			l.Burst = int64(data[3] % 40)
		}
		if data[0]%5 == 4 {
			l.Calendar, l.Period, l.Zone = algo.Daily, algo.Day, time.UTC
		}
		pl, err := l.Prepare()
		if err != nil {
			return
		}
		period := l.Period.Milliseconds()
		var s algo.State
		now := t0 + int64(data[3])*37
		for ops := data[4:]; len(ops) >= 4; ops = ops[4:] {
			op, x, y, z := ops[0], int64(ops[1]), int64(ops[2]), ops[3]
			now += int64(op>>1) * max(1, period/64)
			var r algo.Result
			if op&1 == 0 {
				if _, err := pl.DecideInto(&r, &s, now, x%(l.Capacity()+1)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			act := y << (z % 48)
			if z >= 240 {
				act = math.MaxInt64
			}
			res := max(0, now-(int64(z)-32)*max(1, period/16))
			before := s
			if _, err := pl.Settle(&r, &s, now, res, x, act); err != nil {
				if x <= l.Capacity() || !errors.Is(err, algo.ErrCostExceedsBurst) || s != before {
					t.Fatalf("settle of %d (actual %d) at %d: %v, state %+v -> %+v", x, act, now, err, before, s)
				}
				continue
			}
			if !r.Allowed || r.Remaining < 0 || r.Debt < 0 || r.RetryAfter != 0 || (r.Debt > 0 && r.Remaining != 0) {
				t.Fatalf("settle of %d (actual %d) at %d: %+v", x, act, now, r)
			}
			checkDecidable(t, &pl, l, s, now)
		}
	})
}

// checkDecidable requires DecideInto to decide state s soundly at now for
// a query, a cost of 1 and the whole capacity: no error, no negative or
// over-long field, a query allowed, a refusal that changes nothing and
// whose RetryAfter is exact, and a state that is fresh once its ttl has
// passed.
func checkDecidable(t *testing.T, pl *algo.Prepared, l algo.Limit, s algo.State, now int64) {
	t.Helper()
	decide := func(at, cost int64) (algo.Result, int64, algo.State) {
		c := s
		var r algo.Result
		ttl, err := pl.DecideInto(&r, &c, at, cost)
		if err != nil {
			t.Fatalf("state %+v at %d, cost %d: %v", s, at, cost, err)
		}
		return r, ttl, c
	}
	h := algo.MaxHorizon.Milliseconds()
	for _, cost := range []int64{0, 1, l.Capacity()} {
		r, ttl, after := decide(now, cost)
		switch {
		case r.Remaining < 0 || r.Remaining > r.Quota || r.ResetAfter < 0 || r.ResetAfter > h || r.RetryAfter < 0 || r.RetryAfter > h ||
			r.Delay != 0 || r.Debt != 0 || ttl != r.ResetAfter:
			t.Fatalf("state %+v at %d, cost %d: %+v ttl %d", s, now, cost, r, ttl)
		case cost == 0 && !r.Allowed:
			t.Fatalf("state %+v at %d: a query refused: %+v", s, now, r)
		case !r.Allowed && (after != s || r.RetryAfter < 1):
			t.Fatalf("state %+v at %d, cost %d: refused with RetryAfter %d, state -> %+v", s, now, cost, r.RetryAfter, after)
		case !r.Allowed:
			if pr, _, _ := decide(now+r.RetryAfter, cost); !pr.Allowed {
				t.Fatalf("state %+v at %d, cost %d: refused at its RetryAfter %d: %+v", s, now, cost, r.RetryAfter, pr)
			}
			if pr, _, _ := decide(now+r.RetryAfter-1, cost); r.RetryAfter > 1 && pr.Allowed {
				t.Fatalf("state %+v at %d, cost %d: allowed 1 ms before its RetryAfter %d", s, now, cost, r.RetryAfter)
			}
		}
	}
	q, ttl, _ := decide(now, 0)
	got, _, _ := decide(now+ttl, 0)
	var fresh algo.State
	var want algo.Result
	if _, err := pl.DecideInto(&want, &fresh, now+ttl, 0); err != nil || got != want {
		t.Fatalf("state %+v at %d (%+v): at its ttl %d it decides %+v, a fresh key %+v", s, now, q, ttl, got, want)
	}
}
