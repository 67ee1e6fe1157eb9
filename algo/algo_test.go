package algo_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/vectors"
)

func TestVectors(t *testing.T) {
	vectors.Run(t, func(t *testing.T) vectors.DecideFunc {
		var s algo.State
		return func(l algo.Limit, now time.Time, a vectors.Ask) (algo.Decision, error) {
			if a.Push != 0 {
				r, _, err := algo.PushBack(l, &s, now.UnixMilli(), a.Push)
				return r.Decision(), err
			}
			if a.Within != 0 {
				p, err := l.Prepare()
				if err != nil {
					return algo.Decision{}, err
				}
				if p, err = p.Within(a.Within); err != nil {
					return algo.Decision{}, err
				}
				r, _, err := p.Decide(&s, now.UnixMilli(), a.Cost)
				return r.Decision(), err
			}
			r, _, err := algo.Decide(l, &s, now.UnixMilli(), a.Cost)
			return r.Decision(), err
		}
	})
}

func TestValidate(t *testing.T) {
	bad := []algo.Limit{
		{Rate: 0, Period: time.Second},
		{Rate: 1, Period: 0},
		{Rate: 1, Period: time.Microsecond},
		{Rate: 1, Period: 1500 * time.Microsecond},
		{Rate: 1, Period: time.Second, Burst: -1},
		{Algorithm: algo.FixedWindow, Rate: 5, Period: time.Second, Burst: 7},
		{Algorithm: 99, Rate: 1, Period: time.Second},
		{Rate: 1 << 40, Period: 24 * time.Hour},
		{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate + 1, Period: time.Hour},
	}
	for _, l := range bad {
		if err := l.Validate(); !errors.Is(err, algo.ErrInvalidLimit) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalidLimit", l, err)
		}
		var s algo.State
		if _, _, err := algo.Decide(l, &s, 1, 1); err == nil {
			t.Errorf("%+v: Decide accepted an invalid limit", l)
		}
	}
	good := []algo.Limit{
		{Rate: 100, Period: time.Minute},
		{Algorithm: algo.FixedWindow, Rate: 5, Period: time.Second, Burst: 5},
		{Algorithm: algo.FixedWindow, Rate: 1_000_000_000, Period: 30 * 24 * time.Hour},
		{Algorithm: algo.TokenBucket, Rate: 10_000_000, Period: 24 * time.Hour},
	}
	for _, l := range good {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}

// TestPrepared checks that a prepared limit decides as Decide does, with
// the same errors, and that the zero Prepared refuses to decide.
func TestPrepared(t *testing.T) {
	vectors.Run(t, func(t *testing.T) vectors.DecideFunc {
		var s algo.State
		return func(l algo.Limit, now time.Time, a vectors.Ask) (algo.Decision, error) {
			p, err := l.Prepare()
			if err != nil {
				return algo.Decision{}, err
			}
			req := algo.Request{Within: a.Within}
			pw, err := p.For(&req)
			if err != nil {
				return algo.Decision{}, err
			}
			if a.Push != 0 {
				pp, err := pw.PushingBack(a.Push)
				if err != nil {
					return algo.Decision{}, err
				}
				pw = &pp
			}
			r, _, err := pw.Decide(&s, now.UnixMilli(), a.Cost)
			return r.Decision(), err
		}
	})
	l := algo.Limit{Rate: 5, Period: time.Second}
	p, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	for _, cost := range []int64{-1, 6} {
		var s1, s2 algo.State
		_, _, want := algo.Decide(l, &s1, 1, cost)
		_, _, got := p.Decide(&s2, 1, cost)
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("cost %d: prepared error %v, Decide error %v", cost, got, want)
		}
	}
	if _, err := (algo.Limit{}).Prepare(); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("Prepare of the zero Limit: %v, want ErrInvalidLimit", err)
	}
	var zero algo.Prepared
	var s algo.State
	if _, _, err := zero.Decide(&s, 1, 1); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Errorf("zero Prepared decided: %v, want ErrInvalidLimit", err)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range algo.Algorithms() {
		got, err := algo.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if a, err := algo.ParseAlgorithm("Sliding-Window-Log"); err != nil || a != algo.SlidingWindowLog {
		t.Errorf("long form: %v, %v", a, err)
	}
	if _, err := algo.ParseAlgorithm("bogus"); err == nil {
		t.Error("ParseAlgorithm(bogus) succeeded")
	}
}

