package algo_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestClockStepsBack: a request timed before the state it meets (a clock
// that stepped back) is decided as of the last update the state records,
// or, for gcra and sliding_counter, which record none, the earliest time
// their state could have been written. Either way it is never looser than
// a decision at the time of the last update, and a query (cost 0) is
// always allowed.
func TestClockStepsBack(t *testing.T) {
	rng := testenv.Rand(t)
	for _, a := range algo.Algorithms() {
		for trial := 0; trial < 3000; trial++ {
			n := 1 + rng.Int64N(20)
			l := algo.Limit{Algorithm: a, Rate: n, Period: time.Duration(1+rng.Int64N(5000)) * time.Millisecond}
			if a <= algo.LeakyBucket && rng.IntN(2) == 0 {
				l.Burst = 1 + rng.Int64N(30)
			}
			var s algo.State
			now := int64(1_800_000_000_000)
			last := now
			for i := rng.IntN(40); i > 0; i-- {
				now += rng.Int64N(2*l.Period.Milliseconds()/n + 1)
				if r, _, err := algo.Decide(l, &s, now, 1+rng.Int64N(l.Capacity())); err != nil {
					t.Fatal(err)
				} else if r.Allowed {
					last = now
				}
			}
			back := last - rng.Int64N(3*l.Period.Milliseconds())
			probe := func(at, cost int64) algo.Result {
				c := s
				if s.Log != nil {
					c.Log = s.Log.Clone()
				}
				r, _, err := algo.Decide(l, &c, at, cost)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			qb, ql := probe(back, 0), probe(last, 0)
			if !qb.Allowed || qb.RetryAfter != 0 || qb.Remaining > ql.Remaining {
				t.Fatalf("%v: a query %d ms before the last update: %+v, want allowed, Remaining at most %d", l, last-back, qb, ql.Remaining)
			}
			for cost := int64(1); cost <= l.Capacity(); cost++ {
				rb, rl := probe(back, cost), probe(last, cost)
				if rb.Allowed && !rl.Allowed {
					t.Fatalf("%v: cost %d, %d ms before the last update: %+v, looser than at the update: %+v", l, cost, last-back, rb, rl)
				}
			}
		}
	}
}
