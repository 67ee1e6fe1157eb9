package engine

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate"
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
