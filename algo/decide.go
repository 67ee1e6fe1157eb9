package algo

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// State is the per-key state of every algorithm. The zero State is a key
// that has never been seen (a full bucket, an empty window).
//
// Fields mean, by algorithm:
//
//	GCRA                  A: theoretical arrival time (ms), B: its fraction, in 1/Rate ms
//	TokenBucket           A: tokens missing in 1/Period units, B: last update (ms)
//	LeakyBucket           A: level in 1/Period units, B: last update (ms)
//	FixedWindow           A: window index (a calendar window: its end, ms), B: count
//	SlidingWindowCounter  A: window index, B: current count, C: previous count,
//	                      D: the time of the settle that wrote the state (ms; 0: a decision did)
//	SlidingWindowLog      Log
//
// A settle ([Prepared.Settle]) may leave a state owing more than the
// capacity (a debt): a TAT more than Burst × Period / Rate ahead, more
// than Burst tokens missing, a count above Rate.
//
// [Lockout] uses A to E.
type State struct {
	A, B, C, D, E int64
	Log           *Log
}

// Result is a [Decision] in integer milliseconds, as the algorithms compute
// it and as the Redis scripts return it.
type Result struct {
	Allowed    bool
	Quota      int64
	Remaining  int64
	ResetAfter int64 // ms
	RetryAfter int64 // ms
	Delay      int64 // ms
	// Debt is, for a settle ([Prepared.Settle]), how far the budget is
	// below zero after it: the units owed beyond the capacity, rounded
	// up. Decisions leave it 0.
	Debt int64
}

// Decision converts r to a Decision.
func (r Result) Decision() Decision {
	return Decision{
		Allowed:    r.Allowed,
		Quota:      r.Quota,
		Remaining:  r.Remaining,
		ResetAfter: Millis(r.ResetAfter),
		RetryAfter: Millis(r.RetryAfter),
		Delay:      Millis(r.Delay),
		Debt:       r.Debt,
	}
}

// Millis returns ms milliseconds as a Duration, or the longest Duration
// (about 292 years) if ms is longer: a limit's own durations are at most
// [MaxHorizon], but a clock that stepped back adds the step to them.
func Millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// CheckCost validates cost against the limit's capacity.
func (l Limit) CheckCost(cost int64) error { return checkCost(cost, l.Capacity()) }

func checkCost(cost, capacity int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	if cost > capacity {
		return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsBurst, cost, capacity)
	}
	return nil
}

// Prepared is a [Limit] already validated and converted to the integer
// units the algorithms work in, so that deciding many requests under one
// limit does not repeat that work. Get one from [Limit.Prepare]; the zero
// Prepared is not a valid limit and every decision with it fails with
// [ErrInvalidLimit].
type Prepared struct {
	p params
}

// Prepare validates l, as [Limit.Validate] does, and returns it ready for
// [Prepared.Decide].
func (l Limit) Prepare() (Prepared, error) {
	p, err := l.params()
	if err != nil {
		return Prepared{}, err
	}
	p.capU = p.cap * p.period
	p.owe = p.oweLimit()
	return Prepared{p: p}, nil
}

// Within returns pl for a request whose queue threshold is d (see
// [Request.Within]): on a shaping limit it admits a request only if its
// turn comes within d of now. A d of zero returns pl as it is. It fails
// with [ErrInvalidRequest] on a limit that does not shape and for a d
// that is negative, not a whole number of milliseconds, or longer than
// the limit's MaxDelay.
func (pl Prepared) Within(d time.Duration) (Prepared, error) {
	if d == 0 {
		return pl, nil
	}
	if err := checkWithin(pl.p.delay, d); err != nil {
		return pl, err
	}
	pl.p.within = d.Milliseconds()
	return pl, nil
}

// CheckWithin validates the request's queue threshold against its limit
// (see [Request.Within]).
func (r *Request) CheckWithin() error {
	if r.Within == 0 {
		return nil
	}
	delay := int64(0)
	if r.Limit.Algorithm == LeakyBucket {
		delay = r.Limit.MaxDelay.Milliseconds()
	}
	return checkWithin(delay, r.Within)
}

