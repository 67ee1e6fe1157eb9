package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// BudgetCall is a set of budgets to decide together, all or nothing, for
// a front that names its budgets itself rather than through a policy's
// routes and plans (Envoy's rate-limit service, package envoyrls).
type BudgetCall struct {
	// Group names the call in metrics and logs (the route_group label).
	Group string
	// Tag is the store group every charge is decided in (see
	// [algo.Request.Tag]): what makes one atomic store call possible, and
	// on Redis Cluster the one hash slot they all live in.
	Tag string
	// Charges are the budgets to charge, each budget and subject at most
	// once. The enforced ones (at most [algo.MaxGroup], with the shadow
	// ones) are charged together or not at all; a shadow budget is
	// charged, on its own, only if the enforced ones admit the call.
	Charges []BudgetCharge
	// FailClosed refuses the call when the store cannot decide it;
	// otherwise the store's local fallback decides (fail open), or the
	// call is admitted undecided.
	FailClosed bool
	// Subject names who the call is about in logs and the most-refused
	// tracker: a pseudonym, or empty for none.
	Subject string
}

// BudgetCharge is one budget of a [BudgetCall] and what it is charged.
type BudgetCharge struct {
	Budget *policy.Budget
	// Subject is whose state of the budget is charged.
	Subject string
	// Cost is what is charged; zero asks without charging.
	Cost int64
}

// CheckBudgets decides c, all or nothing: if any enforced budget refuses
// its charge, none is charged. The verdict's Charges hold one decision per
// charge of c, in c's order, shadow budgets included; Report indexes the
// most restrictive enforced one.
//
//   - A charge above what its budget could ever admit (its capacity)
//     refuses the call as any refusal does (ReasonCostExceedsBurst): the
//     budgets are queried, charging nothing, and that budget's decision
//     is a refusal.
//   - Shadow budgets never refuse: they are queried in the same store
//     call as the enforced ones and, if the call is admitted, then charged
//     one by one (a store call each), so that each counts what it would
//     have admitted beside the enforced ones; their would-be refusals are
//     counted in Metrics.Shadow.
//   - The deny cache answers a group the store refused until its
//     RetryAfter; when the store cannot decide, the local fallback does
//     unless c.FailClosed.
//
// Unlike [Engine.Check], the verdict holds nothing that lasts: Done need
// not be called.
func (e *Engine) CheckBudgets(ctx context.Context, c BudgetCall) *Verdict {
	v := &Verdict{e: e, Report: -1, group: c.Group, plan: "-"}
	if len(c.Charges) == 0 {
		v.Outcome = Allowed
		return v
	}
	if len(c.Charges) > algo.MaxGroup {
		v.Outcome, v.Reason = Invalid, ReasonMisconfigured
		v.Err = fmt.Errorf("deciding budgets: %d budgets in one call (at most %d)", len(c.Charges), algo.MaxGroup)
		return v
	}
	reqs := make([]tollgate.Request, len(c.Charges))
	budgets := make([]*policy.Budget, len(c.Charges))
	tooBig, enforced := c.requests(reqs, budgets)
	sub := c.Subject
	if sub == "" {
		sub = "-"
	}
	subject := Subject{Kind: "budgets", ID: sub}
	ds, err := e.decide(ctx, budgets[0].Name, reqs)
	if err != nil {
		var ok bool
		if ds, ok = e.storeFailed(ctx, v, err, subject, c.FailClosed, budgets, reqs); !ok {
			return v
		}
	}
	v.Charges = decidedCharges(c.Charges, ds[:len(reqs):len(reqs)])
	v.Report = mostRestrictiveEnforced(v.Charges)
	admitted := enforcedAdmit(v.Charges)
	if admitted {
		e.chargeShadows(ctx, v, c)
	}
	e.concludeBudgets(ctx, v, subject, enforced, admitted, tooBig)
	return v
}

// decidedCharges pairs each charge's budget with its decision; a charge
// above what its budget could ever admit is refused, never to be
// admitted (RetryAfter is the longest duration a limit may report).
func decidedCharges(charges []BudgetCharge, ds []tollgate.Decision) []Charge {
	cs := make([]Charge, len(ds))
	for i := range ds {
		b := charges[i].Budget
		cs[i] = Charge{Budget: b, Decision: ds[i]}
		if charges[i].Cost > b.Limit.Capacity() {
			cs[i].Decision.Allowed, cs[i].Decision.RetryAfter = false, algo.MaxHorizon
		}
	}
	return cs
}

