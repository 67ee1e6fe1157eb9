// Package resilience keeps rate limiting working when the shared store
// does not. It wraps a [tollgate.Store] (Redis) with:
//
//   - a deadline on every call (default 20ms), so a slow Redis costs a
//     request at most that much;
//   - a circuit breaker (github.com/sony/gobreaker/v2): after consecutive
//     failures it opens and calls fail at once, without waiting on Redis; it
//     lets a probe through after a pause and closes when Redis answers;
//   - a local fallback ([Store.Fallback]) that decides with this instance's
//     share of each limit (limit / Options.Instances) in memory, for
//     fail-open policies while the store is unavailable;
//   - leases given back once the store answers again: an Acquire that
//     fails with its outcome unknown (a deadline, a lost connection: Redis
//     may run it later) and a Release that fails are retried as releases
//     in the background (see [Store.Acquire]), so no slot stays taken for
//     its TTL because Redis was slow for a moment.
//
// Whether a failed decision falls back or refuses is the caller's choice
// (package engine's, per route): Allow reports unavailability as an error
// wrapping [ErrUnavailable]. (The deny cache, which answers refusals again
// without a store call, is the engine's too.)
//
// # What the fallback admits
//
// The store wrapper remembers, for each key (name, algorithm, tag,
// subject), the store's last decision: what remained and when the whole
// capacity is back. The fallback starts a key from it rather than from a
// full budget: with R of capacity C remaining until T, an instance's
// fallback holds ⌊R × s / C⌋ of its share s (s = C / Options.Instances,
// at least 1), spent as of that decision, so that the rest comes back when
// it would have in the store; after T, its whole share.
//
// What the fallback admits, the store does not know. The key's next
// request to the store carries it on top of its own cost (up to the
// capacity), all or nothing, and the key's other requests wait for that
// one: admitted, the debt is paid; refused, it stays, until what it
// stands for would have left the limit. A query (cost 0) reports
// Remaining less the debt.
//
// Calendar quotas (fixed windows by day or month: "1,000 a day") fail
// closed in the fallback by default ([CalendarClosed]): Fallback returns
// an error wrapping [ErrUnavailable]. With [CalendarShare] they get the
// instance's share of what remained, as above, and fail closed only for
// a key the store has not decided for since this instance started.
//
// In one window of a limit that alone admits A there (C for the window
// algorithms), across an outage, a subject gets at most
//
//	A + Σ_i L_i + k
//
// where L_i is what instance i admitted locally and never charged to the
// store (the debt of an instance whose next store request was refused,
// or that expired first), and k is what was in flight when the store
// failed or came back (answers that arrive out of order leave the last
// decision remembered a little behind). With one instance L_1 is 0: a
// debt is refused only when the limit had no room for it. With N
// instances, L_i is at most ⌊R_i × s / C⌋ in the window where the outage
// begins (R_i: the remaining instance i last saw) and s in each later
// window, so the total is at most A + N × s + k, about 2A.
// Calendar quotas that fail closed get A. A key this instance does not
// remember (it restarted, or the key was evicted from the bounded memory,
// Options.RememberSize) starts from a full share: up to s more.
package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/logsample"
)

// ErrUnavailable wraps every error that means the store could not decide
// (timeout, connection failure, open breaker). Invalid requests are
// reported as themselves, never as ErrUnavailable.
var ErrUnavailable = tollgate.ErrUnavailable

// Defaults for [Options].
const (
	DefaultTimeout        = 20 * time.Millisecond
	DefaultFailuresToOpen = 5
	DefaultOpenFor        = time.Second
	DefaultRememberSize   = 100_000
)

// CalendarFallback says what the local fallback does with calendar quotas
// (fixed windows by day or month).
type CalendarFallback uint8

const (
	// CalendarClosed refuses every request under a calendar quota while
	// the store is unavailable: Fallback returns an error wrapping
	// [ErrUnavailable], which a gateway answers as a fail_closed route.
	// A quota counts a long window; granting it again locally would give
	// a day's or a month's budget per outage. It is the default.
	CalendarClosed CalendarFallback = iota
	// CalendarShare decides a calendar quota like any limit: the
	// instance's share of what the store last said remained. A key the
	// store has not decided for since this instance started (or since it
	// was evicted from its memory) fails closed, as with CalendarClosed.
	CalendarShare
)

