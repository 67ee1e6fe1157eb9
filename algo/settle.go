package algo

import (
	"errors"
	"fmt"
	"time"
)

// Settlement: a cost known only after the request was served (the
// tokens an LLM call used) is reserved at an estimate, with
// [Prepared.DecideInto] at cost = estimate, and settled at the actual
// cost when it is known, with [Prepared.Settle].

// ErrSettleExpired reports a settle that came after its reservation's
// TTL ([Settlement.TTL]): the estimate stands.
var ErrSettleExpired = errors.New("the reservation expired before it was settled: its estimate stands")

// ErrSettleUnsupported reports a settle under an algorithm that cannot
// carry one (see [Limit.CanSettle]). It is an [ErrInvalidRequest].
var ErrSettleUnsupported = fmt.Errorf("%w: the algorithm cannot settle a cost after the fact", ErrInvalidRequest)

// CanSettle reports whether the limit's algorithm can settle a
// reservation ([Prepared.Settle]): GCRA, TokenBucket, FixedWindow
// (calendar windows too) and SlidingWindowCounter can. A LeakyBucket
// cannot: its level past the burst is a shaper's queue, or nothing for a
// meter. Nor can a SlidingWindowLog, which keeps each charge at its time
// and at most Rate units: a refund of one entry or a debt past the rate
// has no place in it. A policy compiler refuses to settle under them.
func (l Limit) CanSettle() bool { return canSettle(l.Algorithm) }

func canSettle(a Algorithm) bool {
	return a == GCRA || a == TokenBucket || a == FixedWindow || a == SlidingWindowCounter
}

// maxOweUnits bounds what a state may owe after a settle, in the units the
// algorithm counts in (1/period of a unit for a bucket and for a sliding
// counter's weighted counts): twice maxUnits, so that a debt plus a cost
// plus a window's weight stays exact in a Lua double (< 2^53).
const maxOweUnits = 1 << 51

// oweLimit returns the most a settle lets the state owe (params.owe): for
// a bucket, the units missing from it, at most maxOweUnits and repaid
// within MaxHorizon, and the capacity plus a whole number of milliseconds
// of refill; for a fixed window, the count, at most maxOweUnits; for a
// sliding counter, the count, at most maxOweUnits/period.
func (p *params) oweLimit() int64 {
	switch p.alg {
	case GCRA, TokenBucket:
		lim := int64(maxOweUnits)
		if p.n <= maxOweUnits/maxHorizonMS {
			lim = min(lim, maxHorizonMS*p.n)
		}
		return p.capU + (lim-p.capU)/p.n*p.n
	case FixedWindow:
		return maxOweUnits
	case SlidingWindowCounter:
		return maxOweUnits / p.period
	}
	return 0
}

