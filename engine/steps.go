package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// taking is a call being checked: what its steps read and write.
type taking struct {
	e    *Engine
	v    *Verdict
	c    Call
	ch   charges // the budgets the call is charged (Engine.plan)
	cost int64
}

// takeSteps takes each of steps in turn and, on the first that ends the
// call unadmitted (refused, failed closed, invalid), gives back every one
// taken before it, last first. A step that ends it admitted without a
// decision (FailOpen) keeps what was taken while the call is served.
func takeSteps(ctx context.Context, t *taking, steps []policy.Step) {
	for i, s := range steps {
		if take(ctx, t, s) {
			continue
		}
		if t.v.Outcome.Admitted() {
			return
		}
		for j := i - 1; j >= 0; j-- {
			giveBack(ctx, t.v, steps[j])
		}
		return
	}
}

// take takes step s of t's call; on false the verdict is final (a
// refusal, a failure closed) and nothing of this step is held.
func take(ctx context.Context, t *taking, s policy.Step) bool {
	switch s {
	case policy.StepAdaptive: // a slot of the upstream's, held until the call ends
		return t.e.acquireAdaptive(t.v, t.c)
	case policy.StepConcurrency: // a slot, held until the call ends
		return t.e.acquireSlot(ctx, t.v, t.c)
	case policy.StepLogin: // the guard's places, until the service answers
		return t.e.loginBegin(ctx, t.v, t.c)
	case policy.StepGlobalHold:
		// A place in the global budget, unless no rate limit is enforced
		// on the call (an unlimited subject, every limit in shadow).
		return len(t.ch.reqs) == 0 || t.e.holdGlobal(ctx, t.v, t.c, t.cost)
	case policy.StepCharge:
		return t.e.charge(ctx, t)
	case policy.StepShadow: // evaluated once the call is answered (Done)
		t.v.shadow = t.ch.shadow
		return true
	}
	panic(fmt.Sprintf("engine: unknown step %d", s))
}

// giveBack gives back what step s took, when a later step refuses. A
// refused charge charged nothing, and has nothing to give back.
func giveBack(ctx context.Context, v *Verdict, s policy.Step) {
	switch s {
	case policy.StepAdaptive:
		v.adaptive.release(v.e.now()) // unanswered: no sample
	case policy.StepConcurrency:
		if v.lease != nil {
			v.lease.release(ctx)
		}
	case policy.StepLogin:
		if v.login != nil {
			v.login.finish(ctx, 0)
		}
	case policy.StepGlobalHold:
		v.global.giveBack(ctx)
	case policy.StepShadow:
		v.shadow = nil
	}
}

// charge decides the call's enforced limits in one atomic call, then
// charges its held global place, and sets the verdict's charges.
func (e *Engine) charge(ctx context.Context, t *taking) bool {
	v, c, ch := t.v, t.c, t.ch
	if len(ch.reqs) == 0 {
		// No rate limit here is enforced (every one is in shadow, or the
		// subject is unlimited): past the guards, the call passes.
		v.Outcome = Allowed
		e.count(unlimitedBudget(c.Subject), v.group, v.plan, "allowed")
		return true
	}
	start := e.now()
	ds, err := e.decide(ctx, ch.budgets[0].Name, ch.reqs)
	if err != nil {
		var ok bool
		if ds, ok = e.storeFailed(ctx, v, err, c.Subject, c.failsClosed(), ch.budgets, ch.reqs); !ok {
			return false
		}
	}
	budgets := ch.budgets
	if v.global != nil && tollgate.Admitted(ds) {
		gd, ok := e.chargeGlobal(ctx, v, c)
		if !ok {
			return false
		}
		budgets, ds = append(budgets, c.Route.Global), append(ds, gd)
	}
	v.Charges = make([]Charge, len(ds))
	for i := range ds {
		v.Charges[i] = Charge{Budget: budgets[i], Decision: ds[i]}
		v.Delay = max(v.Delay, ds[i].Delay)
	}
	v.Report = mostRestrictive(ds)
	b, d := budgets[v.Report], ds[v.Report]
	if !tollgate.Admitted(ds) {
		v.Delay = 0
		e.refuse(ctx, v, c.Subject, b, d)
		return false
	}
	v.Outcome = Allowed
	e.count(b.Name, v.group, v.plan, "allowed")
	e.reserve(v, c, ch, start)
	return true
}