// String returns "closed" or "share".
func (c CalendarFallback) String() string {
	switch c {
	case CalendarClosed:
		return "closed"
	case CalendarShare:
		return "share"
	}
	return "calendar_fallback(" + strconv.Itoa(int(c)) + ")"
}

// ParseCalendarFallback returns the CalendarFallback named "closed" or
// "share"; the empty string is the default, closed.
func ParseCalendarFallback(s string) (CalendarFallback, error) {
	switch s {
	case "", "closed":
		return CalendarClosed, nil
	case "share":
		return CalendarShare, nil
	}
	return 0, fmt.Errorf("parsing calendar fallback: %q is not closed or share", s)
}

// errUnknown reports a calendar quota whose key the store has not decided
// for since this instance started.
var errUnknown = errors.New("no decision of the store remembered for this key")

// Options configures a [Store]. The zero value is the default.
type Options struct {
	// Timeout bounds each store call (default 20ms).
	Timeout time.Duration
	// FailuresToOpen is how many consecutive failures open the breaker
	// (default 5).
	FailuresToOpen uint32
	// OpenFor is how long the breaker stays open before it lets a probe
	// through (default 1s).
	OpenFor time.Duration
	// Instances is how many gateway instances share the store; the local
	// fallback enforces 1/Instances of each limit (default 1).
	Instances int
	// DenyCacheSize bounds the deny cache (default 100,000 subjects; a
	// negative value disables the cache).
	DenyCacheSize int
	// CalendarFallback says what the fallback does with calendar quotas
	// (default CalendarClosed: they fail closed).
	CalendarFallback CalendarFallback
	// RememberSize bounds how many keys' last store decisions (and
	// fallback debts) are remembered for the fallback (default 100,000
	// keys, about 230 bytes each; a negative value remembers none: every
	// key then falls back from a full share, and every calendar quota
	// fails closed). When full, the key whose knowledge ends first, of a
	// few taken at random, is forgotten: it is then as a key never seen.
	RememberSize int
	// Logger receives one line per breaker state change; nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock of the fallback; nil means time.Now.
	Now func() time.Time
}

// The compiler holds Store to the tollgate.Store contract.
var _ tollgate.Store = (*Store)(nil)

// Store is a resilient [tollgate.Store]. It is safe for concurrent use.
type Store struct {
	primary tollgate.Store
	opts    Options
	cb      *gobreaker.CircuitBreaker[struct{}]
	local   tollgate.Store
	memo    *memo // nil when Options.RememberSize is negative
	log     *slog.Logger

	calls, fallbacks atomic.Uint64
	lastErr          atomic.Value // string: the last failure the breaker counted

	pending pendingCalls

	descState, descCalls *prometheus.Desc
}

// New wraps primary, with local to decide while primary cannot (a memory
// store: see package store/memory). The Store owns local, which only it
// may use: it keeps what the fallback admitted there, and decides there at
// its own clock (Options.Now), whatever local's; Close closes local.
// primary stays its caller's to close.
func New(primary, local tollgate.Store, opts Options) *Store {
	opts = opts.withDefaults()
	s := &Store{
		primary: primary,
		opts:    opts,
		local:   local,
		log:     opts.Logger,
		descState: prometheus.NewDesc("tollgate_store_breaker_state",
			"State of the store's circuit breaker: 0 closed, 1 half-open, 2 open.", nil, nil),
		descCalls: prometheus.NewDesc("tollgate_store_calls_total",
			"Calls made to the shared store (after the breaker).", nil, nil),
	}
	s.log = logsample.Logger(s.log)
	s.pending.stop = make(chan struct{})
	if opts.RememberSize > 0 {
		s.memo = newMemo(opts.RememberSize)
	}
	s.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "store",
		MaxRequests: 1,
		Timeout:     opts.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= opts.FailuresToOpen
		},
		IsExcluded: func(err error) bool {
			// The caller giving up, or asking something invalid, says
			// nothing about the store's health.
			return errors.Is(err, context.Canceled) || algo.IsInvalid(err)
		},
		OnStateChange: s.logStateChange,
	})
	return s
}

