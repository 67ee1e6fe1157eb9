package algo

import (
	"errors"
	"fmt"
	"time"
)

// LockoutRule is the login guard's rule for one account: after Threshold
// failures within Window of each other, the account is locked for Lock;
// each further lock within Memory of the previous one doubles, up to
// MaxLock. A success clears the failure count (not the lock history).
type LockoutRule struct {
	Threshold int64
	Lock      time.Duration
	MaxLock   time.Duration
	Window    time.Duration
	Memory    time.Duration
}

// Validate reports whether the rule is usable.
func (r LockoutRule) Validate() error {
	switch {
	case r.Threshold < 1:
		return errors.New("invalid lockout rule: the failure threshold must be at least 1")
	case r.Lock < time.Millisecond || r.MaxLock < r.Lock:
		return fmt.Errorf("invalid lockout rule: want 1ms <= lock (%v) <= max lock (%v)", r.Lock, r.MaxLock)
	case r.Window < time.Millisecond || r.Memory < time.Millisecond:
		return errors.New("invalid lockout rule: the failure window and offence memory must be at least 1ms")
	case r.MaxLock > 365*24*time.Hour || r.Window > 365*24*time.Hour || r.Memory > 365*24*time.Hour:
		return errors.New("invalid lockout rule: durations are at most a year")
	}
	return nil
}

// LockOp is what happened to an account.
type LockOp uint8

// Lockout operations.
const (
	// LockCheck asks whether the account is locked and changes nothing.
	LockCheck LockOp = iota
	// LockFail records a failed login.
	LockFail
	// LockSucceed records a successful login.
	LockSucceed
)

// LockoutResult is the state of an account after an operation.
type LockoutResult struct {
	Locked     bool
	RetryAfter int64 // ms until the lock ends (0 when not locked)
	Failures   int64 // failures counted towards the next lock
	Level      int64 // locks so far within the offence memory
}

// Lockout applies op at nowMS to an account's state, kept in s as
// A failures, B last failure (ms), C level, D lock end (ms), E last lock
// (ms). It returns the result and the ms after nowMS from which the state
// is equivalent to a fresh one.
func Lockout(r LockoutRule, s *State, now int64, op LockOp) (LockoutResult, int64) {
	win, mem := r.Window.Milliseconds(), r.Memory.Milliseconds()
	fails, lastFail, level, until, lastLock := s.A, s.B, s.C, s.D, s.E
	if now-lastFail >= win {
		fails = 0
	}
	if now-lastLock >= mem {
		level = 0
	}
	locked := now < until
	switch {
	case op == LockFail && !locked:
		fails++
		lastFail = now
		if fails >= r.Threshold {
			d := lockFor(r, level)
			until, lastLock = now+d, now
			level++
			fails = 0
			locked = true
		}
		s.A, s.B, s.C, s.D, s.E = fails, lastFail, level, until, lastLock
	case op == LockSucceed:
		fails = 0
		s.A = 0
	}
	res := LockoutResult{Locked: locked, Failures: fails, Level: level}
	if locked {
		res.RetryAfter = until - now
	}
	ttl := max(until-now, lastFail+win-now, lastLock+mem-now, 0)
	if fails == 0 && level == 0 && !locked {
		ttl = 0
	}
	return res, ttl
}

// lockFor returns the lock length after level earlier locks: Lock doubled
// level times, capped at MaxLock (doubling stops at the cap, so it never
// overflows and the Lua mirror stays exact).
func lockFor(r LockoutRule, level int64) int64 {
	d, maxD := r.Lock.Milliseconds(), r.MaxLock.Milliseconds()
	for i := int64(0); i < level && d < maxD; i++ {
		d *= 2
	}
	return min(d, maxD)
}

// LockoutRequest is one login-guard operation put to a store.
type LockoutRequest struct {
	Policy  string // names the rule; part of the storage key
	Subject string // the account (a pseudonym)
	Rule    LockoutRule
	Op      LockOp
	Now     time.Time // zero: the store's clock
}

// LeaseRequest asks a store for, or returns, one of Limit concurrent slots
// of Subject under Policy. A slot is a lease that expires after TTL unless
// released, so a crashed holder cannot leak it.
type LeaseRequest struct {
	Policy  string
	Subject string
	ID      string // unique per lease
	Limit   int64
	TTL     time.Duration
	Now     time.Time // zero: the store's clock
}

// Validate reports whether the lease request is usable.
func (r LeaseRequest) Validate() error {
	switch {
	case r.Limit < 1:
		return errors.New("invalid lease: the concurrency limit must be at least 1")
	case r.TTL < time.Millisecond:
		return errors.New("invalid lease: the lease TTL must be at least 1ms")
	case r.ID == "" || len(r.ID) > 128:
		return errors.New("invalid lease: the lease id must be 1 to 128 bytes")
	}
	return nil
}