// A lease is a concurrency slot a call holds while it is served.
type lease struct {
	e        *Engine
	req      algo.LeaseRequest
	released bool
}

// acquireSlot takes a concurrency slot for the call. On refusal or
// failure closed the verdict is final and it returns false.
func (e *Engine) acquireSlot(ctx context.Context, v *Verdict, c Call) bool {
	route := c.Route
	k := route.Concurrency
	subject := c.Subject.ID
	if k.PerRoute {
		subject = "route"
	}
	req := algo.LeaseRequest{Name: k.StoreName, Subject: subject, ID: newLeaseID(),
		Limit: k.Limit, TTL: k.LeaseTTL, Now: e.clockTime()}
	sctx, span := e.storeSpan(ctx, "tollgate.store Acquire", "concurrency."+route.Group, 1)
	got, err := e.store.Acquire(sctx, req)
	endStoreSpan(span, allowedOr(got), err)
	if err != nil {
		if route.FailClosed {
			e.countFallback("concurrency."+route.Group, "fail_closed")
			v.Outcome, v.Reason, v.Err, v.RetryAfter = FailClosed, ReasonUnavailable, err, time.Second
			return false
		}
		// Fails open without the slot. The acquire may still take it in
		// the store; the store (package resilience) gives such a lease
		// back once it answers again.
		e.countFallback("concurrency."+route.Group, "fail_open")
		return true
	}
	if !got {
		e.count("concurrency."+route.Group, route.Group, v.plan, "refused")
		v.Outcome, v.Reason, v.RetryAfter = Refused, ReasonConcurrency, time.Second
		return false
	}
	v.lease = &lease{e: e, req: req}
	return true
}

// release gives the slot back. The call's context may be canceled by
// then (the client went away), so it uses its own deadline.
func (l *lease) release(ctx context.Context) {
	if l.released {
		return
	}
	l.released = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	sctx, span := l.e.storeSpan(ctx, "tollgate.store Release", l.req.Name, 1)
	err := l.e.store.Release(sctx, l.req)
	endStoreSpan(span, "done", err)
	if err != nil {
		l.e.log.LogAttrs(ctx, slog.LevelWarn, "releasing a concurrency slot (retried when the store is resilience's, else it expires)", slog.String("error", err.Error()))
	}
}

// globalHoldTTL bounds how long a place held in a route's global budget
// outlives its call when the hold is never settled (the gateway stopped,
// or the store failed between the two calls): the place is taken, though
// nothing was charged, for at most this long.
const globalHoldTTL = 5 * time.Second

// globalHold is a call's place in its route's global budget, which lives
// in another slot than the subject's limits and so cannot be decided in
// the same atomic call. The place is held first (Reserve: it admits only
// if the budget could take every place held and this one, and charges
// nothing), then charged if the subject's limits admit the call, else
// given back; so a call refused by either side is charged by neither,
// and the global budget never admits more than it would one call at a
// time. (Calls at once may be refused while places held for calls their
// own limits then refuse fill the budget: stricter for that moment, never
// looser.) Where the store could not hold the place (unavailable), the
// budget is decided after the subject's limits, as a charge that stands
// if it refuses.
type globalHold struct {
	req     tollgate.Request
	hold    tollgate.Hold
	held    bool              // a place is held
	reserve tollgate.Decision // the reservation's decision
	settled bool
	e       *Engine
}

