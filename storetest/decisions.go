package storetest

import (
	"math"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// A cond is one condition a check puts on a result of type T: a
// decision, a login-guard result, whether a lease was granted.
type cond[T any] func(T) bool

// meets reports whether a result v, returned with err, meets every
// condition of cs: never when err is not nil.
func meets[T any](v T, err error, cs ...cond[T]) bool {
	if err != nil {
		return false
	}
	for _, c := range cs {
		if !c(v) {
			return false
		}
	}
	return true
}

// is is the condition that a result is want.
func is[T comparable](want T) cond[T] {
	return func(v T) bool { return v == want }
}

// forever is the longest duration, the open upper end of the ranges of
// delayIn and retryIn.
const forever = time.Duration(math.MaxInt64)

// allowed is the condition that a decision admits its request.
func allowed(d algo.Decision) bool { return d.Allowed }

// refused is the condition that a decision refuses its request.
func refused(d algo.Decision) bool { return !d.Allowed }

// left is the condition that a decision leaves exactly n (Remaining).
func left(n int64) cond[algo.Decision] {
	return func(d algo.Decision) bool { return d.Remaining == n }
}

// delay is the condition that a decision's Delay is exactly x.
func delay(x time.Duration) cond[algo.Decision] {
	return func(d algo.Decision) bool { return d.Delay == x }
}

// delayIn is the condition that a decision's Delay is more than lo and
// at most hi.
func delayIn(lo, hi time.Duration) cond[algo.Decision] {
	return func(d algo.Decision) bool { return lo < d.Delay && d.Delay <= hi }
}

// retryAfter is the condition that a decision's RetryAfter is exactly x.
func retryAfter(x time.Duration) cond[algo.Decision] {
	return func(d algo.Decision) bool { return d.RetryAfter == x }
}

// retryIn is the condition that a decision's RetryAfter is more than lo
// and at most hi.
func retryIn(lo, hi time.Duration) cond[algo.Decision] {
	return func(d algo.Decision) bool { return lo < d.RetryAfter && d.RetryAfter <= hi }
}

// resetAfter is the condition that a decision's ResetAfter is exactly x.
func resetAfter(x time.Duration) cond[algo.Decision] {
	return func(d algo.Decision) bool { return d.ResetAfter == x }
}

// resetBeyond is the condition that a decision's ResetAfter is more than
// x.
func resetBeyond(x time.Duration) cond[algo.Decision] {
	return func(d algo.Decision) bool { return d.ResetAfter > x }
}

// locked is the condition that a login-guard result is locked.
func locked(r algo.LockoutResult) bool { return r.Locked }

// unlocked is the condition that a login-guard result is not locked.
func unlocked(r algo.LockoutResult) bool { return !r.Locked }

// level is the condition that a login-guard result counts n locks.
func level(n int64) cond[algo.LockoutResult] {
	return func(r algo.LockoutResult) bool { return r.Level == n }
}

// failures is the condition that a login-guard result counts n failures.
func failures(n int64) cond[algo.LockoutResult] {
	return func(r algo.LockoutResult) bool { return r.Failures == n }
}

// lockedFor is the condition that a login-guard result's lock ends in
// d (RetryAfter, in milliseconds).
func lockedFor(d time.Duration) cond[algo.LockoutResult] {
	return func(r algo.LockoutResult) bool { return r.RetryAfter == d.Milliseconds() }
}

// unreserved is the condition that a login-guard result held no
// attempt.
func unreserved(r algo.LockoutResult) bool { return !r.Reserved }

// holding is the condition that a login-guard result counts n attempts
// held.
func holding(n int64) cond[algo.LockoutResult] {
	return func(r algo.LockoutResult) bool { return r.Held == n }
}