// TestRefusalConsumesNothing walks random-ish timelines and checks, for
// every algorithm, that a refused request leaves the state untouched, that
// RetryAfter is exact (allowed then, refused 1 ms before), and that
// Remaining is what a request of that cost would find.
func TestRefusalConsumesNothingAndRetryIsExact(t *testing.T) {
	for _, a := range algo.Algorithms() {
		l := algo.Limit{Algorithm: a, Rate: 7, Period: 900 * time.Millisecond}
		if a <= algo.LeakyBucket {
			l.Burst = 11
		}
		t.Run(a.String(), func(t *testing.T) {
			var s algo.State
			now := int64(1_800_000_000_000)
			seed := uint32(testenv.Seed(t))
			next := func(n uint32) int64 { seed = seed*1664525 + 1013904223; return int64((seed >> 8) % n) }
			for i := 0; i < 3000; i++ {
				now += next(120)
				cost := 1 + next(uint32(l.Capacity()))
				before := cloneState(s)
				r, _, err := algo.Decide(l, &s, now, cost)
				if err != nil {
					t.Fatal(err)
				}
				if r.Remaining < 0 || r.ResetAfter < 0 || r.RetryAfter < 0 {
					t.Fatalf("negative field: %+v", r)
				}
				if r.Allowed {
					if r.RetryAfter != 0 {
						t.Fatalf("allowed with RetryAfter %d", r.RetryAfter)
					}
					continue
				}
				if !sameState(before, s) {
					t.Fatalf("step %d: refusal changed state %+v -> %+v", i, before, s)
				}
				if cost <= r.Remaining {
					t.Fatalf("step %d: refused cost %d with remaining %d", i, cost, r.Remaining)
				}
				// 1 ms before RetryAfter: still refused; at RetryAfter: allowed.
				if r.RetryAfter > 1 {
					probe := cloneState(s)
					pr, _, _ := algo.Decide(l, &probe, now+r.RetryAfter-1, cost)
					if pr.Allowed {
						t.Fatalf("step %d: allowed 1ms before RetryAfter %d (%+v)", i, r.RetryAfter, l)
					}
				}
				probe := cloneState(s)
				if pr, _, _ := algo.Decide(l, &probe, now+r.RetryAfter, cost); !pr.Allowed {
					t.Fatalf("step %d: refused at RetryAfter %d: %+v", i, r.RetryAfter, pr)
				}
			}
		})
	}
}

// TestTTLMeansFresh checks that once ttl has passed, the state decides
// exactly like a fresh key, which is what lets stores drop it.
func TestTTLMeansFresh(t *testing.T) {
	for _, a := range algo.Algorithms() {
		l := algo.Limit{Algorithm: a, Rate: 5, Period: 700 * time.Millisecond}
		t.Run(a.String(), func(t *testing.T) {
			var s algo.State
			now := int64(1_800_000_000_123)
			for i := 0; i < 200; i++ {
				now += int64(i % 97)
				_, ttl, err := algo.Decide(l, &s, now, int64(1+i%3))
				if err != nil {
					t.Fatal(err)
				}
				at := now + ttl
				old := cloneState(s)
				got, _, _ := algo.Decide(l, &old, at, 0)
				var fresh algo.State
				want, _, _ := algo.Decide(l, &fresh, at, 0)
				if got != want {
					t.Fatalf("step %d: at now+ttl state decides %+v, a fresh key %+v", i, got, want)
				}
			}
		})
	}
}

func cloneState(s algo.State) algo.State {
	c := s
	if s.Log != nil {
		c.Log = algo.CloneLog(s.Log)
	}
	return c
}