// Settle settles, at nowMS, a reservation made at reservedAtMS of
// estimate units (charged then by [Prepared.DecideInto] at cost =
// estimate), whose actual cost turned out to be actual. It updates s,
// fills *r with a query's result (cost 0) after the settle and the Debt
// it leaves, and returns ttl as DecideInto does. With δ = actual −
// estimate:
//
//   - δ = 0 changes nothing.
//   - δ < 0 is a refund: it gives back |δ|, but only what the
//     reservation still holds and never past a fresh key. A bucket
//     (GCRA, TokenBucket) gives back |δ| less what it has refilled since
//     the reservation, max(0, |δ| − Rate × (now − reservedAt) / Period),
//     and never below nothing missing (GCRA: a TAT never before now).
//     A fixed window (or calendar window) gives back from its count,
//     never below 0, only while the window holding reservedAt is the
//     current one; a sliding counter also gives back from the previous
//     window's count a reservation of the previous window. A refund of
//     an older reservation gives back nothing: it has aged out.
//   - δ > 0 is a debt: it charges δ now, unconditionally, past the burst
//     or the rate. A bucket's TAT moves δ × Period / Rate past
//     max(TAT, now) (TokenBucket: δ more tokens missing); a window adds
//     δ to the current window's count. A debt that leaves the bucket
//     owing more than its burst is rounded up to a whole millisecond of
//     refill.
//
// While a subject is in debt, a decision of cost c > 0 is refused, with
// the RetryAfter at which c fits again: for a bucket once the refill has
// paid the debt back and c more, for a fixed or calendar window at the
// window's end, which forgives what is left (each window answers for
// its own count: a debt settled in the next window is charged there),
// for a sliding counter once the weighted count leaves room for c,
// which a debt of the previous window delays into the next. A query
// (cost 0) is allowed, Remaining is 0, never negative.
//
// Debt is capped, not refused (the request was served): a settle leaves
// the state owing at most 2^51 units (a bucket: 1/Period tokens) and a
// bucket repaid within [MaxHorizon]; what is past the cap is dropped.
//
// The bound: the actual cost of the reservations admitted in a window
// (for a bucket, in any interval of length T) is at most the limit (for
// a bucket, Burst + Rate × T / Period) plus Σ max(0, actual − estimate)
// over those of them still unsettled at the last admission in it — zero
// when no estimate is below its actual. A bucket's refund decays with
// the refill for this: a reservation held longer than its refill would
// otherwise give back tokens the refill has already replaced, and let
// more than the burst through at once. A capped debt is outside the bound.
//
// Errors: ErrInvalidLimit for an unprepared limit, ErrSettleUnsupported
// for an algorithm that cannot settle, ErrNegativeCost for a negative
// estimate or actual, ErrCostExceedsBurst for an estimate above the
// capacity (no such reservation was admitted), ErrInvalidRequest for a
// time before the Unix epoch. On error s is unchanged.
//
// A settle is not idempotent: settling one reservation twice charges or
// refunds it twice. Telling a retried settle from a new one (by a
// reservation id) is the store's job.
func (pl *Prepared) Settle(r *Result, s *State, nowMS, reservedAtMS, estimate, actual int64) (ttl int64, err error) {
	if err := pl.checkSettle(nowMS, reservedAtMS, estimate, actual); err != nil {
		*r = Result{}
		return 0, err
	}
	p := &pl.p
	var debt int64
	switch p.alg {
	case GCRA:
		debt = settleGCRA(p, s, nowMS, reservedAtMS, estimate, actual)
	case TokenBucket:
		debt = settleTokenBucket(p, s, nowMS, reservedAtMS, estimate, actual)
	case FixedWindow:
		debt = settleFixedWindow(p, s, nowMS, reservedAtMS, estimate, actual)
	case SlidingWindowCounter:
		debt = settleSlidingCounter(p, s, nowMS, reservedAtMS, estimate, actual)
	}
	ttl, err = pl.DecideInto(r, s, nowMS, 0)
	r.Debt = debt
	return ttl, err
}

// checkSettle validates a settle's limit, costs and times.
func (pl *Prepared) checkSettle(nowMS, reservedAtMS, estimate, actual int64) error {
	p := &pl.p
	switch {
	case p.n < 1:
		return fmt.Errorf("%w: the limit was not prepared", ErrInvalidLimit)
	case !canSettle(p.alg):
		return fmt.Errorf("settling under %s: %w", p.alg, ErrSettleUnsupported)
	case actual < 0:
		return fmt.Errorf("%w: actual cost %d", ErrNegativeCost, actual)
	case nowMS < 0 || reservedAtMS < 0:
		return fmt.Errorf("%w: settling at %d ms a reservation of %d ms: a time before the Unix epoch", ErrInvalidRequest, nowMS, reservedAtMS)
	}
	if err := checkCost(estimate, p.cap); err != nil {
		return fmt.Errorf("settling an estimate: %w", err)
	}
	return nil
}

// settleBucket returns what a bucket owes (in 1/period units) after a
// settle, elapsed ms after its reservation, of a bucket owing d (at
// most p.owe).
func settleBucket(p *params, d, elapsed, estimate, actual int64) int64 {
	switch {
	case actual < estimate:
		give := (estimate - actual) * p.period
		if elapsed >= ceilDiv(give, p.n) {
			return d // the refill has replaced it already
		}
		give -= max(0, elapsed) * p.n
		return min(d, roundDebt(p, max(0, d-give)))
	case actual > estimate:
		if extra := actual - estimate; extra <= (p.owe-d)/p.period {
			return min(p.owe, roundDebt(p, d+extra*p.period))
		}
		return p.owe
	}
	return d
}

