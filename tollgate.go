// Package tollgate is a rate limiter: it decides whether a subject (an API
// key, a user, a client IP) may spend a request's cost under a [Limit], and
// answers with a [Decision].
//
// A [Limiter] asks a [Store] for every decision. The store keeps the state:
// the in-memory store (package store/memory) is the embedded default; the
// Redis store (package store/redis) shares one budget between many
// instances. Both run the same algorithms (package algo) and reach the same
// decisions, which the shared test vectors under testdata/vectors prove.
package tollgate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// Algorithm selects how a Limit is enforced; see [algo.Algorithm].
type Algorithm = algo.Algorithm

// The algorithms. The zero value of [Algorithm] is [GCRA].
const (
	GCRA                 = algo.GCRA
	TokenBucket          = algo.TokenBucket
	LeakyBucket          = algo.LeakyBucket
	FixedWindow          = algo.FixedWindow
	SlidingWindowLog     = algo.SlidingWindowLog
	SlidingWindowCounter = algo.SlidingWindowCounter
)

// Limit is a rate limit: Rate units per Period, enforced by an Algorithm,
// with an optional Burst for bucket algorithms; see [algo.Limit].
type Limit = algo.Limit

// Decision is the answer to one request; see [algo.Decision].
type Decision = algo.Decision

// Request is one question put to a [Store]; see [algo.Request].
type Request = algo.Request

// ErrUnavailable wraps every error that means a store could not decide
// (a timeout, a lost connection, an open circuit breaker), as opposed to a
// request the store refuses because it is invalid. Callers choose between
// failing open and failing closed on it.
var ErrUnavailable = errors.New("rate-limit store unavailable")

// Errors for invalid input. A refusal is a Decision, never an error.
var (
	ErrInvalidLimit     = algo.ErrInvalidLimit
	ErrCostExceedsBurst = algo.ErrCostExceedsBurst
	ErrNegativeCost     = algo.ErrNegativeCost
)

// PerSecond returns a GCRA limit of n per second with a burst of n.
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a GCRA limit of n per minute with a burst of n.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a GCRA limit of n per hour with a burst of n.
func PerHour(n int64) Limit { return Limit{Rate: n, Period: time.Hour} }

// PerDay returns a GCRA limit of n per 24 hours with a burst of n.
func PerDay(n int64) Limit { return Limit{Rate: n, Period: 24 * time.Hour} }

// Store keeps rate-limit state and makes decisions atomically: two
// concurrent requests never spend the same budget. It is one contract,
// implemented whole by both of Tollgate's stores (and by package
// resilience in front of them) and required whole by the conformance
// suite in package storetest: rate decisions one at a time and in
// all-or-nothing groups, held places, pushed-back schedules,
// login-guard state, concurrency leases and a health check.
//
// Its methods return an error only when the request is invalid (see
// [ErrCostExceedsBurst]) or the store cannot answer (wrapping
// [ErrUnavailable] where the store knows it); a refusal is a Decision
// with Allowed false.
type Store interface {
	// Allow decides one request, and charges it if it is allowed.
	Allow(ctx context.Context, req Request) (Decision, error)
	// AllowAll decides several requests of one group (see
	// [algo.Request.Tag]) atomically: either every request is charged or
	// none is. It returns one Decision per request, in order; they were
	// charged if and only if every Decision is Allowed. When they were
	// not, a limit that would have admitted its request reports Allowed
	// true and its state as it is (nothing was spent), and the refusing
	// limits report their RetryAfter as usual. An error about one request
	// of the group is an [ItemError] naming it.
	AllowAll(ctx context.Context, reqs []Request) ([]Decision, error)
	// Reset forgets the rate-limit state of each request's key (its
	// Name, Tag, Subject and algorithm; Limit, Cost and Now are ignored),
	// places held on it included, as if it had never been seen: the next
	// request finds the limit whole. It is for operators (an admin
	// resetting a customer's budgets), not atomic across requests, and
	// resetting a key never seen does nothing.
	Reset(ctx context.Context, reqs []Request) error
	Reserver
	Settler
	Shaper
	Guard
	Leaser
	Health
	// Close releases what the store holds. Calls after Close may fail.
	Close() error
}

// LimiterStore is what a [Limiter] asks of its store: decisions, the
// shaping queue that Wait takes places in, and settles of reservations
// (Reserve). Every [Store] is one.
type LimiterStore interface {
	Allow(ctx context.Context, req Request) (Decision, error)
	Shaper
	Settler
}