// withDefaults is o with the options left zero (or, for the durations
// and Instances, below their least) set to their defaults.
func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.FailuresToOpen == 0 {
		o.FailuresToOpen = DefaultFailuresToOpen
	}
	if o.OpenFor <= 0 {
		o.OpenFor = DefaultOpenFor
	}
	if o.Instances < 1 {
		o.Instances = 1
	}
	if o.RememberSize == 0 {
		o.RememberSize = DefaultRememberSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Close stops retrying releases and settles (what is still pending is
// tried once more, while the store answers; the rest expires by its TTL)
// and releases the local fallback store.
func (s *Store) Close() error {
	s.pending.close()
	return s.local.Close()
}

// Allow implements [tollgate.Store]: the store behind the breaker and the
// deadline. The request also carries what the
// fallback admitted for its key and the store does not know of yet (see
// the package documentation); the decision is remembered for the
// fallback.
func (s *Store) Allow(ctx context.Context, req algo.Request) (algo.Decision, error) {
	now := s.now(req.Now)
	var dt debt
	if s.memo != nil {
		for {
			var wait <-chan struct{}
			if dt, wait = s.memo.take(&req, now.UnixMilli()); wait == nil {
				break
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return algo.Decision{}, fmt.Errorf("deciding: waiting for what the fallback admitted to be charged: %w", ctx.Err())
			}
		}
	}
	charged := req
	charged.Cost += dt.extra
	paid := false
	defer func() { s.memo.settle(&req, dt, paid) }()
	d, err := guarded(s, ctx, func(ctx context.Context) (algo.Decision, error) { return s.primary.Allow(ctx, charged) })
	if err != nil {
		return d, err
	}
	if s.memo != nil {
		paid = d.Allowed
		if owed := s.memo.record(&req, &d, s.now(req.Now).UnixMilli()); req.Cost == 0 {
			d.Remaining = max(0, d.Remaining-owed)
		}
	}
	return d, nil
}

// now returns t, or the store's clock for the zero Time.
func (s *Store) now(t time.Time) time.Time {
	if t.IsZero() {
		return s.opts.Now()
	}
	return t
}

// AllowAll decides a group of requests all or nothing through the store
// behind the breaker and the deadline, carrying what the fallback admitted
// for its keys as Allow does.
func (s *Store) AllowAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
	if err := algo.CheckGroup(reqs); err != nil {
		return nil, err
	}
	now := s.now(reqs[0].Now)
	debts, err := s.debts(ctx, reqs, now.UnixMilli())
	if err != nil {
		return nil, err
	}
	charged := reqs
	if debts != nil {
		charged = append([]algo.Request(nil), reqs...)
		for i, dt := range debts {
			charged[i].Cost += dt.extra
		}
	}
	paid := false
	defer func() {
		for i, dt := range debts {
			s.memo.settle(&reqs[i], dt, paid)
		}
	}()
	ds, err := guarded(s, ctx, func(ctx context.Context) ([]algo.Decision, error) { return s.primary.AllowAll(ctx, charged) })
	if err != nil {
		return nil, err
	}
	if s.memo != nil {
		paid = tollgate.Admitted(ds)
		at := s.now(reqs[0].Now).UnixMilli()
		for i := range reqs {
			if owed := s.memo.record(&reqs[i], &ds[i], at); reqs[i].Cost == 0 {
				ds[i].Remaining = max(0, ds[i].Remaining-owed)
			}
		}
	}
	return ds, nil
}

// debts takes what the keys of a group owe the store (nil if nothing).
// While another request carries one key's debt, it takes none and waits
// for it, so that no two requests wait on each other.
func (s *Store) debts(ctx context.Context, reqs []algo.Request, now int64) ([]debt, error) {
	if s.memo == nil {
		return nil, nil
	}
	for {
		debts, wait := s.takeDebts(reqs, now)
		if wait == nil {
			return debts, nil
		}
		for i, dt := range debts {
			s.memo.settle(&reqs[i], dt, false)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("deciding together: waiting for what the fallback admitted to be charged: %w", ctx.Err())
		}
	}
}

// takeDebts takes what each key of a group owes, in order, until one's
// debt is being carried by another request: then wait is what to wait
// for, and the debts taken must be settled unpaid. debts is nil when no
// key owes anything.
func (s *Store) takeDebts(reqs []algo.Request, now int64) (debts []debt, wait <-chan struct{}) {
	for i := range reqs {
		dt, w := s.memo.take(&reqs[i], now)
		if w != nil {
			return debts, w
		}
		if dt.paying != nil {
			if debts == nil {
				debts = make([]debt, len(reqs))
			}
			debts[i] = dt
		}
	}
	return debts, nil
}

// Lockout passes a login-guard operation to the store behind the breaker
// and the deadline. There is no fallback: the guard fails closed.
func (s *Store) Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error) {
	return guarded(s, ctx, func(ctx context.Context) (algo.LockoutResult, error) { return s.primary.Lockout(ctx, req) })
}