// enforcedAdmit reports whether every enforced charge was admitted.
func enforcedAdmit(cs []Charge) bool {
	for _, ch := range cs {
		if !ch.Budget.Shadow && !ch.Decision.Allowed {
			return false
		}
	}
	return true
}

// concludeBudgets sets v's outcome: allowed when no budget is enforced
// or every enforced one admitted it, else refused by the most
// restrictive (ReasonCostExceedsBurst when a charge was too big, the
// one at index tooBig).
func (e *Engine) concludeBudgets(ctx context.Context, v *Verdict, subject Subject, enforced, admitted bool, tooBig int) {
	if !enforced {
		v.Outcome = Allowed
		return
	}
	b, d := v.Charges[v.Report].Budget, v.Charges[v.Report].Decision
	if !admitted {
		e.refuse(ctx, v, subject, b, d)
		if tooBig >= 0 {
			v.Reason = ReasonCostExceedsBurst
		}
		return
	}
	v.Outcome = Allowed
	e.count(b.Name, v.group, v.plan, "allowed")
}

// requests writes into reqs and budgets (one each per charge) the store
// requests of one call of the charges: the enforced charges decided, the
// shadow ones and any charge no budget could admit (which refuses the
// call) queried at cost 0, every one at cost 0 when one is too big
// (tooBig: its index, else -1); and reports whether any is enforced.
func (c BudgetCall) requests(reqs []tollgate.Request, budgets []*policy.Budget) (tooBig int, enforced bool) {
	tooBig = -1
	for i, ch := range c.Charges {
		cost := ch.Cost
		if ch.Budget.Shadow || cost > ch.Budget.Limit.Capacity() {
			cost = 0
		}
		if ch.Cost > ch.Budget.Limit.Capacity() && !ch.Budget.Shadow && tooBig < 0 {
			tooBig = i
		}
		enforced = enforced || !ch.Budget.Shadow
		reqs[i] = ch.Budget.Request(ch.Subject, c.Tag, cost)
		budgets[i] = ch.Budget
	}
	if tooBig >= 0 {
		// Nothing is charged: the call is refused.
		for i := range reqs {
			reqs[i].Cost = 0
		}
	}
	return tooBig, enforced
}

// chargeShadows charges an admitted call's shadow budgets, so that each
// counts what it would have admitted beside the enforced ones: each on
// its own (not while the store is down, nor a cost of zero, which only
// asks), its would-be refusal counted in Metrics.Shadow.
func (e *Engine) chargeShadows(ctx context.Context, v *Verdict, c BudgetCall) {
	for i, ch := range c.Charges {
		if !ch.Budget.Shadow || ch.Cost == 0 || v.Local {
			continue
		}
		if ch.Cost <= ch.Budget.Limit.Capacity() {
			sds, err := e.decide(ctx, ch.Budget.Name, []tollgate.Request{ch.Budget.Request(ch.Subject, c.Tag, ch.Cost)})
			if err != nil {
				e.log.LogAttrs(ctx, slog.LevelWarn, "shadow decision failed", slog.String("budget", ch.Budget.Name), slog.String("error", err.Error()))
				continue
			}
			v.Charges[i].Decision = sds[0]
		}
		outcome := "allowed"
		if !v.Charges[i].Decision.Allowed {
			outcome = "refused"
		}
		if mt := e.metrics; mt != nil {
			mt.Shadow.WithLabelValues(ch.Budget.Name, c.Group, outcome).Inc()
		}
	}
}

// mostRestrictiveEnforced is mostRestrictive among the enforced charges,
// or among all when every one is in shadow.
func mostRestrictiveEnforced(cs []Charge) int {
	ds := make([]tollgate.Decision, 0, len(cs))
	idx := make([]int, 0, len(cs))
	for i, c := range cs {
		if !c.Budget.Shadow {
			ds, idx = append(ds, c.Decision), append(idx, i)
		}
	}
	if len(ds) == 0 {
		for i, c := range cs {
			ds, idx = append(ds, c.Decision), append(idx, i)
		}
	}
	return idx[mostRestrictive(ds)]
}