// ItemError is the error of one request of a group; see [algo.ItemError].
type ItemError = algo.ItemError

// Shaper is what a shaping limit (a [LeakyBucket] with MaxDelay) needs
// beyond decisions, for every instance sharing the store: postponing its
// schedule (what a caller does when the API it calls answers 429 with a
// Retry-After), and taking a place in its queue that can be given back
// while it is the last one (a caller that will not use it).
type Shaper interface {
	// PushBack postpones the schedule of req's key by d from now (req.Now,
	// or the store's clock): nothing admitted afterwards has its turn
	// before then, and turns then follow at the limit's rate, with no
	// burst. It never brings a turn forward (a longer queue or push back
	// stands), and places already taken keep their turns. A push back
	// longer than MaxDelay is kept whole: requests are refused, with
	// RetryAfter, until what is left of it fits in MaxDelay (or their
	// Within). It charges nothing and reports a query (cost 0) of the
	// postponed schedule: Delay is the wait of a turn taken now. req's
	// Cost and Within are ignored; a limit that does not shape, or a d
	// that is not positive, is an error ([algo.ErrInvalidRequest]). See
	// [algo.PushBack].
	PushBack(ctx context.Context, req Request, d time.Duration) (Decision, error)
	// TakePlace decides req as Allow does and, when it charges a shaping
	// limit, also returns the place the charge took in its queue (the
	// zero Place otherwise), for GiveBack. It is an error on a limit that
	// does not shape.
	TakePlace(ctx context.Context, req Request) (Decision, algo.Place, error)
	// GiveBack gives back the place p, taken by TakePlace with req (its
	// cost), if it is still the last one in the queue (nothing was
	// charged since), and reports whether it did: the queue is then as if
	// the place had never been taken. A place others have queued behind
	// stays spent.
	GiveBack(ctx context.Context, req Request, p algo.Place) (bool, error)
}

// Health is what a readiness probe asks of a store.
type Health interface {
	// Ping reports whether the store can answer now.
	Ping(ctx context.Context) error
}

// Guard keeps login-guard state: per-account failure counts and growing
// locks (see [algo.Lockout]).
type Guard interface {
	Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error)
}

// Hold is an attempt whose outcome is not known yet; see [algo.Hold].
type Hold = algo.Hold

// Reserver holds a request's cost while the outcome that decides whether
// to charge it is not known (a login whose password is being checked), so
// that requests made at once get no further than requests made one at a
// time.
type Reserver interface {
	// Reserve admits the request only if its limit could take the cost of
	// every request held under its key and this one, and then holds it
	// until it is settled or h.TTL passes. It charges nothing: Remaining
	// counts what is left once every held request is charged.
	Reserve(ctx context.Context, req Request, h Hold) (Decision, error)
	// Settle ends the hold h (a no-op if it has expired) and, with charge,
	// charges the request as Allow would, reporting that decision;
	// without, it reports the limit's state.
	Settle(ctx context.Context, req Request, h Hold, charge bool) (Decision, error)
}

// Settler settles reservations: requests that AllowAll admitted at an
// estimate of a cost known only once they were served (the tokens an LLM
// call used), charged their actual cost afterwards. See [algo.Settlement]
// and, for what a settle does to each limit, [algo.Prepared.Settle].
type Settler interface {
	// SettleAll applies s atomically and once per s.ID: it gives back
	// what each estimate overstated, within what the reservation still
	// holds, and charges what it understated as debt, past the limit,
	// which later requests of the subject wait for. A settle of an ID
	// already settled, or past s.TTL, changes nothing (its Outcome says
	// which); a reservation never settled keeps its estimate. An error
	// about one item is an [ItemError].
	SettleAll(ctx context.Context, s algo.Settlement) (algo.Settled, error)
}

// Leaser hands out concurrency slots as leases with a TTL.
//
// The caller names each lease (req.ID, unique among the leases of one
// policy and subject), so that it can give back a lease it does not know
// it holds: an Acquire that failed with an error (a deadline, a lost
// connection) may have taken its slot, or may take it later, when the
// store runs a call its caller stopped waiting for. Releasing the ID then
// frees the slot whichever reaches the store first: a release that finds
// no lease remembers the ID as released for req.TTL, and an Acquire of a
// released ID takes nothing. Release is idempotent.
type Leaser interface {
	// Acquire takes a slot if fewer than req.Limit are held and req.ID
	// has not been released, reporting whether it did.
	Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error)
	// Release returns the slot req.ID holds, or, if it holds none (yet),
	// keeps it from taking one for req.TTL.
	Release(ctx context.Context, req algo.LeaseRequest) error
}

