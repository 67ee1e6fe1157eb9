package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// A call to a token route (policy.Route.Tokens) is an LLM API call,
// charged by the token: its plan's token budgets are charged, with its
// other limits, an estimate read from its request, and settled at the
// usage its response reports once it ends (Verdict.Used, then Done).

// TokenRequest is what a call to a token route asks of the LLM behind,
// as its body says (Body.Tokens).
type TokenRequest struct {
	// Model is the request's model ("" when it names none).
	Model string
	// MaxOutput is the output the request bounds each answer to, -1
	// when it names no bound; Choices is how many answers it asks for
	// (at least 1).
	MaxOutput, Choices int64
	// Bytes is the body's size.
	Bytes int64
}

// ErrBadTokenRequest reports a token route's request body that cannot be
// read as one: it is refused (ReasonBadRequest), never charged at a
// default.
var ErrBadTokenRequest = errors.New("the request cannot be read as an LLM API request")

// Tokens is what a call to a token route is estimated to use, and for
// which model.
type Tokens struct {
	Input, Output int64
	Model         string
}

// Usage is what a token call used, as its response reported it.
type Usage struct {
	Input, Output int64
	// Reported says the response reported it. A call whose response
	// ended without (it reports none, the client went away first, the
	// upstream failed) settles at its estimate.
	Reported bool
	// Impossible says the response reported a count that is not a whole
	// number of at least 0: the report is not believed, and the call
	// keeps its estimate.
	Impossible bool
	// TotalOnly says Output is the total used, input and output (a
	// policy.Tokens.UsageHeader's): budgets of input_tokens or
	// output_tokens keep their estimates.
	TotalOnly bool
	// Failed says the upstream answered an error, whole (an HTTP status
	// of 400 and above, a gRPC status other than OK): one that reported
	// no usage used nothing, the provider having refused the call.
	Failed bool
}

// readTokens reads a token call's request (Body.Tokens) and puts its
// estimate on call (without a Body, the route's default); on failure it returns the verdict, nothing held and
// no store asked.
func (e *Engine) readTokens(ctx context.Context, req Request, t *policy.Tokens, id Identity, call *Call) *Verdict {
	if req.Body == nil {
		in, out := t.Estimate(-1, 1, 0)
		call.Tokens = &Tokens{Input: in, Output: out}
		return nil
	}
	tr, err := req.Body.Tokens(t)
	switch {
	case errors.Is(err, ErrBadTokenRequest):
		e.count("tokens", call.group(), "-", "bad_request")
		e.logSampled(ctx, slog.LevelInfo, "refused: unreadable LLM request", id.Subject, "tokens", call.group(), slog.String("reason", err.Error()))
		return e.invalid(ReasonBadRequest, strings.TrimPrefix(err.Error(), ErrBadTokenRequest.Error()+": "), err)
	case err != nil:
		e.count("tokens", call.group(), "-", "unread")
		return e.invalid(ReasonUnreadable, "", err)
	}
	in, out := t.Estimate(tr.MaxOutput, tr.Choices, tr.Bytes)
	call.Tokens = &Tokens{Input: in, Output: out, Model: tr.Model}
	return nil
}

// budgetRequest returns the request charging b for a call of cost (its
// route's) by tokens (nil off a token route) to subject in group tag, and
// whether b applies to the call at all: a token budget charges the
// tokens estimated in its unit (at least 1), and one counted per model
// counts the model apart, in the subject's group.
func budgetRequest(b *policy.Budget, subject, tag string, cost int64, tokens *Tokens) (tollgate.Request, bool) {
	if tokens == nil {
		if !b.Applies(false, "") {
			return tollgate.Request{}, false
		}
		return b.Request(subject, tag, cost), true
	}
	if !b.Applies(true, tokens.Model) {
		return tollgate.Request{}, false
	}
	if b.Unit != policy.UnitRequests {
		// At least 1, refunded when the call settles: a charge of 0
		// would be a query, which a budget in debt admits.
		cost = max(1, b.Unit.Of(tokens.Input, tokens.Output))
	}
	if b.PerModel {
		if tag == "" {
			tag = subject
		}
		subject += "\x00" + tokens.Model
	}
	return b.Request(subject, tag, cost), true
}

// A tokenHold is a token call's reservation: its token budgets' requests
// as charged (at the estimate), to settle at its usage. A recorded call
// charged no token budget has one without any (see Engine.record), to
// keep its usage for the recording.
type tokenHold struct {
	e       *Engine
	route   *policy.Route
	tokens  Tokens
	budgets []*policy.Budget
	items   []algo.SettleItem
	start   time.Time // the engine's clock before the charge was asked
	id      string
	usage   Usage
	local   bool // the fallback decided it: the store never saw it
	settled bool
}

// charged reports whether h (nil: none) has token budgets to settle: a
// recorded call's hold may have none, only its usage to record.
func (h *tokenHold) charged() bool { return h != nil && len(h.items) > 0 }

// reserve keeps, on an admitted token call, what its token budgets were
// charged, for Done to settle.
func (e *Engine) reserve(v *Verdict, c Call, ch charges, start time.Time) {
	if c.Tokens == nil {
		return
	}
	h := &tokenHold{e: e, route: c.Route, tokens: *c.Tokens, start: start, local: v.Local}
	for i, b := range ch.budgets {
		if b.Unit != policy.UnitRequests {
			h.budgets = append(h.budgets, b)
			h.items = append(h.items, algo.SettleItem{Request: ch.reqs[i]})
		}
	}
	if len(h.items) > 0 {
		h.id = newLeaseID()
		v.tokens = h
	}
}