// sameState reports whether two states are identical.
func sameState(a, b algo.State) bool {
	if a.A != b.A || a.B != b.B || a.C != b.C {
		return false
	}
	return algo.LogString(a.Log) == algo.LogString(b.Log)
}

// TestCivilDates checks the integer civil-date arithmetic (mirrored in Lua)
// against the time package, day by day over 1970-2200.
func TestCivilDates(t *testing.T) {
	for day := int64(0); day < 84000; day++ {
		tm := time.Unix(day*86400, 0).UTC()
		y, m, d := algo.Civil(day)
		if y != int64(tm.Year()) || m != int64(tm.Month()) || d != int64(tm.Day()) {
			t.Fatalf("day %d: civil = %d-%d-%d, want %v", day, y, m, d, tm)
		}
		if got := algo.DaysFromCivil(y, m, d); got != day {
			t.Fatalf("%d-%d-%d: days = %d, want %d", y, m, d, got, day)
		}
	}
}

// TestCalendarWindows: a daily quota resets at local midnight in its zone,
// a monthly one on the 1st, across a DST change.
func TestCalendarWindows(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	daily := algo.Limit{Algorithm: algo.FixedWindow, Rate: 2, Period: algo.Day, Calendar: algo.Daily, Zone: paris}
	var s algo.State
	at := func(v string) int64 {
		tm, err := time.ParseInLocation("2006-01-02 15:04", v, paris)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	algo.Decide(daily, &s, at("2026-03-28 22:00"), 2)
	r, _, _ := algo.Decide(daily, &s, at("2026-03-28 23:59"), 1)
	if r.Allowed || r.RetryAfter != time.Minute.Milliseconds() {
		t.Fatalf("before local midnight: %+v", r)
	}
	if r, _, _ := algo.Decide(daily, &s, at("2026-03-29 00:00"), 1); !r.Allowed {
		t.Fatalf("at local midnight: %+v", r)
	}
	monthly := algo.Limit{Algorithm: algo.FixedWindow, Rate: 1, Period: algo.Month, Calendar: algo.Monthly, Zone: paris}
	s = algo.State{}
	algo.Decide(monthly, &s, at("2026-02-10 12:00"), 1)
	if r, _, _ := algo.Decide(monthly, &s, at("2026-02-28 23:59"), 1); r.Allowed || r.RetryAfter != time.Minute.Milliseconds() {
		t.Fatalf("end of February: %+v", r)
	}
	if r, _, _ := algo.Decide(monthly, &s, at("2026-03-01 00:00"), 1); !r.Allowed {
		t.Fatalf("1 March: %+v", r)
	}
	bad := daily
	bad.Period = time.Hour
	if bad.Validate() == nil {
		t.Fatal("a daily calendar with a 1h period was accepted")
	}
}

func TestLockout(t *testing.T) {
	r := algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: 15 * time.Minute, Memory: 24 * time.Hour}
	var s algo.State
	now := int64(1_800_000_000_000)
	min := time.Minute.Milliseconds()
	fail := func() algo.LockoutResult {
		res, _ := algo.Lockout(r, &s, nil, now, algo.LockFail, algo.Hold{}, 0)
		return res
	}
	for i := 1; i <= 4; i++ {
		if res := fail(); res.Locked || res.Failures != int64(i) {
			t.Fatalf("failure %d: %+v", i, res)
		}
	}
	if res := fail(); !res.Locked || res.RetryAfter != min || res.Level != 1 {
		t.Fatalf("5th failure: %+v", res)
	}
	// Locked: checks say so and failures while locked change nothing.
	now += 30_000
	if res, _ := algo.Lockout(r, &s, nil, now, algo.LockCheck, algo.Hold{}, 0); !res.Locked || res.RetryAfter != 30_000 {
		t.Fatalf("check during the lock: %+v", res)
	}
	fail()
	// The lock doubles with each offence, up to the cap.
	for level, want := range []int64{2, 4, 8, 16, 32, 60, 60} {
		now += 61 * min
		for i := 0; i < 5; i++ {
			fail()
		}
		res, _ := algo.Lockout(r, &s, nil, now, algo.LockCheck, algo.Hold{}, 0)
		if !res.Locked || res.RetryAfter != want*min {
			t.Fatalf("offence %d: %+v, want a %d min lock", level+2, res, want)
		}
	}
	// A success clears the count; failures far apart never add up.
	now += 2 * time.Hour.Milliseconds()
	fail()
	fail()
	algo.Lockout(r, &s, nil, now, algo.LockSucceed, algo.Hold{}, 0)
	for i := 0; i < 4; i++ {
		fail()
	}
	if res, _ := algo.Lockout(r, &s, nil, now, algo.LockCheck, algo.Hold{}, 0); res.Locked || res.Failures != 4 {
		t.Fatalf("after a success: %+v", res)
	}
	now += 16 * min
	if res := fail(); res.Locked || res.Failures != 1 {
		t.Fatalf("after the failure window: %+v", res)
	}
	// The offence memory forgets old locks.
	var fresh algo.State
	_, ttl := algo.Lockout(r, &fresh, nil, now, algo.LockCheck, algo.Hold{}, 0)
	if ttl != 0 {
		t.Fatalf("a fresh account needs no state, ttl %d", ttl)
	}
	if (algo.LockoutRule{Threshold: 0}).Validate() == nil {
		t.Fatal("threshold 0 accepted")
	}
}