// Admitted reports whether a group of decisions from AllowAll admitted the
// requests.
func Admitted(ds []Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return len(ds) > 0
}

// Options configures a [Limiter]. The zero value is the default.
type Options struct {
	// Name names the limit in the store. Limiters sharing a store must use
	// different names for different limits. The default is the limit's
	// [LimitName], e.g. "gcra_100_60000ms_100": limiters of one store with
	// default names share state exactly when their limits enforce alike.
	Name string
	// ReservationTTL is how long after [Limiter.Reserve] a reservation can
	// be settled ([Reservation.Settle]); a later settle leaves the
	// estimate charged. The store remembers each settled reservation this
	// long. Zero means DefaultReservationTTL; at most algo.MaxSettleTTL.
	ReservationTTL time.Duration
}

// LimitName returns a name for what a valid limit enforces: its
// algorithm, rate, period and capacity, as in "gcra_100_60000ms_100", then
// "_delay2000ms" for a shaping limit's MaxDelay, and "_day_Europe/Paris" or
// "_month_UTC" for calendar windows and their zone's name. Limits that
// differ in anything they enforce have different names, and spellings of
// one limit have one name: a Burst of zero and a Burst equal to the Rate,
// a nil Zone and UTC, a Zone without a Calendar and none.
func LimitName(l Limit) string {
	name := fmt.Sprintf("%s_%d_%dms_%d", l.Algorithm, l.Rate, l.Period.Milliseconds(), l.Capacity())
	if l.MaxDelay != 0 {
		name += fmt.Sprintf("_delay%dms", l.MaxDelay.Milliseconds())
	}
	if l.Calendar != algo.NoCalendar {
		zone := "UTC"
		if l.Zone != nil {
			zone = l.Zone.String()
		}
		name += "_" + l.Calendar.String() + "_" + zone
	}
	return name
}

// Limiter applies one Limit to many subjects through a Store. It is safe for
// concurrent use.
type Limiter struct {
	store  LimiterStore
	handle *algo.Handle
	wait   waitState // Wait's clock and waiting lines (wait.go)
	// reservationTTL bounds a reservation's settle (Options.ReservationTTL).
	reservationTTL time.Duration
}

// NewLimiter returns a Limiter enforcing limit through store. It fails if
// the limit is invalid.
func NewLimiter(store LimiterStore, limit Limit, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("creating limiter: nil store")
	}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("creating limiter: %w", err)
	}
	policy := opts.Name
	if policy == "" {
		policy = LimitName(limit)
	}
	h, err := algo.NewHandle(policy, limit)
	if err != nil {
		return nil, fmt.Errorf("creating limiter: %w", err)
	}
	ttl := opts.ReservationTTL
	switch {
	case ttl == 0:
		ttl = DefaultReservationTTL
	case ttl < time.Millisecond || ttl > algo.MaxSettleTTL:
		return nil, fmt.Errorf("creating limiter: %w: a reservation TTL of %v is not within 1ms to %v", algo.ErrInvalidRequest, ttl, algo.MaxSettleTTL)
	}
	return &Limiter{store: store, handle: h, reservationTTL: ttl}, nil
}

// Limit returns the limit the Limiter enforces.
func (l *Limiter) Limit() Limit { return l.handle.Limit() }

// Name returns the name under which the Limiter stores its state.
func (l *Limiter) Name() string { return l.handle.Name() }

// Allow decides whether subject may spend cost now, by the store's clock,
// and charges it if so. A cost of zero reports the state without spending.
func (l *Limiter) Allow(ctx context.Context, subject string, cost int64) (Decision, error) {
	return l.AllowAt(ctx, subject, cost, time.Time{})
}

// AllowAt is like Allow but decides at the given time instead of the
// store's clock; the zero Time means the store's clock. It exists for tests
// that walk fixed instants.
func (l *Limiter) AllowAt(ctx context.Context, subject string, cost int64, now time.Time) (Decision, error) {
	req := l.handle.Request(subject, cost)
	req.Now = now
	return l.store.Allow(ctx, req)
}
