package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// Descriptors are the descriptors of a call to Envoy's rate-limit
// service (FrontRLS), as its domain's descriptor tree resolves them: the
// front's translation of its request (package envoyrls), which the
// engine decides all or nothing.
type Descriptors interface {
	// Domain is the call's domain, which names it in metrics and logs and
	// is the store group of its budgets; failClosed refuses the call when
	// the store cannot decide it (otherwise the local fallback decides,
	// or the call is admitted undecided).
	Domain() (name string, failClosed bool)
	// Len is the number of descriptors.
	Len() int
	// Resolve returns what descriptor i resolves to in the domain's tree,
	// or the limit it carries itself. An error refuses the call as
	// presented (ReasonBadRequest, the error in Verdict.Err).
	Resolve(i int) (Descriptor, error)
}

// Descriptor is one descriptor of an RLS call, resolved.
type Descriptor struct {
	// Limited says the descriptor resolved to a limit; Unlimited, to one
	// that admits everything. A limit of no Budget (requests_per_unit 0)
	// admits nothing: any hit refuses the call.
	Limited, Unlimited bool
	Budget             *policy.Budget
	// Name names the limit for Replaces, which lists the names of the
	// call's other limits this one replaces (they are then not applied).
	Name     string
	Replaces []string
	// Subject is whose state of Budget the descriptor charges; Hits is
	// what it charges (zero asks without charging).
	Subject string
	Hits    int64
	// AfterResponse says the hits count a request already served (Envoy's
	// apply_on_stream_done, hits_addend the tokens its response used):
	// they are charged as debt, past the limit, never refused. A request
	// of 0 hits on it (Envoy's check before the request) is charged 1,
	// so that it is refused once nothing is left or while the debt lasts;
	// on another limit 0 hits asks without charging, and a limit in debt
	// would admit it.
	AfterResponse bool
}

// DescriptorVerdict is what a descriptor of an RLS call came to.
type DescriptorVerdict struct {
	Descriptor
	// Applied says its limit was applied: limited, not unlimited, nor
	// replaced by another of the call's limits.
	Applied bool
	// Charge is the index in Verdict.Charges of the budget it charged
	// (one charge for the descriptors of one budget and subject), or -1
	// for none; Asked is what that charge asked for.
	Charge int
	Asked  int64
	// check says an AfterResponse descriptor asked 0 hits: it is charged
	// 1 with the call's other limits, not as debt.
	check bool
}

// decideDescriptors decides an RLS call (FrontRLS): the descriptors'
// limits (Descriptors.Resolve, a limit replaced by another not applied),
// one charge per budget and subject, decided all or nothing in one store
// call (checkBudgets): a call over any limit charges none. A limit that
// admits nothing refuses a call that hits it (ReasonRate), every charge
// then decided at cost 0, as is every charge of a call one of whose
// charges exceeds its budget's capacity (Verdict.Queried).
func (e *Engine) decideDescriptors(ctx context.Context, ds Descriptors) *Verdict {
	dvs, err := resolveDescriptors(ds)
	if err != nil {
		return e.invalid(ReasonBadRequest, err.Error(), err)
	}
	charges, zero, err := descriptorCharges(dvs, make([]budgetCharge, 0, 4))
	if err != nil {
		return e.invalid(ReasonBadRequest, err.Error(), err)
	}
	name, failClosed := ds.Domain()
	v := e.checkBudgets(ctx, budgetCall{Group: name, Tag: name, Charges: charges, FailClosed: failClosed})
	e.chargeAfterResponse(ctx, v, dvs, name)
	v.Descriptors, v.Queried = dvs, zero
	for _, ch := range charges {
		v.Queried = v.Queried || !ch.Budget.Shadow && ch.Cost > ch.Budget.Limit.Capacity()
	}
	if zero && v.Outcome == Allowed {
		v.Outcome, v.Reason = Refused, ReasonRate
	}
	return v
}

// resolveDescriptors resolves every descriptor of ds; one whose limit
// another of the call's limits replaces is not applied.
func resolveDescriptors(ds Descriptors) ([]DescriptorVerdict, error) {
	dvs := make([]DescriptorVerdict, ds.Len())
	var replacing map[string]bool
	for i := range dvs {
		d, err := ds.Resolve(i)
		if err != nil {
			return nil, err
		}
		dvs[i] = DescriptorVerdict{Descriptor: d, Applied: d.Limited && !d.Unlimited, Charge: -1}
		if d.AfterResponse && d.Hits == 0 {
			dvs[i].Hits, dvs[i].check = 1, true // see Descriptor.AfterResponse
		}
		for _, r := range d.Replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
	}
	for i := range dvs {
		if dv := &dvs[i]; dv.Applied && dv.Name != "" && replacing[dv.Name] {
			dv.Applied = false
		}
	}
	return dvs, nil
}

// descriptorCharges appends to charges one charge per budget and subject
// of the applied descriptors, noting in each descriptor which it is and
// what it asked for; and reports whether a limit that admits nothing is
// hit, which refuses the call: every charge is then at cost 0.
func descriptorCharges(dvs []DescriptorVerdict, charges []budgetCharge) ([]budgetCharge, bool, error) {
	zero := false
	for i := range dvs {
		dv := &dvs[i]
		switch {
		case !dv.Applied:
		case dv.AfterResponse && !dv.check && dv.Budget != nil: // chargeAfterResponse's
		case dv.Budget == nil:
			zero = zero || dv.Hits > 0
		default:
			var err error
			if charges, err = addCharge(charges, dv); err != nil {
				return nil, false, err
			}
		}
	}
	for i := range dvs {
		if j := dvs[i].Charge; j >= 0 {
			dvs[i].Asked = charges[j].Cost
		}
	}
	if zero {
		for j := range charges {
			charges[j].Cost = 0
		}
	}
	return charges, zero, nil
}

