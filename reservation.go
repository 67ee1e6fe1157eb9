package tollgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// Reservation is the answer to [Limiter.Reserve]: whether the cost was
// admitted, and when to act on it.
type Reservation struct {
	decision Decision
	clock    Clock
	act      time.Time // when the holder may act
	start    time.Time // the clock's time before the store was asked: a settle's age counts from it
	limiter  *Limiter
	subject  string
	cost     int64
	mu       sync.Mutex // guards place, id and settled: Cancel and Settle may be called at once from several goroutines
	place    algo.Place // the place taken in a shaping queue, if any
	id       string     // the reservation's id in the store, once a settle was tried
	settled  bool
}

// Reserve asks the store for cost now and charges it if admitted, as
// Allow does, without waiting; it is golang.org/x/time/rate's ReserveN for a
// limit kept in a store. The cost must be at most the limit's capacity
// ([ErrCostExceedsBurst] otherwise).
//
// On a shaping limit (a [LeakyBucket] with MaxDelay) an admitted
// reservation may lie in the future: the store has placed the cost in its
// queue, shared by every instance, and Delay says how long until its turn.
// On every other limit an admitted reservation is for now (Delay is zero):
// no other algorithm can charge a future time. Where x/time/rate would
// reserve further ahead than the limit allows, Reserve is refused: OK is
// false, nothing is charged, and RetryAfter says when the same cost would
// be admitted.
//
// What [Reservation.Cancel] gives back, on both stores: a place in a
// shaping queue still ahead, if it is still the last one in the queue
// (nothing was charged after it), and then returns nil, the queue as if
// the reservation had never been made; a place others have queued behind
// stays spent, and Cancel says so with [ErrCannotGiveBack]. A refused
// reservation, and one whose time to act has come (every reservation on
// a limit that does not shape), has nothing to give back, as with
// x/time/rate, and Cancel returns nil. To decide whether to act before
// anything is charged, use Allow's refusal (RetryAfter) instead, or a
// store's holds ([Reserver]) to hold a cost while an outcome is pending.
//
// A cost known only once the work is done (the tokens an LLM call used)
// is reserved at an estimate and settled at the actual cost with
// [Reservation.Settle], on a limit that can settle ([Limit.CanSettle]).
func (l *Limiter) Reserve(ctx context.Context, subject string, cost int64) (*Reservation, error) {
	return l.ReserveWith(ctx, subject, cost, WaitOptions{})
}

// ReserveWith is [Limiter.Reserve] with options: on a shaping limit, a
// reservation whose turn would come later than o.Within is refused (see
// [WaitOptions]).
func (l *Limiter) ReserveWith(ctx context.Context, subject string, cost int64, o WaitOptions) (*Reservation, error) {
	if err := l.handle.Limit().CheckCost(cost); err != nil {
		return nil, fmt.Errorf("reserving: %w", err)
	}
	if err := l.checkOptions(o); err != nil {
		return nil, fmt.Errorf("reserving: %w", err)
	}
	c := l.clock()
	start := c.Now()
	d, at, err := l.takeAt(ctx, subject, cost, start, o)
	if err != nil {
		return nil, fmt.Errorf("reserving: %w", err)
	}
	// Delay counts from the store's answer, which this side sees no
	// earlier than the store gave it.
	return &Reservation{decision: d, clock: c, act: c.Now().Add(d.Delay), start: start, limiter: l, subject: subject, cost: cost, place: at}, nil
}

// OK reports whether the cost was admitted (and charged).
func (r *Reservation) OK() bool { return r.decision.Allowed }

// Decision returns the store's decision.
func (r *Reservation) Decision() Decision { return r.decision }

// RetryAfter returns, for a refused reservation, the time from the
// reservation until the same cost would be admitted; zero if admitted.
func (r *Reservation) RetryAfter() time.Duration { return r.decision.RetryAfter }

// Delay is DelayFrom at the limiter's clock's now.
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(r.clock.Now()) }

// DelayFrom returns how long after t the holder must wait before acting:
// zero to act at once, [InfDuration] for a refused reservation.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.OK() {
		return InfDuration
	}
	return max(r.act.Sub(t), 0)
}

// Cancel is CancelAt at the limiter's clock's now.
func (r *Reservation) Cancel() error { return r.CancelAt(r.clock.Now()) }

// CancelAt says that the holder will not act on the reservation at t, and
// gives back what can be given back: see [Limiter.Reserve]. It returns nil
// when there is nothing to give back (a refused reservation, or one whose
// time to act has come by t) or the place was given back, and
// [ErrCannotGiveBack] for a place in a shaping queue still ahead of t
// that others have queued behind, which stays spent.
func (r *Reservation) CancelAt(t time.Time) error {
	if !r.OK() || !t.Before(r.act) {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ok, err := r.limiter.giveBack(context.Background(), r.subject, r.cost, r.place)
	if err != nil {
		return fmt.Errorf("canceling a reservation %v ahead: giving its place back: %w", r.act.Sub(t), err)
	}
	if ok {
		r.place = algo.Place{}
		return nil
	}
	return fmt.Errorf("canceling a reservation %v ahead: %w: others have queued behind its place, which stays spent", r.act.Sub(t), ErrCannotGiveBack)
}

// DefaultReservationTTL is how long a [Reservation] can be settled when
// the Limiter's Options set no ReservationTTL.
const DefaultReservationTTL = 15 * time.Minute

// ErrSettled reports a Settle of a [Reservation] settled already.
var ErrSettled = errors.New("the reservation was settled already")

// Settle settles an admitted reservation at its actual cost, at the
// limiter's clock's now (the store's clock without one): it gives back
// what the estimate (the reserved cost) overstated, within what the
// reservation still holds (a bucket's refund shrinks as it refills since
// the reservation), and charges what it understated as debt, past the
// limit, which the subject's later requests wait for. It returns the
// limit's state after it, with its Debt.
//
// A reservation settles once: a Settle that failed in the store may be
// tried again (the store applies one settle per reservation, whichever
// of the tries reached it), one that succeeded may not ([ErrSettled]).
// A settle after the Limiter's ReservationTTL leaves the estimate
// charged and fails with [algo.ErrSettleExpired]. Settling a refused
// reservation, or one under a limit that cannot settle, is an
// [algo.ErrInvalidRequest].
func (r *Reservation) Settle(ctx context.Context, actual int64) (Decision, error) {
	if !r.OK() {
		return Decision{}, fmt.Errorf("settling: %w: the reservation was refused, and charged nothing", algo.ErrInvalidRequest)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return Decision{}, ErrSettled
	}
	if r.id == "" {
		r.id = newReservationID()
	}
	l := r.limiter
	req := l.handle.Request(r.subject, r.cost)
	var age time.Duration
	if l.wait.clock != nil {
		req.Now = l.wait.clock.Now()
		age = req.Now.Sub(r.start)
	} else {
		age = time.Since(r.start)
	}
	out, err := l.store.SettleAll(ctx, algo.Settlement{ID: r.id, Age: max(0, age), TTL: l.reservationTTL,
		Items: []algo.SettleItem{{Request: req, Actual: actual}}})
	if err != nil {
		return Decision{}, fmt.Errorf("settling: %w", err)
	}
	r.settled = true
	if out.Outcome == algo.SettleExpired {
		return out.Decisions[0], fmt.Errorf("settling a reservation %v old: %w", age, algo.ErrSettleExpired)
	}
	return out.Decisions[0], nil
}

// newReservationID returns a random id, unique across the processes
// sharing a store.
func newReservationID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
