// Package algo holds Tollgate's rate-limiting algorithms as pure functions of
// (limit, state, now, cost), plus the small value types every store shares.
//
// Nothing here performs I/O or reads a clock: callers pass the time. All
// arithmetic is on integers — time in whole milliseconds, budgets in scaled
// integer units — so that the Lua scripts of the Redis store, which compute
// with IEEE doubles, reach bit-identical decisions as long as every
// intermediate value stays below 2^53. [Limit.Validate] enforces that bound.
package algo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Algorithm selects how a [Limit] is enforced. The zero value is [GCRA].
type Algorithm uint8

const (
	// GCRA is the generic cell rate algorithm: one theoretical arrival time
	// per key. Its decisions equal those of [TokenBucket]; its state is smaller.
	GCRA Algorithm = iota
	// TokenBucket holds up to Burst tokens, refilled continuously at
	// Rate per Period; a request spends Cost tokens.
	TokenBucket
	// LeakyBucket is the leaky bucket used as a meter: each request pours
	// Cost units into a bucket of size Burst that drains at Rate per Period.
	// As a meter it admits exactly what [TokenBucket] admits.
	LeakyBucket
	// FixedWindow counts requests in windows of Period aligned to the Unix
	// epoch. It lets up to 2x Rate through across a window boundary.
	FixedWindow
	// SlidingWindowLog remembers every admitted request for one Period and is
	// exact: no interval of length Period ever admits more than Rate. Its
	// memory grows with Rate.
	SlidingWindowLog
	// SlidingWindowCounter weights the previous fixed window's count by the
	// part of it still inside the sliding window. It approximates
	// [SlidingWindowLog] in constant memory.
	SlidingWindowCounter

	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	GCRA:                 "gcra",
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_log",
	SlidingWindowCounter: "sliding_counter",
}