// holdGlobal holds the call's place in its route's global budget. On
// refusal the verdict is final and it returns false.
func (e *Engine) holdGlobal(ctx context.Context, v *Verdict, c Call, cost int64) bool {
	g := c.Route.Global
	gh := &globalHold{e: e, req: g.Request("route", "", cost)}
	gh.req.Now = e.clockTime()
	gh.hold = tollgate.Hold{ID: newLeaseID(), TTL: globalHoldTTL}
	sctx, span := e.storeSpan(ctx, "tollgate.store Reserve", g.Name, 1)
	d, err := e.store.Reserve(sctx, gh.req, gh.hold)
	endStoreSpan(span, allowedOr(d.Allowed), err)
	switch {
	case err != nil && algo.IsInvalid(err):
		_, ok := e.storeFailed(ctx, v, err, c.Subject, c.failsClosed(), []*policy.Budget{g}, []tollgate.Request{gh.req})
		return ok
	case err != nil:
		// Decided after the subject's limits instead (see globalHold). A
		// reservation that reached the store late expires by its TTL.
		v.global = gh
		return true
	case !d.Allowed:
		v.Charges, v.Report = []Charge{{Budget: g, Decision: d}}, 0
		e.refuse(ctx, v, c.Subject, g, d)
		return false
	}
	gh.held, gh.reserve = true, d
	v.global = gh
	return true
}

// chargeGlobal charges the call's place in the global budget, once the
// subject's limits admitted it, and returns the budget's decision; or,
// with no place held, decides the budget now. When the verdict is final
// (the store failed) it returns false.
func (e *Engine) chargeGlobal(ctx context.Context, v *Verdict, c Call) (tollgate.Decision, bool) {
	gh := v.global
	if !gh.held {
		greq := []tollgate.Request{gh.req}
		gds, err := e.decide(ctx, c.Route.Global.Name, greq)
		if err != nil {
			var ok bool
			if gds, ok = e.storeFailed(ctx, v, err, c.Subject, c.failsClosed(), []*policy.Budget{c.Route.Global}, greq); !ok {
				return tollgate.Decision{}, false
			}
		}
		return gds[0], true
	}
	gh.settled = true
	req := gh.req
	req.Now = e.clockTime()
	sctx, span := e.storeSpan(context.WithoutCancel(ctx), "tollgate.store Settle", c.Route.Global.Name, 1)
	d, err := e.store.Settle(sctx, req, gh.hold, true)
	endStoreSpan(span, allowedOr(d.Allowed), err)
	if err != nil {
		// The place stays held until the hold's TTL, in place of the
		// charge: the call is admitted, as its reservation said.
		e.logSampled(ctx, slog.LevelWarn, "charging a held place in a global budget (it stays held until it expires)", c.Subject,
			c.Route.Global.Name, v.group, slog.String("error", err.Error()))
		return gh.reserve, true
	}
	// Refused only if the hold expired before it was charged.
	return d, true
}

// giveBack ends a place held and not charged.
func (gh *globalHold) giveBack(ctx context.Context) {
	if gh == nil || !gh.held || gh.settled {
		return
	}
	gh.settled = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	req := gh.req
	req.Now = gh.e.clockTime()
	sctx, span := gh.e.storeSpan(ctx, "tollgate.store Settle", req.Name, 1)
	_, err := gh.e.store.Settle(sctx, req, gh.hold, false)
	endStoreSpan(span, "done", err)
	if err != nil {
		gh.e.log.LogAttrs(ctx, slog.LevelWarn, "giving back a held place in a global budget (it expires by itself)", slog.String("error", err.Error()))
	}
}

// evalShadow evaluates shadow budgets exactly as if they were enforced
// (each charged when it would admit) and counts what they would have
// refused; it never touches the verdict.
func (e *Engine) evalShadow(ctx context.Context, shadow []shadowCharge, group string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	for _, s := range shadow {
		ds, err := e.decide(ctx, s.budget.Name, []tollgate.Request{s.req})
		if err != nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "shadow decision failed", slog.String("budget", s.budget.Name), slog.String("error", err.Error()))
			continue
		}
		outcome := "allowed"
		if !ds[0].Allowed {
			outcome = "refused"
		}
		if mt := e.metrics; mt != nil {
			mt.Shadow.WithLabelValues(s.budget.Name, group, outcome).Inc()
		}
	}
}

// newLeaseID returns an id for a concurrency lease or a held place,
// unique across gateways sharing a store.
func newLeaseID() string {
	return fmt.Sprintf("%s-%d", leasePrefix, leaseSeq.Add(1))
}

// leaseIDs numbers this process's leases; the prefix is random per process
// so that instances sharing Redis never collide.
var (
	leasePrefix = func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b)
	}()
	leaseSeq atomic.Uint64
)