func checkWithin(delayMS int64, d time.Duration) error {
	switch {
	case delayMS <= 0:
		return fmt.Errorf("%w: a queue threshold (within %v) needs a shaping limit (leaky_bucket with max_delay)", ErrInvalidRequest, d)
	case d < 0 || d%time.Millisecond != 0:
		return fmt.Errorf("%w: a queue threshold must be a positive whole number of milliseconds, got %v", ErrInvalidRequest, d)
	case d.Milliseconds() > delayMS:
		return fmt.Errorf("%w: a queue threshold of %v is longer than the limit's max_delay %v", ErrInvalidRequest, d, time.Duration(delayMS)*time.Millisecond)
	}
	return nil
}

// For returns the prepared limit to decide req with: pl, or pl with
// req's queue threshold ([Prepared.Within]).
func (pl *Prepared) For(req *Request) (*Prepared, error) {
	if req.Within == 0 {
		return pl, nil
	}
	w, err := pl.Within(req.Within)
	if err != nil {
		return nil, err
	}
	return &w, nil
}

// Decide applies one request of the given cost at time nowMS (milliseconds
// since the Unix epoch) to state s. It updates s only when the request is
// allowed with a positive cost. It returns the result and ttl, the number of
// milliseconds after nowMS at which s becomes equivalent to the zero State
// and may be dropped (0: it already is).
//
// If nowMS is earlier than the state s (a clock stepped back), the request
// is decided as of the last update s records (TokenBucket, LeakyBucket,
// SlidingWindowLog, a SlidingWindowCounter a settle wrote), as of the
// earliest time s could have been written (GCRA, SlidingWindowCounter,
// which record none: for GCRA in debt, when the debt is paid back), or
// in the window s counts (FixedWindow). That is never looser than deciding at the last
// update, a cost of 0 is always allowed, and the durations in the result
// are still measured from nowMS.
func Decide(l Limit, s *State, nowMS, cost int64) (r Result, ttl int64, err error) {
	p, err := l.Prepare()
	if err != nil {
		return r, 0, err
	}
	return p.Decide(s, nowMS, cost)
}

// Decide is [Decide] under the prepared limit: the same results, state
// changes and errors, without validating the limit again.
func (pl *Prepared) Decide(s *State, nowMS, cost int64) (r Result, ttl int64, err error) {
	ttl, err = pl.DecideInto(&r, s, nowMS, cost)
	return r, ttl, err
}

// A Prepared from [Prepared.PushingBack] pushes the schedule back instead
// (see [PushBack]): it updates s whatever the cost, which it ignores.
//
// DecideInto is [Prepared.Decide] with the result written to *r, field by
// field, for callers on a hot path: a Result returned by value is copied
// on through memory, which stalls right after it was written.
func (pl *Prepared) DecideInto(r *Result, s *State, nowMS, cost int64) (ttl int64, err error) {
	p := &pl.p
	if p.n < 1 {
		*r = Result{}
		return 0, fmt.Errorf("%w: the limit was not prepared", ErrInvalidLimit)
	}
	if err := checkCost(cost, p.cap); err != nil {
		*r = Result{}
		return 0, err
	}
	if nowMS < 0 {
		*r = Result{}
		return 0, fmt.Errorf("deciding: time %d ms is before the Unix epoch", nowMS)
	}
	if p.push > 0 {
		*r, ttl = pushBack(*p, s, nowMS)
		return ttl, nil
	}
	if p.give != nil {
		*r, ttl = giveBack(*p, s, nowMS, cost)
		return ttl, nil
	}
	var eff int64
	switch p.alg {
	case GCRA:
		ok, remaining, reset, retry, eff := gcra(p, s, nowMS, cost)
		if off := eff - nowMS; off > 0 {
			if reset > 0 {
				reset += off
			}
			if !ok {
				retry += off
			}
		}
		r.Allowed, r.Quota, r.Remaining, r.ResetAfter, r.RetryAfter, r.Delay, r.Debt = ok, p.cap, remaining, reset, retry, 0, 0
		return reset, nil
	case TokenBucket, LeakyBucket:
		*r, eff = leakyBucket(*p, s, nowMS, cost)
		if p.place != nil && r.Allowed && cost > 0 && p.delay > 0 {
			*p.place = Place{Level: s.A, Last: s.B}
		}
	case FixedWindow:
		*r, eff = fixedWindow(*p, s, nowMS, cost)
	case SlidingWindowLog:
		*r, eff = slidingLog(*p, s, nowMS, cost)
	case SlidingWindowCounter:
		*r, eff = slidingCounter(*p, s, nowMS, cost)
	}
	// The algorithm decided at eff >= nowMS; report durations from nowMS.
	if off := eff - nowMS; off > 0 {
		if r.ResetAfter > 0 {
			r.ResetAfter += off
		}
		if !r.Allowed {
			r.RetryAfter += off
		}
	}
	return r.ResetAfter, nil
}

