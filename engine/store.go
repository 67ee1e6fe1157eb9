package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// decide asks the deny cache, then the store: a single request through
// Allow (which the Redis store coalesces with others; a Tag keys it as
// AllowAll would), a group through AllowAll. budget names the first
// request's budget in the metrics.
func (e *Engine) decide(ctx context.Context, budget string, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	start := time.Now()
	if e.opts.Now != nil {
		now := e.opts.Now()
		for i := range reqs {
			reqs[i].Now = now
		}
	}
	if e.deny != nil {
		if ds, ok := e.deny.lookup(reqs, e.now()); ok {
			if mt := e.metrics; mt != nil {
				mt.DenyHits.Inc()
			}
			return ds, nil
		}
	}
	ds, err := e.callStore(ctx, budget, reqs)
	e.observeStore(budget, start, err)
	if err == nil && e.deny != nil && !tollgate.Admitted(ds) && !e.owes(reqs) {
		e.deny.remember(reqs, ds, e.now())
	}
	return ds, err
}

// observeStore counts a store call begun at start, under budget, in the
// metrics.
func (e *Engine) observeStore(budget string, start time.Time, err error) {
	if mt := e.metrics; mt != nil {
		mt.StoreLatency.Observe(time.Since(start).Seconds())
		if err != nil {
			mt.StoreErrors.WithLabelValues(budget).Inc()
		}
	}
}

// callStore asks the store for reqs, the first under budget, in one
// call (Allow for one request, AllowAll for a group), in its own span.
func (e *Engine) callStore(ctx context.Context, budget string, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	if len(reqs) > 1 {
		sctx, span := e.storeSpan(ctx, "tollgate.store AllowAll", budget, len(reqs))
		ds, err := e.store.AllowAll(sctx, reqs)
		endStoreSpan(span, allowedOr(err == nil && tollgate.Admitted(ds)), err)
		return ds, err
	}
	sctx, span := e.storeSpan(ctx, "tollgate.store Allow", budget, 1)
	d, err := e.store.Allow(sctx, reqs[0])
	endStoreSpan(span, allowedOr(d.Allowed), err)
	return []tollgate.Decision{d}, err
}

// owes reports whether any of reqs' keys owes the store what the fallback
// admitted (see Fallbacker).
func (e *Engine) owes(reqs []tollgate.Request) bool {
	if e.fallback == nil {
		return false
	}
	for _, r := range reqs {
		if e.fallback.Owes(r) {
			return true
		}
	}
	return false
}

// storeFailed applies the failure policy (failClosed: the route's, or a
// budget call's) when the store could not decide reqs for sub. It returns
// the decisions to go on with (the local fallback's), or false when the
// verdict is final: failed closed, invalid, or admitted without a
// decision (FailOpen, the held global place given back); the steps taken
// before give back what they took (takeSteps) unless it is admitted.
func (e *Engine) storeFailed(ctx context.Context, v *Verdict, err error, sub Subject, failClosed bool, budgets []*policy.Budget, reqs []tollgate.Request) ([]tollgate.Decision, bool) {
	name := budgets[0].Name
	var item *tollgate.ItemError
	if errors.As(err, &item) && item.Index < len(budgets) {
		name = budgets[item.Index].Name
	}
	if e.unanswerable(ctx, v, err, name) {
		return nil, false
	}
	if !errors.Is(err, tollgate.ErrUnavailable) {
		e.logSampled(ctx, slog.LevelError, "store error", sub, name, v.group, slog.String("error", err.Error()))
	}
	if failClosed {
		e.failClosed(ctx, v, name, err)
		return nil, false
	}
	if e.fallback != nil {
		ds, ferr := e.fallBack(ctx, reqs)
		switch {
		case ferr == nil:
			e.countFallback(name, "fail_open")
			v.Local = true
			return ds, true
		case errors.Is(ferr, tollgate.ErrUnavailable):
			// A budget that fails closed on any route (a calendar quota;
			// see resilience.CalendarFallback).
			e.failClosed(ctx, v, name, ferr)
			return nil, false
		}
		e.logSampled(ctx, slog.LevelError, "local fallback failed, allowing", sub, name, v.group, slog.String("error", ferr.Error()))
	}
	e.countFallback(name, "fail_open")
	e.count(name, v.group, v.plan, "fail_open")
	v.Outcome, v.Err = FailOpen, err
	// What was held for the decision is given back; the concurrency slot
	// and the login holds last while the call is served.
	v.global.giveBack(ctx)
	return nil, false
}

// unanswerable sets v's outcome for a store error that no fallback
// answers, and reports whether err was one: a cost above the burst, an
// invalid request, or the caller gone.
func (e *Engine) unanswerable(ctx context.Context, v *Verdict, err error, name string) bool {
	switch {
	case errors.Is(err, tollgate.ErrCostExceedsBurst):
		// A cost the caller chose (the policy compiler checks the
		// routes'): no limit changed, the call is refused as invalid.
		v.Outcome, v.Reason, v.Err = Invalid, ReasonCostExceedsBurst, err
	case algo.IsInvalid(err):
		// The policy compiler rules these out; never let one through.
		e.log.LogAttrs(ctx, slog.LevelError, "invalid rate-limit request", slog.String("budget", name), slog.String("error", err.Error()))
		v.Outcome, v.Reason, v.Err = Invalid, ReasonMisconfigured, err
	case ctx.Err() != nil:
		// The caller went away: nothing to answer.
		v.Outcome, v.Reason, v.Err = FailClosed, ReasonCanceled, ctx.Err()
	default:
		return false
	}
	return true
}

// fallBack asks the local fallback for reqs, as the store would have
// been asked.
func (e *Engine) fallBack(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	if len(reqs) > 1 {
		return e.fallback.FallbackAll(ctx, reqs)
	}
	d, err := e.fallback.Fallback(ctx, reqs[0])
	return []tollgate.Decision{d}, err
}

// failClosed refuses the call because the store could not decide it.
func (e *Engine) failClosed(ctx context.Context, v *Verdict, name string, err error) {
	e.countFallback(name, "fail_closed")
	e.count(name, v.group, v.plan, "fail_closed")
	v.Outcome, v.Reason, v.Err, v.RetryAfter = FailClosed, ReasonUnavailable, err, time.Second
}
