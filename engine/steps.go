package engine

import (
	"context"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/policy"
)

// A stepper takes one step of a call (a policy.Step) and gives back what
// it took.
type stepper interface {
	// take takes the step; on false the verdict is final (a refusal, a
	// failure closed) and nothing of this step is held.
	take(ctx context.Context, t *taking) bool
	// giveBack gives back what take took, when a later step refuses.
	giveBack(ctx context.Context, v *Verdict)
}

// steppers are the steps of policy.Step, by step.
var steppers = [...]stepper{
	policy.StepConcurrency: slotStep{},
	policy.StepLogin:       loginStep{},
	policy.StepGlobalHold:  globalStep{},
	policy.StepCharge:      chargeStep{},
	policy.StepShadow:      shadowStep{},
}

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
		if steppers[s].take(ctx, t) {
			continue
		}
		if t.v.Outcome.Admitted() {
			return
		}
		for j := i - 1; j >= 0; j-- {
			steppers[steps[j]].giveBack(ctx, t.v)
		}
		return
	}
}

// slotStep takes a slot of the route's concurrency limit.
type slotStep struct{}

func (slotStep) take(ctx context.Context, t *taking) bool { return t.e.acquireSlot(ctx, t.v, t.c) }

func (slotStep) giveBack(ctx context.Context, v *Verdict) {
	if v.lease != nil {
		v.lease.release(ctx)
	}
}

// loginStep holds the login guard's places for the attempt.
type loginStep struct{}

func (loginStep) take(ctx context.Context, t *taking) bool { return t.e.loginBegin(ctx, t.v, t.c) }

func (loginStep) giveBack(ctx context.Context, v *Verdict) {
	if v.login != nil {
		v.login.finish(ctx, 0)
	}
}

// globalStep holds a place in the route's global budget, unless no rate
// limit is enforced on the call (an unlimited subject, every limit in
// shadow).
type globalStep struct{}

func (globalStep) take(ctx context.Context, t *taking) bool {
	if len(t.ch.reqs) == 0 {
		return true
	}
	return t.e.holdGlobal(ctx, t.v, t.c, t.cost)
}

func (globalStep) giveBack(ctx context.Context, v *Verdict) { v.global.giveBack(ctx) }

// chargeStep decides the call's enforced limits in one atomic call, then
// charges its held global place, and sets the verdict's charges.
type chargeStep struct{}

func (chargeStep) take(ctx context.Context, t *taking) bool {
	e, v, c, ch := t.e, t.v, t.c, t.ch
	if len(ch.reqs) == 0 {
		// No rate limit here is enforced (every one is in shadow, or the
		// subject is unlimited): past the guards, the call passes.
		v.Outcome = Allowed
		e.count(unlimitedBudget(c.Subject), v.group, v.plan, "allowed")
		return true
	}
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
	return true
}

// giveBack has nothing to give back: a refused charge charged nothing.
func (chargeStep) giveBack(context.Context, *Verdict) {}

// shadowStep keeps the shadow budgets for the verdict to evaluate once
// the call is answered (Verdict.Done).
type shadowStep struct{}

func (shadowStep) take(_ context.Context, t *taking) bool {
	t.v.shadow = t.ch.shadow
	return true
}

func (shadowStep) giveBack(_ context.Context, v *Verdict) { v.shadow = nil }