// ceilDiv returns ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// gcra keeps the theoretical arrival time TAT = A + B/n ms. Each unit of cost
// moves it by period/n ms; a request is allowed when the new TAT is at most
// cap×period/n ms ahead of now. Internally it works on the debt d = TAT-now
// in 1/n ms, which is at most cap×period.
func gcra(p *params, s *State, now, cost int64) (allowed bool, remaining, resetAfter, retryAfter, eff int64) {
	capU := p.capU
	// A TAT of A + B/n was written when the debt was at most capU: no
	// earlier than lo. A request timed before that (a clock that stepped
	// back) is decided as of lo, where the debt is still within capU.
	if lo := s.A - floorDiv(capU-s.B, p.n); now < lo {
		now = lo
	}
	var d int64
	if s.A > now || (s.A == now && s.B > 0) {
		d = (s.A-now)*p.n + s.B
	}
	nd := d + cost*p.period
	if nd <= capU {
		allowed = true
		q, rem := nd/p.n, nd%p.n
		if cost > 0 {
			s.A = now + q
			s.B = rem
		}
		d = nd
		if d >= 0 { // ⌈d/n⌉ from the division already done
			resetAfter = q
			if rem > 0 {
				resetAfter++
			}
		} else {
			resetAfter = ceilDiv(d, p.n)
		}
	} else {
		retryAfter = ceilDiv(nd-capU, p.n)
		resetAfter = ceilDiv(d, p.n)
	}
	remaining = max(0, (capU-d)/p.period)
	return allowed, remaining, resetAfter, retryAfter, now
}

// leakyBucket keeps the level in 1/period units (a request of cost 1 pours
// period units) and drains n units per millisecond. It is also the token
// bucket, whose level is the tokens missing from a full bucket: a key never
// seen (the zero State) is then full however long its refill takes, where
// counting the tokens themselves would start it empty at the Unix epoch. As a shaper it lets the
// level rise past the capacity by up to delay×n units (the queue); a
// request that ends above the capacity waits until it has drained back.
// A token bucket's level rises past the capacity only by a settle's debt.
//
// A shaper decides a request met before the state's last update (a clock
// behind another instance's, or a schedule pushed back, see [PushBack]) as
// of that update, where its turn is off = last - now further away: its
// Delay counts from now and includes off, and it is admitted only if
// that whole Delay is within its threshold (the request's Within, or
// MaxDelay). The stored level is clamped by MaxDelay alone.
func leakyBucket(p params, s *State, now, cost int64) (Result, int64) {
	capU := p.cap * p.period
	limU := capU + p.delay*p.n
	lvl, last := s.A, s.B
	if p.delay > 0 && now < last {
		return shaperBehind(p, s, now, cost)
	}
	if now < last {
		now = last
	}
	maxU := limU
	if p.alg == TokenBucket {
		maxU = p.owe // a settle's debt: more missing than the burst
	}
	if lvl > maxU {
		lvl = maxU
	}
	if el := now - last; el >= ceilDiv(lvl, p.n) {
		lvl = 0
	} else {
		lvl -= el * p.n
	}
	admitU := limU
	if p.within > 0 {
		admitU = capU + p.within*p.n
	}
	r := Result{Quota: p.cap}
	if need := cost * p.period; lvl+need <= admitU || cost == 0 {
		r.Allowed = true
		lvl += need
		if lvl > capU && p.delay > 0 {
			r.Delay = ceilDiv(lvl-capU, p.n)
		}
		if cost > 0 {
			s.A, s.B = lvl, now
		}
	} else {
		r.RetryAfter = ceilDiv(lvl+need-admitU, p.n)
	}
	r.Remaining = max(0, capU-lvl) / p.period
	r.ResetAfter = ceilDiv(lvl, p.n)
	return r, now
}

