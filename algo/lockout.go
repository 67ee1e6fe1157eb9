package algo

import (
	"fmt"
	"time"
)

// LockoutRule is the login guard's rule for one account: after Threshold
// failures within Window of each other, the account is locked for Lock;
// each further lock within Memory of the previous one doubles, up to
// MaxLock. A success clears the failure count (not the lock history) when
// every failure counted was spelt as the success was (see
// [LockoutRequest].Spelling); else the failures stay until they age out
// of Window, so a look-alike account a client can log into cannot clear
// another's count.
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
		return fmt.Errorf("%w: lockout rule: the failure threshold must be at least 1", ErrInvalidRequest)
	case r.Lock < time.Millisecond || r.MaxLock < r.Lock:
		return fmt.Errorf("%w: lockout rule: want 1ms <= lock (%v) <= max lock (%v)", ErrInvalidRequest, r.Lock, r.MaxLock)
	case r.Window < time.Millisecond || r.Memory < time.Millisecond:
		return fmt.Errorf("%w: lockout rule: the failure window and offence memory must be at least 1ms", ErrInvalidRequest)
	case max(r.MaxLock, r.Window, r.Memory) > 365*24*time.Hour:
		return fmt.Errorf("%w: lockout rule: durations are at most a year", ErrInvalidRequest)
	}
	return nil
}

// LockOp is what happened to an account.
type LockOp uint8

// Lockout operations. An attempt is first reserved, before it is sent to
// the service that checks the password, and then settled by its outcome:
// a failure, a success, or neither (no answer, an error).
const (
	// LockCheck asks whether the account is locked and changes nothing.
	LockCheck LockOp = iota
	// LockFail records a failed login, settling the attempt the request's
	// hold reserved, if any.
	LockFail
	// LockSucceed records a successful login, settling its hold, if any.
	LockSucceed
	// LockReserve holds a place for an attempt about to be forwarded. It
	// is refused while the account is locked, and while the failures
	// counted and the attempts already held add up to the threshold: so
	// however many attempts arrive at once, no more reach the service than
	// one at a time would, before the lock.
	LockReserve
	// LockRelease gives back an attempt whose outcome says nothing about
	// the password (the service failed, or never answered).
	LockRelease
)

// LockoutResult is the state of an account after an operation.
type LockoutResult struct {
	Locked     bool
	RetryAfter int64 // ms until the lock ends (0 when not locked)
	Failures   int64 // failures counted towards the next lock
	Level      int64 // locks so far within the offence memory
	// Reserved reports, for LockReserve, whether the attempt was held.
	// An attempt refused while the account is not Locked was refused
	// because Failures and Held reached the threshold.
	Reserved bool
	Held     int64 // attempts held, after the operation
}

// Lockout applies op at nowMS to an account's state, kept in s as
// A failures, B last failure (ms), C level and the failures' spelling
// (C = level + spelling·2^20, see lockLevels), D lock end (ms), E last
// lock (ms), and in holds, the attempts reserved and not yet settled
// (which LockReserve adds h to; the settling operations remove h.ID).
// holds may be nil for operations other than LockReserve. spelling is
// the request's (LockoutRequest.Spelling). It returns the result and the
// ms after nowMS from which the state and the holds are equivalent to
// none.
func Lockout(r LockoutRule, s *State, holds Holds, now int64, op LockOp, h Hold, spelling uint32) (LockoutResult, int64) {
	a := readAccount(r, s, now)
	held := holds.Live(now) - settled(holds, op, h)
	locked := now < a.until
	res := LockoutResult{}
	switch {
	case op == LockReserve:
		res.Reserved, held = reserveAttempt(holds, h, now, held, !locked && a.fails+held < r.Threshold)
	case op == LockFail && !locked:
		locked = a.fail(r, now, spelling)
		a.write(s)
	case op == LockSucceed && (a.fails == 0 || a.spelt == int64(spelling)):
		a.fails = 0
		s.A = 0 // and with it the spelling: read as none while A is 0
	}
	res.Locked, res.Failures, res.Level, res.Held = locked, a.fails, a.level, held
	if locked {
		res.RetryAfter = a.until - now
	}
	return res, max(a.ttl(r, now, locked), holds.Until(now))
}

// settled removes from holds the attempt h that op settles, if it is
// held, and returns how many it removed (0 or 1). LockCheck and
// LockReserve settle nothing.
func settled(holds Holds, op LockOp, h Hold) int64 {
	if op == LockCheck || op == LockReserve || h.ID == "" {
		return 0
	}
	if _, ok := holds[h.ID]; !ok {
		return 0
	}
	delete(holds, h.ID)
	return 1
}