// Algorithms lists every algorithm, in declaration order.
func Algorithms() []Algorithm {
	out := make([]Algorithm, numAlgorithms)
	for i := range out {
		out[i] = Algorithm(i)
	}
	return out
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// MarshalText implements [encoding.TextMarshaler].
func (a Algorithm) MarshalText() ([]byte, error) {
	if a >= numAlgorithms {
		return nil, fmt.Errorf("marshaling algorithm: unknown algorithm %d", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// ParseAlgorithm returns the algorithm with the given configuration name.
// It also accepts "-" in place of "_" and the long forms
// "sliding_window_log" and "sliding_window_counter".
func ParseAlgorithm(s string) (Algorithm, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	switch n {
	case "sliding_window_log":
		return SlidingWindowLog, nil
	case "sliding_window_counter":
		return SlidingWindowCounter, nil
	}
	for i, name := range algorithmNames {
		if n == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("parsing algorithm: unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[:], ", "))
}

// isBucket reports whether the algorithm is one of the bucket family, whose
// capacity is Burst; the window family's capacity is Rate.
func (a Algorithm) isBucket() bool { return a <= LeakyBucket }

// Limit is a rate limit: Rate units per Period, enforced by Algorithm.
//
// Burst is the most that can be spent at once by the bucket algorithms
// ([GCRA], [TokenBucket], [LeakyBucket]); zero means Rate. The window
// algorithms admit Rate per window and need Burst to be zero or Rate.
// Period is counted in whole milliseconds.
//
// MaxDelay turns a [LeakyBucket] into a shaper (a queue, like nginx
// limit_req without nodelay): a request that does not fit now is admitted
// if it fits within MaxDelay, and its [Decision.Delay] says how long the
// caller must hold it so that requests leave at the rate. Zero means a
// plain meter that refuses at once.
//
// Calendar makes a [FixedWindow] count calendar days or months in Zone
// (nil: UTC) instead of periods since the epoch: "1,000 a day" then resets
// at local midnight, by the zone's rules at both ends of the window, so a
// day with a change of UTC offset lasts as long as it does on the wall
// clock (see [Limit.CalendarBounds]). Period must then be 24h for days and 31×24h for
// months (the longest month; it is what RateLimit-Policy reports).
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	MaxDelay  time.Duration
	Calendar  Calendar
	Zone      *time.Location
}

// Calendar selects calendar windows for a fixed window; see [Limit].
type Calendar uint8

// Calendar windows.
const (
	NoCalendar Calendar = iota
	Daily
	Monthly
)

// Day and Month are the Periods that go with [Daily] and [Monthly].
const (
	Day   = 24 * time.Hour
	Month = 31 * Day
)

// Errors returned for invalid input. A refusal is never an error: it is a
// [Decision] with Allowed false.
var (
	// ErrInvalidLimit reports a Limit that cannot be enforced.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidRequest reports a login-guard rule, a lease or a hold that
	// cannot be used, or a group that repeats a request.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrCostExceedsBurst reports a cost larger than the limit's capacity
	// (Burst, or Rate for window algorithms): such a request could never be
	// allowed, so it is refused as invalid instead of waiting forever.
	ErrCostExceedsBurst = errors.New("cost exceeds burst")
	// ErrNegativeCost reports a cost below zero.
	ErrNegativeCost = errors.New("negative cost")
)

// IsInvalid reports whether err says the request itself was invalid (a bad
// limit, a cost above the capacity or below zero), as opposed to a store
// that could not answer: retrying or failing over will not help.
func IsInvalid(err error) bool {
	return errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrCostExceedsBurst) || errors.Is(err, ErrNegativeCost) ||
		errors.Is(err, ErrInvalidRequest)
}

// maxUnits bounds every product the algorithms form (capacity × period), so
// that sums of two such values stay exact in a Lua double (< 2^53).
const maxUnits = 1 << 50

// Capacity returns the most that can be spent at once: Burst (or Rate when
// Burst is zero) for bucket algorithms, Rate for window algorithms.
func (l Limit) Capacity() int64 {
	if l.Algorithm.isBucket() && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// Validate reports whether the limit can be enforced exactly.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// params is a validated Limit in integer units.
type params struct {
	alg    Algorithm
	n      int64 // rate: n per period
	period int64 // milliseconds
	cap    int64 // burst for buckets, n for windows
	delay  int64 // MaxDelay in milliseconds
	within int64 // a request's queue threshold in ms (Request.Within); 0: delay
	push   int64 // > 0: Decide pushes the schedule back this many ms (PushingBack)
	cal    Calendar
	zone   *time.Location

	// Set by Prepare.
	capU int64 // cap × period
	owe  int64 // the most a settle lets the state owe (oweLimit)

	// Set by Taking and GivingBack.
	place *Place // set: Decide reports there the place a charge took (Taking)
	give  *Place // set: Decide gives this place back (GivingBack)
}

// params checks the limit, in order: its shape, then what it counts
// (which divides by the rate and the period the first checks hold
// positive), then its calendar and its shaping delay; and returns it
// prepared for Decide.
func (l Limit) params() (params, error) {
	p := params{alg: l.Algorithm, n: l.Rate, period: l.Period.Milliseconds(), cap: l.Capacity(), delay: l.MaxDelay.Milliseconds(), cal: l.Calendar, zone: l.Zone}
	for _, check := range []func(params) error{l.checkShape, l.checkRange, l.checkCalendar, l.checkDelay} {
		if err := check(p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// checkShape checks the algorithm, the rate, the period and the burst.
func (l Limit) checkShape(p params) error {
	switch {
	case l.Algorithm >= numAlgorithms:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, uint8(l.Algorithm))
	case l.Rate < 1:
		return fmt.Errorf("%w: rate must be at least 1, got %d", ErrInvalidLimit, l.Rate)
	case l.Period < time.Millisecond || l.Period%time.Millisecond != 0:
		return fmt.Errorf("%w: period must be a whole number of milliseconds, at least 1ms, got %v", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d", ErrInvalidLimit, l.Burst)
	case !l.Algorithm.isBucket() && l.Burst != 0 && l.Burst != l.Rate:
		return fmt.Errorf("%w: %s admits rate per window and takes no burst (got burst %d, rate %d)", ErrInvalidLimit, l.Algorithm, l.Burst, l.Rate)
	}
	return nil
}

// checkRange checks that the limit counts exactly and reports durations
// within MaxHorizon.
func (l Limit) checkRange(p params) error {
	switch {
	case l.Algorithm == FixedWindow && p.n > maxUnits:
		return fmt.Errorf("%w: rate %d is too large (at most 2^50)", ErrInvalidLimit, p.n)
	case l.Algorithm != FixedWindow && (p.n > maxUnits/p.period || p.cap > maxUnits/p.period):
		return fmt.Errorf("%w: %d per %v is too large to count exactly (rate × period and burst × period must stay below 2^50 ms); use a shorter period", ErrInvalidLimit, max(p.n, p.cap), l.Period)
	case l.Algorithm.isBucket() && ceilDiv(p.cap*p.period, p.n)+p.delay > maxHorizonMS,
		l.Algorithm == SlidingWindowCounter && 2*p.period > maxHorizonMS,
		p.period > maxHorizonMS:
		return fmt.Errorf("%w: %s: it would report durations past %v (a full refill of burst × period / rate plus max_delay, a window, twice the window for sliding_counter); use a larger rate or a smaller burst or period", ErrInvalidLimit, l, MaxHorizon)
	case l.Algorithm == SlidingWindowLog && p.n > MaxLogRate:
		return fmt.Errorf("%w: sliding_log keeps one entry per request and allows at most %d per period, got %d; use sliding_counter", ErrInvalidLimit, MaxLogRate, p.n)
	}
	return nil
}

// checkCalendar checks a calendar (day, month) window.
func (l Limit) checkCalendar(params) error {
	switch {
	case l.Calendar > Monthly:
		return fmt.Errorf("%w: unknown calendar %d", ErrInvalidLimit, l.Calendar)
	case l.Calendar != NoCalendar && l.Algorithm != FixedWindow:
		return fmt.Errorf("%w: calendar windows (day, month) need the fixed_window algorithm, not %s", ErrInvalidLimit, l.Algorithm)
	case l.Calendar == Daily && l.Period != Day, l.Calendar == Monthly && l.Period != Month:
		return fmt.Errorf("%w: a calendar %s limit has period %v, want %v", ErrInvalidLimit, l.Calendar, l.Period, map[Calendar]time.Duration{Daily: Day, Monthly: Month}[l.Calendar])
	}
	return nil
}

// checkDelay checks a shaping limit's max_delay.
func (l Limit) checkDelay(p params) error {
	switch {
	case l.MaxDelay != 0 && l.Algorithm != LeakyBucket:
		return fmt.Errorf("%w: max_delay (shaping) needs the leaky_bucket algorithm, not %s", ErrInvalidLimit, l.Algorithm)
	case l.MaxDelay < 0 || l.MaxDelay%time.Millisecond != 0:
		return fmt.Errorf("%w: max_delay must be a whole number of milliseconds, got %v", ErrInvalidLimit, l.MaxDelay)
	case p.delay > 0 && p.delay > (maxUnits-p.cap*p.period)/p.n:
		return fmt.Errorf("%w: max_delay %v is too long for %d per %v", ErrInvalidLimit, l.MaxDelay, p.n, l.Period)
	}
	return nil
}

// MaxHorizon is the longest duration a limit may produce: the time a
// bucket takes to refill from empty (plus its max_delay), a window, or
// two windows for a sliding counter. It is 200 years of 365 days, well
// inside what a time.Duration holds (about 292 years), so ResetAfter and
// RetryAfter are exact; only a clock that stepped back by decades could
// take them past it, and they then saturate ([Millis]).
const MaxHorizon = 200 * 365 * Day

const maxHorizonMS = int64(MaxHorizon / time.Millisecond)

// MaxLogRate is the largest Rate a [SlidingWindowLog] limit may have: the
// log stores every admitted unit of cost for a whole period.
const MaxLogRate = 100_000

// String formats the limit as, for example, "token_bucket 100/1m0s burst 20".
func (l Limit) String() string {
	s := fmt.Sprintf("%s %d/%v", l.Algorithm, l.Rate, l.Period)
	if l.Algorithm.isBucket() && l.Burst != 0 && l.Burst != l.Rate {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	if l.MaxDelay > 0 {
		s += fmt.Sprintf(" delay up to %v", l.MaxDelay)
	}
	if l.Calendar != NoCalendar {
		s = fmt.Sprintf("%s %d per calendar %s (%s)", l.Algorithm, l.Rate, l.Calendar, l.zone())
	}
	return s
}

// zone is the name of the limit's calendar time zone: UTC for none.
func (l Limit) zone() string {
	if l.Zone == nil {
		return "UTC"
	}
	return l.Zone.String()
}

// Decision is the answer to one request. A refusal is a Decision with
// Allowed false, never an error.
type Decision struct {
	// Allowed reports whether the request was admitted. An admitted request
	// has been charged its cost; a refused one has been charged nothing.
	Allowed bool
	// Quota is the limit's capacity: the most that can be spent at once
	// (Burst for bucket algorithms, Rate per window for window algorithms).
	Quota int64
	// Remaining is how much more could be spent right now, after this
	// request, without being refused. It is never negative.
	Remaining int64
	// ResetAfter is how long until, with no further requests, the full
	// capacity is available again. Zero means it is available now.
	ResetAfter time.Duration
	// RetryAfter is, for a refused request, the earliest time from now at
	// which the same request (same cost) would be allowed if nothing else
	// is spent meanwhile. It is zero when Allowed is true.
	RetryAfter time.Duration
	// Delay is, for an allowed request under a shaping limit
	// ([Limit.MaxDelay]), how long the caller must wait before letting it
	// through. It is zero otherwise.
	Delay time.Duration
	// Debt is, after a settle ([Settlement]), how far the budget is below
	// zero: the units owed beyond the capacity, which later requests wait
	// for. Decisions leave it 0.
	Debt int64
}

// Request is one question put to a store: may Subject spend Cost under the
// limit named Name?
type Request struct {
	// Name names the limit; together with Subject and the algorithm it
	// identifies the stored state. Different limits must use different names.
	Name string
	// Subject is who is limited: an API key id, a user id, a client IP.
	// Stores may hash it; callers should already pass a hashed identity.
	Subject string
	// Tag, when set, groups the state with other subjects' (a user's with
	// its tenant's, say) so that they can be decided together atomically:
	// on Redis Cluster the Tag, not the Subject, picks the hash slot. The
	// empty Tag means the Subject is its own group.
	Tag string
	// Limit is the limit to enforce.
	Limit Limit
	// Cost is how much the request spends; zero asks without spending.
	Cost int64
	// Within is, on a shaping limit ([Limit.MaxDelay]), the request's own
	// queue threshold: it is admitted only if its turn comes within
	// Within of now, so a class of lesser requests can be kept out of a
	// queue that still takes more important ones up to MaxDelay. Zero
	// means the limit's MaxDelay; more than MaxDelay, a negative value, a
	// fraction of a millisecond, or any value on a limit that does not
	// shape is an error ([ErrInvalidRequest]). It changes only what is
	// admitted: the queue itself is still bounded by MaxDelay.
	Within time.Duration
	// Now is the decision time. The zero Time means the store's own clock
	// (Redis' TIME for the Redis store), which is what production uses;
	// explicit times are for tests and test vectors.
	Now time.Time
	// Handle, when set, is the limit prepared once (see [Handle.Request]);
	// stores then skip validating and preparing Limit. It is ignored when
	// Name or Limit no longer match it.
	Handle *Handle
}

// Group returns the request's group: its Tag, or its Subject when the Tag
// is empty.
func (r Request) Group() string {
	if r.Tag != "" {
		return r.Tag
	}
	return r.Subject
}

// MaxGroup is the most requests a store decides together.
const MaxGroup = 16

// ErrMixedGroup reports requests decided together that do not share a
// group or a time.
// It is an [ErrInvalidRequest]: retrying or failing over will not help.
var ErrMixedGroup = fmt.Errorf("%w: requests decided together must share one group and one time", ErrInvalidRequest)

// ItemError is the error of one request of a group that could not be
// decided (an invalid limit or cost, a request that repeats another):
// Index is its position in the group.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("request %d: %v", e.Index, e.Err) }

// Unwrap returns the request's error.
func (e *ItemError) Unwrap() error { return e.Err }

// CheckGroup validates requests to be decided together, all or nothing:
// between 1 and MaxGroup of them, one group, one time, each limit and cost
// valid (a limit that comes with its handle was validated when the handle
// was made). An error about one request is an [ItemError].
func CheckGroup(reqs []Request) error {
	if len(reqs) == 0 || len(reqs) > MaxGroup {
		return fmt.Errorf("deciding together: %w: %d requests (want 1 to %d)", ErrInvalidRequest, len(reqs), MaxGroup)
	}
	for i := range reqs {
		if err := checkMember(reqs, i); err != nil {
			return fmt.Errorf("deciding together: %w", &ItemError{i, err})
		}
	}
	return nil
}

// checkMember checks request i of a group: it shares the first's group
// and time, repeats none before it, and its limit and cost are valid.
func checkMember(reqs []Request, i int) error {
	r := &reqs[i]
	if r.Group() != reqs[0].Group() || !r.Now.Equal(reqs[0].Now) {
		return ErrMixedGroup
	}
	if repeats(reqs[:i], r) {
		return fmt.Errorf("%w: it repeats policy %q for the same subject", ErrInvalidRequest, r.Name)
	}
	if r.Prepared() == nil {
		if err := r.Limit.Validate(); err != nil {
			return err
		}
	}
	if err := r.Limit.CheckCost(r.Cost); err != nil {
		return err
	}
	return r.CheckWithin()
}

// repeats reports whether one of reqs is for r's policy, subject and
// algorithm: the same key.
func repeats(reqs []Request, r *Request) bool {
	return slices.ContainsFunc(reqs, func(o Request) bool {
		return o.Name == r.Name && o.Subject == r.Subject && o.Limit.Algorithm == r.Limit.Algorithm
	})
}

// String returns "day", "month" or "none".
func (c Calendar) String() string {
	switch c {
	case Daily:
		return "day"
	case Monthly:
		return "month"
	case NoCalendar:
		return "none"
	}
	return fmt.Sprintf("calendar(%d)", uint8(c))
}