// shaperBehind is leakyBucket for a shaper met at now, before the state's
// last update: the level is as of last, off = last - now ms away, and
// every duration counts from now.
func shaperBehind(p params, s *State, now, cost int64) (Result, int64) {
	capU := p.cap * p.period
	limU := capU + p.delay*p.n
	lvl, last := min(s.A, limU), s.B
	off := last - now
	admitU := limU
	if p.within > 0 {
		admitU = capU + p.within*p.n
	}
	r := Result{Quota: p.cap}
	need := cost * p.period
	// The turn of the cost's last unit, in units from now: the level
	// above the capacity once the cost is added, plus the offset.
	turn := max(lvl+need, capU) - capU + off*p.n
	if turn <= admitU-capU || cost == 0 {
		r.Allowed = true
		lvl += need
		r.Delay = ceilDiv(max(lvl, capU)-capU, p.n) + off
		if cost > 0 {
			s.A = lvl
		}
	} else {
		r.RetryAfter = ceilDiv(turn-(admitU-capU), p.n)
	}
	r.Remaining = max(0, capU-lvl) / p.period
	if lvl > 0 {
		r.ResetAfter = ceilDiv(lvl, p.n) + off
	}
	return r, now
}

// fixedWindow counts cost per window [w×period, (w+1)×period), or per
// calendar day or month in the limit's zone. The state names its window by
// w, the window's index, or for a calendar window by its end (ms since the
// epoch): both grow with time, so a window older than the stored one is a
// clock that stepped back, and the request is then counted in the stored
// window, with durations measured to that window's end.
func fixedWindow(p params, s *State, now, cost int64) (Result, int64) {
	var w, end int64
	if p.cal != NoCalendar {
		b := calendarBounds(p.cal, p.zone, now)
		w, end = b[2], b[2]
		if w < s.A {
			w, end = s.A, s.A
		}
	} else {
		w = now / p.period
		if w < s.A {
			w = s.A
		}
		end = (w + 1) * p.period
	}
	count := int64(0)
	if s.A == w {
		count = s.B
	}
	r := Result{Quota: p.cap}
	if count+cost <= p.n || cost == 0 { // a count above n is a settle's debt
		r.Allowed = true
		count += cost
		if cost > 0 {
			s.A, s.B = w, count
		}
	} else {
		r.RetryAfter = end - now
	}
	r.Remaining = max(0, p.n-count)
	if count > 0 {
		r.ResetAfter = end - now
	}
	return r, now
}

// slidingCounter estimates usage over the last period as
// prev×(period-elapsed)/period + cur, computed in 1/period units.
func slidingCounter(p params, s *State, now, cost int64) (Result, int64) {
	w, start, now, cur, prev := slidingView(&p, s, now)
	e := now - start
	carried := prev * (p.period - e) // previous window's weight, in 1/period units
	capU := p.n * p.period
	r := Result{Quota: p.cap}
	if carried+(cur+cost)*p.period <= capU || cost == 0 { // above capU: a settle's debt
		r.Allowed = true
		cur += cost
		if cost > 0 {
			s.A, s.B, s.C, s.D = w, cur, prev, 0
		}
	} else if room := p.n - cur - cost; room >= 0 {
		// Allowed later in this window, once enough of prev has slid out:
		// the least e' with prev×(period-e') <= room×period.
		r.RetryAfter = start + p.period - (room*p.period)/prev - now
	} else {
		// Allowed in the next window, where cur becomes the previous count.
		e2 := p.period - ((p.n-cost)*p.period)/cur
		r.RetryAfter = start + p.period + e2 - now
	}
	r.Remaining = max(0, (capU-carried)/p.period-cur)
	switch {
	case cur > 0:
		r.ResetAfter = start + 2*p.period - now
	case prev > 0:
		r.ResetAfter = start + p.period - now
	}
	return r, now
}

