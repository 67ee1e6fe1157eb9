package tollgate

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// ErrWouldExceedDeadline reports a [Limiter.Wait] that returned at once
// because the context's deadline comes before the earliest time the cost
// could be admitted.
var ErrWouldExceedDeadline = errors.New("would exceed context deadline")

// ErrCannotGiveBack reports a [Reservation.Cancel] of a reservation whose
// time to act has not come and whose place in the shaping queue is no
// longer the last one (others queued behind it): it stays spent.
var ErrCannotGiveBack = errors.New("the store cannot give back a charge")

// InfDuration is what [Reservation.Delay] returns for a reservation that
// was refused, as golang.org/x/time/rate's does.
const InfDuration = time.Duration(math.MaxInt64)

// Clock is the time [Limiter.Wait] and [Limiter.Reserve] read and sleep on;
// see [Limiter.WithClock]. Sleep returns nil after d, or ctx.Err() if ctx
// ends first.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitState is a Limiter's clock and its lines of waiters, one per
// subject with someone waiting.
type waitState struct {
	clock Clock // nil: real time, decisions on the store's clock
	mu    sync.Mutex
	lines map[string]*line
}

// A line is the waiters of one subject in the order they came; only its
// first, the head, asks the store.
type line struct {
	waiters list.List // of *waiter
	next    time.Time // when the head asks next (zero: now)
}

type waiter struct {
	turn chan struct{} // closed when the waiter becomes the head
	elem *list.Element
}

// WithClock returns a Limiter like l (the same store, limit and name,
// so the same state) whose Wait and Reserve read the time from c, decide
// at c.Now() as [Limiter.AllowAt] does, and sleep with c.Sleep. It exists
// for tests, which step a fake clock instead of sleeping; Allow keeps the
// store's clock. Without it, Wait and Reserve decide on the store's clock
// and sleep for real. The two Limiters share state but not their lines of
// waiters.
func (l *Limiter) WithClock(c Clock) *Limiter {
	return &Limiter{store: l.store, handle: l.handle, wait: waitState{clock: c}, reservationTTL: l.reservationTTL}
}

func (l *Limiter) clock() Clock {
	if l.wait.clock == nil {
		return realClock{}
	}
	return l.wait.clock
}

// takeAt is decideAt for a charge that may take a place in a shaping
// queue: on a shaping limit it also returns the place (see
// [Shaper.TakePlace]), the zero Place otherwise.
func (l *Limiter) takeAt(ctx context.Context, subject string, cost int64, now time.Time, o WaitOptions) (Decision, algo.Place, error) {
	if l.handle.Limit().MaxDelay <= 0 || cost == 0 {
		d, err := l.decideAt(ctx, subject, cost, now, o)
		return d, algo.Place{}, err
	}
	if l.wait.clock == nil {
		now = time.Time{}
	}
	req := l.handle.Request(subject, cost)
	req.Now = now
	req.Within = o.Within
	return l.store.TakePlace(ctx, req)
}

// giveBackTimeout bounds a give back made after the caller's context
// ended.
const giveBackTimeout = time.Second