// chargeAfterResponse charges the hits of the descriptors that count a
// request already served (Descriptor.AfterResponse) as debt, in one
// settle of the call's group tag (a reservation of 0 settled at the
// hits: algo.Prepared.Settle), whatever the limit says and whatever the
// call's other limits decided, and appends their decisions to v's
// charges. Not while the store is down: the hits are then lost, logged
// and counted as the store's errors.
func (e *Engine) chargeAfterResponse(ctx context.Context, v *Verdict, dvs []DescriptorVerdict, tag string) {
	var items []algo.SettleItem
	var budgets []*policy.Budget
	for i := range dvs {
		dv := &dvs[i]
		if !dv.Applied || !dv.AfterResponse || dv.check || dv.Budget == nil {
			continue
		}
		j := -1 // the item of the same budget and subject, if any
		for k := range items {
			if budgets[k] == dv.Budget && items[k].Request.Subject == dv.Subject {
				j = k
			}
		}
		if j < 0 {
			if len(items) == algo.MaxGroup {
				continue // more than a group: descriptorCharges refuses such a call first
			}
			req := dv.Budget.Request(dv.Subject, tag, 0)
			req.Now = e.clockTime()
			items, budgets = append(items, algo.SettleItem{Request: req}), append(budgets, dv.Budget)
			j = len(items) - 1
		}
		items[j].Actual = addHits(items[j].Actual, dv.Hits)
		dv.Charge, dv.Asked = len(v.Charges)+j, items[j].Actual
	}
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	sctx, span := e.storeSpan(ctx, "tollgate.store SettleAll", budgets[0].Name, len(items))
	start := time.Now()
	out, err := e.store.SettleAll(sctx, algo.Settlement{ID: newLeaseID(), TTL: time.Minute, Items: items})
	endStoreSpan(span, out.Outcome.String(), err)
	e.observeStore(budgets[0].Name, start, err)
	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "charging hits after a response (lost)", slog.String("budget", budgets[0].Name), slog.String("error", err.Error()))
		for i := range dvs {
			if dvs[i].AfterResponse && dvs[i].Charge >= len(v.Charges) {
				dvs[i].Charge = -1
				dvs[i].Applied = false
			}
		}
		return
	}
	for i, d := range out.Decisions {
		v.Charges = append(v.Charges, Charge{Budget: budgets[i], Decision: d})
		e.count(budgets[i].Name, v.group, v.plan, "after_response")
	}
}

// addCharge adds dv's hits on its budget for its subject to charges, and
// notes in dv which charge they are: one charge of both for the same
// budget and subject twice (saturated: hits summing past an int64 are
// more than any limit, never a small charge).
func addCharge(charges []budgetCharge, dv *DescriptorVerdict) ([]budgetCharge, error) {
	for j, ch := range charges {
		if ch.Budget == dv.Budget && ch.Subject == dv.Subject {
			charges[j].Cost = addHits(ch.Cost, dv.Hits)
			dv.Charge = j
			return charges, nil
		}
	}
	if len(charges) == algo.MaxGroup {
		// Refused before the next descriptor is compared with all those
		// before it: a request of thousands costs no more than its
		// reading.
		return nil, fmt.Errorf("more than %d limited descriptors in one request", algo.MaxGroup)
	}
	dv.Charge = len(charges)
	return append(charges, budgetCharge{Budget: dv.Budget, Subject: dv.Subject, Cost: dv.Hits}), nil
}

// addHits is a+b for non-negative counts, saturated at math.MaxInt64.
func addHits(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// budgetCall is an RLS call's charges, decided together, all or nothing.
type budgetCall struct {
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
	Charges []budgetCharge
	// FailClosed refuses the call when the store cannot decide it;
	// otherwise the store's local fallback decides (fail open), or the
	// call is admitted undecided.
	FailClosed bool
}

// budgetCharge is one budget of a [budgetCall] and what it is charged.
type budgetCharge struct {
	Budget *policy.Budget
	// Subject is whose state of the budget is charged.
	Subject string
	// Cost is what is charged; zero asks without charging.
	Cost int64
}

// checkBudgets decides c, all or nothing: if any enforced budget refuses
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
// Unlike a route's call, the verdict holds nothing that lasts: Done need
// not be called.
func (e *Engine) checkBudgets(ctx context.Context, c budgetCall) *Verdict {
	v := &Verdict{e: e, Report: -1, group: c.Group, plan: "-"}
	if len(c.Charges) == 0 {
		v.Outcome = Allowed
		return v
	}
	reqs := make([]tollgate.Request, len(c.Charges))
	budgets := make([]*policy.Budget, len(c.Charges))
	tooBig, enforced := c.requests(reqs, budgets)
	subject := Subject{Kind: "budgets", ID: "-"}
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
func decidedCharges(charges []budgetCharge, ds []tollgate.Decision) []Charge {
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
func (c budgetCall) requests(reqs []tollgate.Request, budgets []*policy.Budget) (tooBig int, enforced bool) {
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
func (e *Engine) chargeShadows(ctx context.Context, v *Verdict, c budgetCall) {
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
	shadowToo := !slices.ContainsFunc(cs, func(c Charge) bool { return !c.Budget.Shadow })
	best := -1
	for i, c := range cs {
		if (shadowToo || !c.Budget.Shadow) && (best < 0 || restricts(c.Decision, cs[best].Decision)) {
			best = i
		}
	}
	return best
}
