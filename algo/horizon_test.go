package algo_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestDurationsNeverWrap: time.Duration holds about 292 years; no limit
// that validates may report a negative or wrapped duration. The issue's
// two limits (a refill of 317 years, a sliding window pair of 380) are
// refused as invalid; the longest limits that validate report their
// durations exactly; and a state far ahead of the clock (a clock that
// stepped back by centuries) saturates instead of wrapping.
func TestDurationsNeverWrap(t *testing.T) {
	for _, l := range []algo.Limit{
		{Algorithm: algo.GCRA, Rate: 1, Period: 1e10 * time.Millisecond, Burst: 1000},
		{Algorithm: algo.TokenBucket, Rate: 1, Period: 1e10 * time.Millisecond, Burst: 1000},
		{Algorithm: algo.SlidingWindowCounter, Rate: 7, Period: 6e12 * time.Millisecond},
		{Algorithm: algo.FixedWindow, Rate: 7, Period: 7e12 * time.Millisecond},
		{Algorithm: algo.LeakyBucket, Rate: 1, Period: 3e12 * time.Millisecond, MaxDelay: 4e12 * time.Millisecond},
	} {
		if err := l.Validate(); !errors.Is(err, algo.ErrInvalidLimit) {
			t.Errorf("%v: Validate() = %v, want ErrInvalidLimit (its durations pass %v)", l, err, algo.MaxHorizon)
		}
	}
	h := algo.MaxHorizon.Milliseconds()
	now := int64(1_800_000_000_000)
	for _, l := range []algo.Limit{
		{Algorithm: algo.GCRA, Rate: 1, Period: algo.MaxHorizon / 1000, Burst: 1000},
		{Algorithm: algo.TokenBucket, Rate: 3, Period: algo.MaxHorizon / 1000 * 3, Burst: 1000},
		{Algorithm: algo.LeakyBucket, Rate: 1, Period: algo.MaxHorizon / 2, MaxDelay: algo.MaxHorizon / 2},
		{Algorithm: algo.FixedWindow, Rate: 5, Period: algo.MaxHorizon},
		{Algorithm: algo.SlidingWindowLog, Rate: 5, Period: algo.MaxHorizon},
		{Algorithm: algo.SlidingWindowCounter, Rate: 5, Period: algo.MaxHorizon / 2},
	} {
		if err := l.Validate(); err != nil {
			t.Fatalf("%v: %v", l, err)
		}
		var s algo.State
		var last algo.Result
		for i := 0; i < 2000; i++ {
			r, _, err := algo.Decide(l, &s, now, 1)
			if err != nil {
				t.Fatal(err)
			}
			last = r
			if !r.Allowed {
				break
			}
		}
		if last.Allowed {
			t.Fatalf("%v: never refused", l)
		}
		d := last.Decision()
		if d.ResetAfter <= 0 || d.RetryAfter <= 0 || d.ResetAfter != time.Duration(last.ResetAfter)*time.Millisecond ||
			d.RetryAfter != time.Duration(last.RetryAfter)*time.Millisecond || last.ResetAfter > h || last.RetryAfter > h {
			t.Errorf("%v: refusal %+v, decision %+v: want exact positive durations within %v", l, last, d, algo.MaxHorizon)
		}
	}
	// A clock that steps back by centuries: the state is far ahead of now.
	for _, a := range algo.Algorithms() {
		l := algo.Limit{Algorithm: a, Rate: 5, Period: algo.MaxHorizon / 2}
		var s algo.State
		if _, _, err := algo.Decide(l, &s, 250*365*int64(algo.Day/time.Millisecond), 5); err != nil {
			t.Fatal(err)
		}
		r, _, err := algo.Decide(l, &s, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := r.Decision(); d.ResetAfter < 0 || d.RetryAfter < 0 {
			t.Errorf("%v: after a step back of 250 years: %+v", a, d)
		} else if r.ResetAfter > math.MaxInt64/int64(time.Millisecond) && d.ResetAfter != time.Duration(math.MaxInt64) {
			t.Errorf("%v: ResetAfter %d ms reported as %v, want the longest duration", a, r.ResetAfter, d.ResetAfter)
		}
	}
}