// Reserve passes a reservation to the store behind the breaker and the
// deadline. There is no fallback: what holds attempts fails closed.
func (s *Store) Reserve(ctx context.Context, req algo.Request, h algo.Hold) (algo.Decision, error) {
	return guarded(s, ctx, func(ctx context.Context) (algo.Decision, error) { return s.primary.Reserve(ctx, req, h) })
}

// PushBack implements [tollgate.Shaper]: it pushes the schedule back in
// the store, behind the breaker and the deadline, and in the local
// fallback too (this instance's share of the limit, [Store.Fallback]),
// so that requests the fallback decides while the store is unavailable
// keep to it as well. It reports the store's answer, or its error
// wrapping [ErrUnavailable] (the local push back is made all the same);
// an invalid request is reported as itself, and pushes back nothing.
func (s *Store) PushBack(ctx context.Context, req algo.Request, d time.Duration) (algo.Decision, error) {
	now := s.now(req.Now)
	share := Share(req.Limit, s.opts.Instances)
	local := req
	local.Limit, local.Handle = share, nil
	if s.memo != nil && req.Limit.Calendar == algo.NoCalendar {
		// The fallback's state of the key, as Fallback would find it.
		var err error
		local, err = s.memo.local(&req, &share, now.UnixMilli(), false, func(seed algo.Request) error {
			_, err := s.local.Allow(ctx, seed)
			return err
		})
		if err != nil {
			if algo.IsInvalid(err) {
				return algo.Decision{}, fmt.Errorf("pushing back: %w", err)
			}
			local.Limit = algo.Limit{} // no local state to push back
		}
		local.Handle = nil
	}
	if local.Limit != (algo.Limit{}) {
		local.Now = now
		if _, err := s.local.PushBack(ctx, local, d); err != nil && algo.IsInvalid(err) {
			return algo.Decision{}, fmt.Errorf("pushing back: %w", err)
		}
	}
	return guarded(s, ctx, func(ctx context.Context) (algo.Decision, error) { return s.primary.PushBack(ctx, req, d) })
}

// TakePlace implements [tollgate.Shaper]: the store decides behind the
// breaker and the deadline (the fallback takes no places).
func (s *Store) TakePlace(ctx context.Context, req algo.Request) (algo.Decision, algo.Place, error) {
	type taken struct {
		d algo.Decision
		p algo.Place
	}
	t, err := guarded(s, ctx, func(ctx context.Context) (taken, error) {
		d, p, err := s.primary.TakePlace(ctx, req)
		return taken{d, p}, err
	})
	return t.d, t.p, err
}

// GiveBack implements [tollgate.Shaper] behind the breaker and the
// deadline.
func (s *Store) GiveBack(ctx context.Context, req algo.Request, p algo.Place) (bool, error) {
	return guarded(s, ctx, func(ctx context.Context) (bool, error) { return s.primary.GiveBack(ctx, req, p) })
}

// Settle passes the end of a hold to the store behind the breaker and the
// deadline.
func (s *Store) Settle(ctx context.Context, req algo.Request, h algo.Hold, charge bool) (algo.Decision, error) {
	return guarded(s, ctx, func(ctx context.Context) (algo.Decision, error) { return s.primary.Settle(ctx, req, h, charge) })
}

// Ping checks the store behind (not through the breaker: a readiness
// probe asks whether it answers now).
func (s *Store) Ping(ctx context.Context) error { return s.primary.Ping(ctx) }

// Reset forgets the keys' state in the store behind the breaker and the
// deadline, and what this instance remembers of them for the fallback
// (their last decisions and what the fallback admitted): the next
// request starts from a whole limit everywhere.
func (s *Store) Reset(ctx context.Context, reqs []algo.Request) error {
	if s.memo != nil {
		for i := range reqs {
			s.memo.forget(&reqs[i])
		}
	}
	_, err := guarded(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.primary.Reset(ctx, reqs) })
	return err
}