// giveBack gives back the place at that cost took in subject's queue if it
// is still the last one, reporting whether it did.
func (l *Limiter) giveBack(ctx context.Context, subject string, cost int64, at algo.Place) (bool, error) {
	if at == (algo.Place{}) {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	req := l.handle.Request(subject, cost)
	if l.wait.clock != nil {
		req.Now = l.wait.clock.Now()
	}
	return l.store.GiveBack(ctx, req, at)
}

// WaitOptions configures one [Limiter.WaitWith] or [Limiter.ReserveWith].
// The zero value is the default, what [Limiter.Wait] and [Limiter.Reserve]
// use.
type WaitOptions struct {
	// Within is the request's queue threshold on a shaping limit (see
	// [Request.Within]): it takes a place only if its turn comes within
	// Within, so that a lower class of work (batch) stops queueing while
	// the backlog is long and a higher one (critical, with a longer or
	// zero Within) keeps its latency. Zero means the limit's MaxDelay;
	// longer than MaxDelay, or any Within on a limit that does not shape,
	// is an error.
	Within time.Duration
	// MaxWait, when positive, is the longest WaitWith may wait: it gives
	// up at once, charging nothing, with an error wrapping
	// [ErrWouldExceedDeadline], when the cost could not be admitted and
	// its turn come within MaxWait, as it does for a context's deadline
	// (the earlier of the two counts). It bounds the decision, not the
	// sleep: a place taken within MaxWait is slept for on the context
	// alone. Reserve ignores it.
	MaxWait time.Duration
	// Tolerance, when positive on a shaping limit, is how late after its
	// turn a wait may wake and still act. One that wakes later (its
	// process stalled: a GC pause, CPU throttling) would leave together
	// with every other turn missed meanwhile, a burst; it takes a new
	// place instead and waits again, as a new call would (its old turn is
	// spent, a gap in the schedule), up to 3 times. Zero: it acts however
	// late it wakes. Reserve ignores it.
	Tolerance time.Duration
}

// threshold returns the longest turn o admits on l's limit: its Within,
// or the limit's MaxDelay.
func (l *Limiter) threshold(o WaitOptions) time.Duration {
	if o.Within > 0 {
		return o.Within
	}
	return l.handle.Limit().MaxDelay
}

// checkOptions validates o against the limit.
func (l *Limiter) checkOptions(o WaitOptions) error {
	req := Request{Limit: l.handle.Limit(), Within: o.Within}
	return req.CheckWithin()
}

// decideAt asks the store for cost at now: on the store's clock without
// an injected clock, at now with one.
func (l *Limiter) decideAt(ctx context.Context, subject string, cost int64, now time.Time, o WaitOptions) (Decision, error) {
	if l.wait.clock == nil {
		now = time.Time{}
	}
	req := l.handle.Request(subject, cost)
	req.Now = now
	req.Within = o.Within
	return l.store.Allow(ctx, req)
}

// Wait blocks until subject may spend cost and charges it, as Allow would
// have once the budget had room; it is golang.org/x/time/rate's WaitN for a
// limit kept in a store.
//
// It returns at once, charging nothing, with an error wrapping
// [ErrCostExceedsBurst] if the cost is above the limit's capacity (it
// could never be admitted), and with [ErrWouldExceedDeadline] if the
// context's deadline comes before the earliest time the cost could be
// admitted: the refusal's RetryAfter from now (plus MaxDelay on a shaping
// limit, whose admitted requests then wait in its queue) or, behind other
// waiters, the time the first of them asks next. If the context ends while
// Wait is waiting for the budget, Wait returns ctx.Err() and has charged
// nothing. A cost of zero returns at once.
//
// Waiting is exact: Wait charges only through the store, at the time the
// store admits the cost, so waiters on every instance sharing the store
// never get more than the limit. It is fair within a Limiter: waiters of
// one subject line up in the order they called, and only the first asks
// the store, once now and then once at each RetryAfter (the earliest time
// the refused cost could be admitted), so waiting costs one store call per
// attempt and no polling. (Allow and Reserve do not wait, and do not line
// up.) Between instances the first waiters of each
// race for the budget as it comes back; each admission ends a wait, so
// every waiter gets through once the limit has admitted the costs ahead of
// it, but the order between instances is the store's, not the calls'.
//
// On a shaping limit (a [LeakyBucket] with MaxDelay) the store itself
// keeps the queue, for every instance at once: one call places the cost in
// it and returns the Delay until its turn, which Wait then sleeps. When the
// context's deadline is closer than MaxDelay, Wait first asks the store
// (cost 0, which charges nothing) how long the queue is, and returns
// ErrWouldExceedDeadline without charging if the cost's turn would come
// after it. The place is charged when it is taken ([Shaper.TakePlace]):
// should other callers lengthen the queue in between so that its turn
// comes after the deadline anyway, or the context end while Wait sleeps
// until its turn, Wait returns the error and gives the place back if it
// is still the last one in the queue ([Shaper.GiveBack]); one that others
// have queued behind stays spent. Only LeakyBucket shapes: the other
// algorithms have no queue and Wait waits as above.
func (l *Limiter) Wait(ctx context.Context, subject string, cost int64) error {
	return l.WaitWith(ctx, subject, cost, WaitOptions{})
}

// WaitWith is [Limiter.Wait] with options: on a shaping limit, o.Within
// bounds the turn the cost may take in the queue (its class's threshold),
// and Wait waits, as it does for a refusal, while the queue is longer
// than that; where Wait's deadline rules speak of MaxDelay, they then
// mean o.Within. o.MaxWait bounds the whole wait (see [WaitOptions]).
func (l *Limiter) WaitWith(ctx context.Context, subject string, cost int64, o WaitOptions) error {
	return l.waitFor(ctx, subject, cost, o, 0)
}

// maxRetakes is how many times a wait that wakes too late takes a new
// place (see WaitOptions.Tolerance) before it acts late all the same.
const maxRetakes = 3

// waitFor is WaitWith after retakes new places taken for turns missed.
func (l *Limiter) waitFor(ctx context.Context, subject string, cost int64, o WaitOptions, retakes int) error {
	if err := l.checkWait(cost, o); err != nil {
		return fmt.Errorf("waiting: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if cost == 0 {
		return nil
	}
	wc := l.newWaitCall(ctx, subject, cost, o, retakes)
	ln, w, err := l.join(subject, wc.c.Now(), wc.giveUp, wc.hasGiveUp, cost)
	if err != nil {
		return err
	}
	wc.ln, wc.w, wc.inLine = ln, w, true
	defer wc.leave()
	select {
	case <-w.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		retry, done, err := wc.attempt(ctx)
		if done {
			return err
		}
		if err := wc.c.Sleep(ctx, retry); err != nil {
			return err
		}
	}
}

// checkWait validates a wait for cost with o.
func (l *Limiter) checkWait(cost int64, o WaitOptions) error {
	if err := l.handle.Limit().CheckCost(cost); err != nil {
		return err
	}
	if err := l.checkOptions(o); err != nil {
		return err
	}
	if o.MaxWait < 0 || o.Tolerance < 0 {
		return fmt.Errorf("negative max wait %v or tolerance %v", o.MaxWait, o.Tolerance)
	}
	return nil
}

// A waitCall is one call of waitFor: what it waits for, the times it
// must act by, and its place in the subject's line.
type waitCall struct {
	l        *Limiter
	c        Clock
	subject  string
	cost     int64
	o        WaitOptions
	retakes  int
	shaping  bool
	within   time.Duration // the longest turn the store may give
	deadline time.Time     // the context's, if hasDeadline
	giveUp   time.Time     // the deadline or MaxWait's, if hasGiveUp

	hasDeadline, hasGiveUp bool

	ln     *line
	w      *waiter
	inLine bool
}

// newWaitCall returns the call waiting for cost of subject. MaxWait
// bounds the wait through the store's threshold (a place whose turn comes
// later is refused) and when a refusal says how long until admission; a
// place taken is slept for on ctx alone.
func (l *Limiter) newWaitCall(ctx context.Context, subject string, cost int64, o WaitOptions, retakes int) waitCall {
	wc := waitCall{l: l, c: l.clock(), subject: subject, cost: cost, retakes: retakes,
		shaping: l.handle.Limit().MaxDelay > 0}
	wc.deadline, wc.hasDeadline = ctx.Deadline()
	wc.giveUp, wc.hasGiveUp = wc.deadline, wc.hasDeadline
	if o.MaxWait > 0 {
		if by := wc.c.Now().Add(o.MaxWait); !wc.hasGiveUp || by.Before(wc.giveUp) {
			wc.giveUp, wc.hasGiveUp = by, true
		}
		if wc.shaping && o.MaxWait < l.threshold(o) {
			o.Within = max(o.MaxWait.Truncate(time.Millisecond), time.Millisecond)
		}
	}
	wc.o, wc.within = o, l.threshold(o)
	return wc
}

// tooLate reports whether waiting d from now passes the deadline.
func (wc *waitCall) tooLate(now time.Time, d time.Duration) bool {
	return wc.hasDeadline && wc.deadline.Sub(now) < d
}

// leave leaves the line, once: the next waiter becomes the head.
func (wc *waitCall) leave() {
	if wc.inLine {
		wc.inLine = false
		wc.l.leave(wc.subject, wc.ln, wc.w)
	}
}

// attempt asks the store for the cost once, as the head of the line. It
// reports done with the call's outcome, or how long until it asks again.
func (wc *waitCall) attempt(ctx context.Context) (retry time.Duration, done bool, err error) {
	now := wc.c.Now()
	if err := wc.checkQueue(ctx, now); err != nil {
		return 0, true, err
	}
	d, at, err := wc.l.takeAt(ctx, wc.subject, wc.cost, now, wc.o)
	if err != nil {
		return 0, true, fmt.Errorf("waiting: %w", err)
	}
	now = wc.c.Now()
	if d.Allowed {
		return 0, true, wc.waitTurn(ctx, d, at, now)
	}
	retry = max(d.RetryAfter, time.Millisecond)
	earliest := retry
	if wc.shaping {
		earliest += wc.within
	}
	if wc.hasGiveUp && wc.giveUp.Sub(now) < earliest {
		return 0, true, fmt.Errorf("waiting: cost %d: %w (admitted in %v at the earliest)", wc.cost, ErrWouldExceedDeadline, earliest)
	}
	wc.l.wait.mu.Lock()
	wc.ln.next = now.Add(retry)
	wc.l.wait.mu.Unlock()
	return retry, false, nil
}

// checkQueue refuses, on a shaping limit whose longest turn is past the
// deadline, a cost whose turn in the queue would come after it: it asks
// the store (cost 0, which charges nothing) how long the queue is.
func (wc *waitCall) checkQueue(ctx context.Context, now time.Time) error {
	if !wc.shaping || !wc.tooLate(now, wc.within) {
		return nil
	}
	q, err := wc.l.decideAt(ctx, wc.subject, 0, now, WaitOptions{})
	if err != nil {
		return fmt.Errorf("waiting: %w", err)
	}
	if most := shapedDelay(wc.l.handle.Limit(), q, wc.cost); wc.tooLate(wc.c.Now(), most) {
		return fmt.Errorf("waiting: cost %d: %w (its turn in the queue is %v away)", wc.cost, ErrWouldExceedDeadline, most)
	}
	return nil
}

// waitTurn sleeps, for a cost admitted with d at place at, until its
// turn in the store's queue, if it has one; it gives the place back if
// the turn comes after the deadline or the context ends first.
func (wc *waitCall) waitTurn(ctx context.Context, d Decision, at algo.Place, now time.Time) error {
	if d.Delay <= 0 {
		return nil
	}
	// Placed in the store's queue: the next waiter may queue behind it
	// while it waits for its turn.
	wc.leave()
	if wc.tooLate(now, d.Delay) {
		if ok, _ := wc.l.giveBack(ctx, wc.subject, wc.cost, at); ok {
			return fmt.Errorf("waiting: cost %d: %w (its turn in the queue, %v away, was given back)", wc.cost, ErrWouldExceedDeadline, d.Delay)
		}
		return fmt.Errorf("waiting: cost %d: %w (its turn in the queue, %v away, is charged and stays spent)", wc.cost, ErrWouldExceedDeadline, d.Delay)
	}
	turn := now.Add(d.Delay)
	if err := wc.c.Sleep(ctx, d.Delay); err != nil {
		wc.l.giveBack(ctx, wc.subject, wc.cost, at)
		return err
	}
	if o := wc.o; o.Tolerance > 0 && wc.retakes < maxRetakes && wc.c.Now().Sub(turn) > o.Tolerance {
		// Woken long after its turn (the process stalled): acting now
		// would leave with the other turns missed, together.
		return wc.l.waitFor(ctx, wc.subject, wc.cost, o, wc.retakes+1)
	}
	return nil
}

// PushBack postpones the schedule of subject on the Limiter's shaping
// limit by d, for every instance sharing the store: see [Shaper]. It
// decides on the Limiter's clock ([Limiter.WithClock]) or the store's.
func (l *Limiter) PushBack(ctx context.Context, subject string, d time.Duration) (Decision, error) {
	req := l.handle.Request(subject, 0)
	if l.wait.clock != nil {
		req.Now = l.wait.clock.Now()
	}
	dec, err := l.store.PushBack(ctx, req, d)
	if err != nil {
		return dec, fmt.Errorf("pushing back %q by %v: %w", subject, d, err)
	}
	return dec, nil
}

// shapedDelay returns the longest Delay a shaping limit would give cost
// now, from q, its answer to a query (cost 0): the level of its bucket is
// at most ResetAfter × Rate, and the Delay of cost is the time the level
// with cost added takes to drain to the capacity.
func shapedDelay(l Limit, q Decision, cost int64) time.Duration {
	n, p := l.Rate, l.Period.Milliseconds()
	ms := q.ResetAfter.Milliseconds() - (l.Capacity()-cost)*p/n
	return time.Duration(max(ms, 0)) * time.Millisecond
}

// join puts a waiter at the end of subject's line. It refuses one whose
// deadline comes before the head's next attempt, which it cannot precede.
func (l *Limiter) join(subject string, now, deadline time.Time, hasDeadline bool, cost int64) (*line, *waiter, error) {
	l.wait.mu.Lock()
	defer l.wait.mu.Unlock()
	ln := l.wait.lines[subject]
	if ln != nil && hasDeadline && deadline.Before(ln.next) {
		return nil, nil, fmt.Errorf("waiting: cost %d: %w (the waiters ahead are refused for %v)", cost, ErrWouldExceedDeadline, ln.next.Sub(now))
	}
	if ln == nil {
		if l.wait.lines == nil {
			l.wait.lines = make(map[string]*line)
		}
		ln = &line{}
		l.wait.lines[subject] = ln
	}
	w := &waiter{turn: make(chan struct{})}
	w.elem = ln.waiters.PushBack(w)
	if ln.waiters.Len() == 1 {
		close(w.turn)
	}
	return ln, w, nil
}

// leave takes w out of its line, handing the turn on if it was the head.
func (l *Limiter) leave(subject string, ln *line, w *waiter) {
	l.wait.mu.Lock()
	defer l.wait.mu.Unlock()
	head := ln.waiters.Front() == w.elem
	ln.waiters.Remove(w.elem)
	if !head {
		return
	}
	ln.next = time.Time{}
	if f := ln.waiters.Front(); f != nil {
		close(f.Value.(*waiter).turn)
	} else {
		delete(l.wait.lines, subject)
	}
}