// Used records what the call used, as its response reported it, for
// Done to settle the call's token budgets with. It does nothing for a
// call that is not a token call, and once Done has settled.
func (v *Verdict) Used(u Usage) {
	if u.Failed && !u.Reported {
		u = Usage{Reported: true} // see Usage.Failed
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tokens != nil && !v.tokens.settled {
		v.tokens.usage = u
	}
}

// Settle outcomes, as tollgate_llm_settles_total counts them.
const (
	settleApplied    = "settled"    // settled at the usage reported
	settleExact      = "exact"      // the usage was the estimate: nothing to settle
	settleUnreported = "unreported" // no usage reported: the estimate stands
	settleCapped     = "capped"     // usage above tokens.max_usage, capped, then settled
	settleImpossible = "impossible" // usage not a count: the estimate stands
	settleLocal      = "fallback"   // decided by the fallback: the estimate stands
	settleExpired    = "expired"    // too late: the estimate stands
	settleRepeated   = "repeated"   // settled already (a retried settle)
	settleFailed     = "failed"     // the store failed: retried by resilience, else the estimate stands
)

// settle settles the hold at its usage: a store call unless the call
// used exactly its estimate, reported nothing, or was decided without
// the store.
func (h *tokenHold) settle(ctx context.Context, group, plan string) {
	u, outcome := h.usage, settleApplied
	switch {
	case !u.Reported:
		h.e.countSettle(group, plan, settleUnreported, h, nil)
		return
	case u.Impossible || u.Input < 0 || u.Output < 0:
		h.e.log.LogAttrs(ctx, slog.LevelWarn, "an upstream reported token usage that is not a count: the call keeps its estimate",
			slog.String("route_group", group), slog.Int64("input", u.Input), slog.Int64("output", u.Output))
		h.e.countSettle(group, plan, settleImpossible, h, nil)
		return
	}
	var capIn, capOut bool
	u.Input, capIn = h.route.Tokens.Usage(u.Input)
	u.Output, capOut = h.route.Tokens.Usage(u.Output)
	if capIn || capOut {
		outcome = settleCapped
		h.e.log.LogAttrs(ctx, slog.LevelWarn, "an upstream reported more tokens than tokens.max_usage: capped",
			slog.String("route_group", group), slog.Int64("input", h.usage.Input), slog.Int64("output", h.usage.Output), slog.Int64("max_usage", h.route.Tokens.MaxUsage))
	}
	h.usage = u
	exact := true
	for i := range h.items {
		it := &h.items[i]
		switch unit := h.budgets[i].Unit; {
		case u.TotalOnly && unit != policy.UnitTokens:
			it.Actual = it.Request.Cost
		default:
			it.Actual = unit.Of(u.Input, u.Output)
		}
		exact = exact && it.Actual == it.Request.Cost
	}
	switch {
	case h.local:
		outcome = settleLocal
	case exact && outcome == settleApplied:
		outcome = settleExact
	default:
		outcome = h.store(ctx, outcome)
	}
	h.e.countSettle(group, plan, outcome, h, &u)
}

// store settles the hold in the store; it returns the outcome, outcome
// when the store applied it.
func (h *tokenHold) store(ctx context.Context, outcome string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	now := h.e.clockTime()
	for i := range h.items {
		h.items[i].Request.Now = now
	}
	st := algo.Settlement{ID: h.id, Age: max(0, h.e.now().Sub(h.start)), TTL: h.route.Tokens.SettleTTL, Items: h.items}
	sctx, span := h.e.storeSpan(ctx, "tollgate.store SettleAll", h.budgets[0].Name, len(h.items))
	out, err := h.e.store.SettleAll(sctx, st)
	endStoreSpan(span, out.Outcome.String(), err)
	switch {
	case err != nil:
		h.e.log.LogAttrs(ctx, slog.LevelWarn, "settling a token call (its estimate stands unless the store's retry applies it)",
			slog.String("budget", h.budgets[0].Name), slog.String("error", err.Error()))
		return settleFailed
	case out.Outcome == algo.SettleExpired:
		return settleExpired
	case out.Outcome == algo.SettleRepeated:
		return settleRepeated
	}
	return outcome
}

// countSettle counts a settle's outcome and, for each of the hold's
// budgets, the tokens estimated, and those the usage u (nil when none
// was reported) settled, gave back and charged beyond the estimate.
func (e *Engine) countSettle(group, plan, outcome string, h *tokenHold, u *Usage) {
	mt := e.metrics
	if mt == nil {
		return
	}
	mt.Settles.WithLabelValues(group, plan, outcome).Inc()
	for i, it := range h.items {
		b, est := h.budgets[i].Name, it.Request.Cost
		mt.Tokens.WithLabelValues(b, group, plan, "estimated").Add(float64(est))
		if u == nil || outcome == settleFailed || outcome == settleExpired || outcome == settleRepeated || outcome == settleLocal {
			mt.Tokens.WithLabelValues(b, group, plan, "settled").Add(float64(est))
			continue
		}
		mt.Tokens.WithLabelValues(b, group, plan, "settled").Add(float64(it.Actual))
		if it.Actual < est {
			mt.Tokens.WithLabelValues(b, group, plan, "refunded").Add(float64(est - it.Actual))
		} else if it.Actual > est {
			mt.Tokens.WithLabelValues(b, group, plan, "debt").Add(float64(it.Actual - est))
		}
	}
}

// ReportedOf returns, among the call's charges of token budgets (tokens)
// or of request budgets (!tokens), the most restrictive, if any.
func (v *Verdict) ReportedOf(tokens bool) (Charge, bool) {
	best := -1
	for i, c := range v.Charges {
		if (c.Budget.Unit != policy.UnitRequests) != tokens {
			continue
		}
		if best < 0 || restricts(c.Decision, v.Charges[best].Decision) {
			best = i
		}
	}
	if best < 0 {
		return Charge{}, false
	}
	return v.Charges[best], true
}