// roundDebt rounds up a bucket's debt (what d owes past the capacity) to
// a whole number of milliseconds of refill. GCRA, which records no time
// of update, decides a TAT more than the burst ahead as of when it could
// have been written, the first millisecond the debt is paid back: that
// millisecond must then leave no room for a cost, as TokenBucket, which
// decides at now, leaves none.
func roundDebt(p *params, d int64) int64 {
	if d > p.capU {
		return p.capU + ceilDiv(d-p.capU, p.n)*p.n
	}
	return d
}

// bucketDebt returns the units past the capacity, in whole units, of a
// bucket owing d.
func bucketDebt(p *params, d int64) int64 { return ceilDiv(max(0, d-p.capU), p.period) }

// settleGCRA settles on a TAT. A clock behind the state is met, as in a
// decision, as of the earliest time the state could have been written:
// when it owed at most p.owe.
func settleGCRA(p *params, s *State, now, reservedAt, estimate, actual int64) (debt int64) {
	if lo := s.A - floorDiv(p.owe-s.B, p.n); now < lo {
		now = lo
	}
	var d int64
	if s.A > now || (s.A == now && s.B > 0) {
		d = (s.A-now)*p.n + s.B
	}
	nd := settleBucket(p, d, now-reservedAt, estimate, actual)
	if nd != d {
		s.A, s.B = now+nd/p.n, nd%p.n
	}
	return bucketDebt(p, nd)
}

// settleTokenBucket settles on the tokens missing, as of the last update
// for a clock behind it.
func settleTokenBucket(p *params, s *State, now, reservedAt, estimate, actual int64) (debt int64) {
	lvl, last := min(s.A, p.owe), s.B
	now = max(now, last)
	if el := now - last; el >= ceilDiv(lvl, p.n) {
		lvl = 0
	} else {
		lvl -= el * p.n
	}
	nd := settleBucket(p, lvl, now-reservedAt, estimate, actual)
	if nd != lvl {
		s.A, s.B = nd, now
	}
	return bucketDebt(p, nd)
}

// settleFixedWindow settles on the count of the current window (the
// stored one, for a clock behind it), refunding only a reservation of
// that window.
func settleFixedWindow(p *params, s *State, now, reservedAt, estimate, actual int64) (debt int64) {
	var w, wr int64 // the current window and the reservation's, by index or end
	if p.cal != NoCalendar {
		b := calendarBounds(p.cal, p.zone, now)
		w = max(b[2], s.A)
		for i := range 3 {
			if b[i] <= reservedAt && reservedAt < b[i+1] {
				wr = b[i+1]
			}
		}
	} else {
		w, wr = max(now/p.period, s.A), reservedAt/p.period
	}
	count := int64(0)
	if s.A == w {
		count = s.B
	}
	nc := count
	switch {
	case actual < estimate && wr == w:
		nc -= min(count, estimate-actual)
	case actual > estimate:
		nc = addCapped(count, actual-estimate, p.owe)
	}
	if nc != count {
		s.A, s.B = w, nc
	}
	return max(0, nc-p.n)
}

// settleSlidingCounter settles on the counts of the current window and
// the one before it, refunding a reservation of either from its own
// count. It records the time it wrote the state in D: counts above the
// capacity do not tell it, as a decision's do.
func settleSlidingCounter(p *params, s *State, now, reservedAt, estimate, actual int64) (debt int64) {
	w, _, at, cur, prev := slidingView(p, s, now)
	wr := reservedAt / p.period
	nc, np := cur, prev
	switch {
	case actual < estimate && wr == w:
		nc -= min(cur, estimate-actual)
	case actual < estimate && wr == w-1:
		np -= min(prev, estimate-actual)
	case actual > estimate:
		nc = addCapped(cur, actual-estimate, p.owe)
	}
	if nc != cur || np != prev {
		s.A, s.B, s.C, s.D = w, nc, np, at
	}
	_, start, at, cur, prev := slidingView(p, s, now)
	used := prev*(p.period-(at-start)) + cur*p.period
	return ceilDiv(max(0, used-p.n*p.period), p.period)
}