// slidingView returns what a sliding counter with state s decides by at
// now: the window w and its start, the time it decides as of (now, or
// later for a clock that stepped back) and the counts of w and of the
// window before it.
func slidingView(p *params, s *State, now int64) (w, start, at, cur, prev int64) {
	w = now / p.period
	if w < s.A {
		w, now = s.A, s.A*p.period
	}
	switch s.A {
	case w:
		cur, prev = s.B, s.C
	case w - 1:
		prev = s.B
	}
	start = w * p.period
	switch {
	case s.A == w && s.D > 0:
		// A settle wrote the state at D, whatever its counts: a request
		// timed before that is decided then.
		now = max(now, s.D)
	case s.A == w && prev > 0 && cur <= p.n:
		// A decision wrote the state in this window when the counts
		// fitted the capacity: no earlier than start+emin, the first
		// moment prev×(period-e) + cur×period <= n×period. A request
		// timed before that (a clock that stepped back) is decided then.
		if emin := p.period - (p.n-cur)*p.period/prev; now < start+emin {
			now = start + emin
		}
	}
	return w, start, now, cur, prev
}

// Handle is a limit prepared once, when a policy is compiled or a
// limiter made, for every request that carries it: the name its state is
// stored under, the limit validated, its derived constants and the prefix
// of its keys. A store deciding a request that carries its handle (see
// [Request.Prepared]) neither validates nor prepares the limit again.
// A Handle is immutable and safe for concurrent use.
type Handle struct {
	name     string
	limit    Limit
	prepared Prepared
	prefix   []byte
}

// NewHandle validates l and returns its handle under name.
func NewHandle(name string, l Limit) (*Handle, error) {
	pl, err := l.Prepare()
	if err != nil {
		return nil, fmt.Errorf("preparing limit %q: %w", name, err)
	}
	return &Handle{name: name, limit: l, prepared: pl, prefix: AppendKeyPrefix(nil, l.Algorithm, name)}, nil
}

// Name returns the name the limit's state is stored under.
func (h *Handle) Name() string { return h.name }

// Limit returns the limit.
func (h *Handle) Limit() Limit { return h.limit }

// Prepared returns the limit, prepared.
func (h *Handle) Prepared() *Prepared { return &h.prepared }

// KeyPrefix returns [AppendKeyPrefix] of the limit's algorithm and name:
// what an in-process store's keys under this handle start with. The
// caller must not modify it.
func (h *Handle) KeyPrefix() []byte { return h.prefix }

// Request returns a request of subject, at cost, under the handle: its
// Name and Limit are the handle's, and it carries the handle.
func (h *Handle) Request(subject string, cost int64) Request {
	return Request{Name: h.name, Subject: subject, Limit: h.limit, Cost: cost, Handle: h}
}

// AppendKeyPrefix appends the start of a key of an in-process store: the
// algorithm, then the name, length-prefixed so that no two names share
// bytes.
func AppendKeyPrefix(b []byte, alg Algorithm, name string) []byte {
	b = append(b, byte(alg))
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

// Prepared returns r's handle if r carries one that still describes it
// (r's Name and Limit are the handle's: a caller that changed either
// after taking the request from the handle gets nil, and the store
// validates the request as one without a handle).
func (r *Request) Prepared() *Handle {
	h := r.Handle
	if h == nil || r.Name != h.name || !r.Limit.same(&h.limit) {
		return nil
	}
	return h
}

// same reports whether *l == *o, without a call.
func (l *Limit) same(o *Limit) bool {
	return l.Rate == o.Rate && l.Period == o.Period && l.Algorithm == o.Algorithm && l.Burst == o.Burst &&
		l.MaxDelay == o.MaxDelay && l.Calendar == o.Calendar && l.Zone == o.Zone
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