// refGCRA is GCRA as first written, before its divisions were shared, to
// check that the faster form decides exactly alike.
func refGCRA(l algo.Limit, s *algo.State, now, cost int64) (algo.Result, int64) {
	ceilDiv := func(a, b int64) int64 { return (a + b - 1) / b }
	n, period, capacity := l.Rate, l.Period.Milliseconds(), l.Capacity()
	capU := capacity * period
	if lo := s.A - (capU-s.B)/n; now < lo { // written no earlier than when its debt was capU
		now = lo
	}
	var d int64
	if s.A > now || (s.A == now && s.B > 0) {
		d = (s.A-now)*n + s.B
	}
	r := algo.Result{Quota: capacity}
	nd := d + cost*period
	if nd <= capU {
		r.Allowed = true
		if cost > 0 {
			s.A = now + nd/n
			s.B = nd % n
		}
		d = nd
	} else {
		r.RetryAfter = ceilDiv(nd-capU, n)
	}
	r.Remaining = max(0, (capU-d)/period)
	r.ResetAfter = ceilDiv(d, n)
	return r, now
}

func TestGCRAMatchesReference(t *testing.T) {
	rng := testenv.Rand(t)
	for range 2000 {
		l := algo.Limit{Rate: 1 + rng.Int64N(2_000_000), Period: time.Duration(1+rng.Int64N(100_000)) * time.Millisecond}
		if rng.IntN(2) == 0 {
			l.Burst = 1 + rng.Int64N(3*l.Rate)
		}
		if l.Validate() != nil {
			continue
		}
		var got, want algo.State
		now := int64(1_800_000_000_000)
		for range 50 {
			now += rng.Int64N(2*l.Period.Milliseconds()) - l.Period.Milliseconds()/4
			cost := rng.Int64N(l.Capacity() + 1)
			r, ttl, err := algo.Decide(l, &got, now, cost)
			if err != nil {
				t.Fatal(err)
			}
			wr, eff := refGCRA(l, &want, now, cost)
			if off := eff - now; off > 0 {
				if wr.ResetAfter > 0 {
					wr.ResetAfter += off
				}
				if !wr.Allowed {
					wr.RetryAfter += off
				}
			}
			if r != wr || ttl != wr.ResetAfter || got != want {
				t.Fatalf("%v at %d cost %d: got %+v ttl %d state %+v, want %+v state %+v", l, now, cost, r, ttl, got, wr, want)
			}
		}
	}
}
