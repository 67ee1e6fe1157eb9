package storetest

import (
	"math"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// A cond is one condition a check puts on a decision.
type cond func(algo.Decision) bool

// forever is the longest duration, the open upper end of the ranges of
// delayIn and retryIn.
const forever = time.Duration(math.MaxInt64)

// meets reports whether a decision d, made with err, meets every
// condition of cs: never when err is not nil.
func meets(d algo.Decision, err error, cs ...cond) bool {
	if err != nil {
		return false
	}
	for _, c := range cs {
		if !c(d) {
			return false
		}
	}
	return true
}

// allowed is the condition that a decision admits its request.
func allowed(d algo.Decision) bool { return d.Allowed }

// refused is the condition that a decision refuses its request.
func refused(d algo.Decision) bool { return !d.Allowed }

// left is the condition that a decision leaves exactly n (Remaining).
func left(n int64) cond {
	return func(d algo.Decision) bool { return d.Remaining == n }
}

// delay is the condition that a decision's Delay is exactly x.
func delay(x time.Duration) cond {
	return func(d algo.Decision) bool { return d.Delay == x }
}

// delayIn is the condition that a decision's Delay is more than lo and
// at most hi.
func delayIn(lo, hi time.Duration) cond {
	return func(d algo.Decision) bool { return lo < d.Delay && d.Delay <= hi }
}

// retryAfter is the condition that a decision's RetryAfter is exactly x.
func retryAfter(x time.Duration) cond {
	return func(d algo.Decision) bool { return d.RetryAfter == x }
}

// retryIn is the condition that a decision's RetryAfter is more than lo
// and at most hi.
func retryIn(lo, hi time.Duration) cond {
	return func(d algo.Decision) bool { return lo < d.RetryAfter && d.RetryAfter <= hi }
}

// resetAfter is the condition that a decision's ResetAfter is exactly x.
func resetAfter(x time.Duration) cond {
	return func(d algo.Decision) bool { return d.ResetAfter == x }
}

// resetBeyond is the condition that a decision's ResetAfter is more than
// x.
func resetBeyond(x time.Duration) cond {
	return func(d algo.Decision) bool { return d.ResetAfter > x }
}