// addCapped returns a + b, at most lim, for a, b >= 0.
func addCapped(a, b, lim int64) int64 {
	if b > lim-a {
		return max(a, lim)
	}
	return a + b
}

// A Settlement settles, in a store, one reservation: the requests of one
// group that AllowAll admitted at an estimate of a cost known only after
// they were served, each with its actual cost. A store applies it
// atomically, once per ID: a retried settle of the same reservation
// changes nothing.
type Settlement struct {
	// ID names the reservation, 1 to 128 bytes, unique among the
	// reservations of its group (a random id is).
	ID string
	// Age is how long ago the reservation was made, measured by the
	// caller from before it sent the AllowAll (so never short): the store
	// settles as of its own clock less Age. A refund decays with it.
	Age time.Duration
	// TTL bounds the reservation's life, 1ms to [MaxSettleTTL]: a settle
	// older than TTL is not applied (the estimate stands, [SettleExpired]),
	// and the store remembers a settled ID until then.
	TTL time.Duration
	// Items are the reservation's requests, as AllowAll admitted them
	// (Cost the estimate; Now the settle's time, the zero Time for the
	// store's clock), with their actual costs. Requests whose cost is
	// known up front (one request per request) need no item.
	Items []SettleItem
}

// MaxSettleTTL bounds [Settlement.TTL]: a day, the longest an LLM
// provider's batch API takes to answer.
const MaxSettleTTL = 24 * time.Hour

// SettleItem is one limit of a [Settlement].
type SettleItem struct {
	Request Request // Cost: the estimate charged
	Actual  int64   // the cost it turned out to have
}

// SettleOutcome is what a store did with a [Settlement].
type SettleOutcome uint8

const (
	// SettleApplied: the settlement was applied.
	SettleApplied SettleOutcome = iota
	// SettleRepeated: its ID was settled already; nothing changed.
	SettleRepeated
	// SettleExpired: it came after its TTL; the estimate stands.
	SettleExpired
)

func (o SettleOutcome) String() string {
	switch o {
	case SettleApplied:
		return "applied"
	case SettleRepeated:
		return "repeated"
	case SettleExpired:
		return "expired"
	}
	return fmt.Sprintf("SettleOutcome(%d)", uint8(o))
}

// Settled is a store's answer to a [Settlement].
type Settled struct {
	Outcome SettleOutcome
	// Decisions are the items' limits after it, in order: each a query
	// (cost 0), with its Debt.
	Decisions []Decision
}

// Check validates a settlement: its ID and TTL, and its items as a group
// AllowAll could have admitted (see [CheckGroup]), each under an
// algorithm that can settle ([Limit.CanSettle]) with an actual cost of
// at least 0. An error about one item is an [ItemError].
func (s *Settlement) Check() error {
	switch {
	case s.ID == "" || len(s.ID) > 128:
		return fmt.Errorf("%w: the reservation id must be 1 to 128 bytes", ErrInvalidRequest)
	case s.TTL < time.Millisecond || s.TTL > MaxSettleTTL:
		return fmt.Errorf("%w: the reservation TTL must be 1ms to %v", ErrInvalidRequest, MaxSettleTTL)
	case s.Age < 0:
		return fmt.Errorf("%w: the reservation's age %v is negative", ErrInvalidRequest, s.Age)
	}
	reqs := make([]Request, len(s.Items))
	for i := range s.Items {
		reqs[i] = s.Items[i].Request
	}
	if err := CheckGroup(reqs); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	for i := range s.Items {
		it := &s.Items[i]
		switch {
		case !it.Request.Limit.CanSettle():
			return fmt.Errorf("settling: %w", &ItemError{i, fmt.Errorf("under %s: %w", it.Request.Limit.Algorithm, ErrSettleUnsupported)})
		case it.Actual < 0:
			return fmt.Errorf("settling: %w", &ItemError{i, fmt.Errorf("%w: actual cost %d", ErrNegativeCost, it.Actual)})
		}
	}
	return nil
}

// Expired reports whether the settlement comes after its TTL.
func (s *Settlement) Expired() bool { return s.Age >= s.TTL }