// An account is an account's lockout state as Lockout reads it from a
// State: the failures counted, the last one's time, the lock's end, the
// last lock's time, the lock level and the failures' spelling.
type account struct {
	fails, lastFail, until, lastLock, level, spelt int64
}

// readAccount reads s at now under r: failures older than the window,
// and lock levels older than the offence memory, are forgotten.
func readAccount(r LockoutRule, s *State, now int64) account {
	a := account{fails: s.A, lastFail: s.B, until: s.D, lastLock: s.E,
		level: s.C % lockLevels, spelt: s.C / lockLevels}
	if now-a.lastFail >= r.Window.Milliseconds() {
		a.fails = 0
	}
	if now-a.lastLock >= r.Memory.Milliseconds() {
		a.level = 0
	}
	if a.fails == 0 {
		a.spelt = 0
	}
	return a
}

// write writes a to s.
func (a *account) write(s *State) {
	s.A, s.B, s.C, s.D, s.E = a.fails, a.lastFail, a.level+a.spelt*lockLevels, a.until, a.lastLock
}

// fail counts a failure, spelt spelling, at now, and locks the account
// when the failures reach the threshold, reporting whether it did.
func (a *account) fail(r LockoutRule, now int64, spelling uint32) bool {
	switch {
	case a.fails == 0:
		a.spelt = int64(spelling)
	case a.spelt != int64(spelling):
		a.spelt = mixedSpellings
	}
	a.fails++
	a.lastFail = now
	if a.fails < r.Threshold {
		return false
	}
	a.until, a.lastLock = now+lockFor(r, a.level), now
	a.level = min(a.level+1, lockLevels-1)
	a.fails, a.spelt = 0, 0
	return true
}

// ttl returns the ms after now from which a is equivalent to no state.
func (a *account) ttl(r LockoutRule, now int64, locked bool) int64 {
	if a.fails == 0 && a.level == 0 && !locked {
		return 0
	}
	return max(a.until-now, a.lastFail+r.Window.Milliseconds()-now, a.lastLock+r.Memory.Milliseconds()-now, 0)
}

// reserveAttempt holds h in holds at now if admit, or reports it reserved
// if it is held already (a retried call). It returns whether h is
// reserved, and the attempts held.
func reserveAttempt(holds Holds, h Hold, now, held int64, admit bool) (bool, int64) {
	if _, ok := holds[h.ID]; ok {
		return true, held
	}
	if !admit {
		return false, held
	}
	holds[h.ID] = now + h.TTL.Milliseconds()
	return true, held + 1
}

// lockLevels bounds the lock level kept (a level past 20 or so doubles
// Lock past any MaxLock anyway); the failures' spelling is kept above it
// in State.C. mixedSpellings is the spelling of failures spelt in more
// than one way, which no success clears. Both keep C below 2^53, exact
// in the Lua's doubles.
const (
	lockLevels     = 1 << 20
	mixedSpellings = 1 << 32
)

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
	Name    string // names the rule; part of the storage key
	Subject string // the account (a pseudonym)
	Rule    LockoutRule
	Op      LockOp
	// Hold is the attempt LockReserve holds and the settling operations
	// end; its zero value is no attempt (then LockReserve is invalid).
	Hold Hold
	// Spelling tells apart the ways an account was spelt that Subject
	// counts as one (a digest of the name as the client wrote it, keyed
	// so no client can pick one to match another's; zero for callers
	// that do not tell): a success clears the failures only if they were
	// all spelt as it is.
	Spelling uint32
	Now      time.Time // zero: the store's clock
}

// Validate reports whether the request is usable.
func (q LockoutRequest) Validate() error {
	if err := q.Rule.Validate(); err != nil {
		return err
	}
	switch {
	case q.Op > LockRelease:
		return fmt.Errorf("%w: unknown lockout operation %d", ErrInvalidRequest, q.Op)
	case q.Op == LockReserve || q.Hold != (Hold{}):
		if err := q.Hold.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// LeaseRequest asks a store for, or returns, one of Limit concurrent slots
// of Subject under Name. A slot is a lease that expires after TTL unless
// released, so a crashed holder cannot leak it.
type LeaseRequest struct {
	Name    string
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
		return fmt.Errorf("%w: lease: the concurrency limit must be at least 1", ErrInvalidRequest)
	case r.TTL < time.Millisecond:
		return fmt.Errorf("%w: lease: the lease TTL must be at least 1ms", ErrInvalidRequest)
	case r.ID == "" || len(r.ID) > 128:
		return fmt.Errorf("%w: lease: the lease id must be 1 to 128 bytes", ErrInvalidRequest)
	}
	return nil
}
