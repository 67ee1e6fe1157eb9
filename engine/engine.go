// Package engine decides rate-limit calls without knowing how they
// arrived. Every front (the HTTP middleware and forward-auth in package
// httplimit, the gRPC interceptors in grpclimit, Envoy's rate-limit
// service in envoyrls) translates its transport into the same stages and
// back:
//
//	request --> match --> identify --> steps --> verdict --> settle
//	(front:     Decide    Identify-    Check:    Verdict     Done,
//	 Request)   (request  Presented    route's   RateLimit,  Answered
//	            .go)      (identity,   Steps     Reported
//	                      jwtauth)     looped)
//
// [Engine.Decide] is the one entry point: a front fills a [Request] from
// its transport and answers from the [Verdict]. Each stage:
//
//   - match: the route on the cleaned path as every common upstream reads
//     it (policy.MatchKey, policy.MatchRequest), refusing a path, query
//     or method the server behind could read as another route, a login
//     route reached by another method, and a route the front cannot
//     serve, before anything is charged ([Reason.OfRequest]);
//   - identify: [Engine.IdentifyPresented] reads what the call presents
//     ([Presented]: headers, query, body and cookie credentials, the peer)
//     with package identity, verifies a bearer JWT (jwtauth) and names
//     the subject and its plan ([Identity]); then the route's own limit
//     is keyed (Engine.route) and a login's account read;
//   - steps: [Engine.Check] plans the charges (the plan's or the route's
//     limits, candidate and shadow budgets) and takes the steps the
//     policy compiled for the route ([policy.Step]: the concurrency slot,
//     the login guard's holds, a place in the global budget, the one
//     atomic charge, shadow), each in steps.go with how it is taken and
//     given back; the first refusal gives back everything taken before
//     it; an RLS call's descriptors (FrontRLS, [Descriptors]) are
//     resolved by their domain's tree instead of a route, and their
//     budgets charged in the same one atomic store call (descriptors.go);
//   - verdict: the [Verdict] carries the call, its identity and cleaned
//     path, every budget charged, the one to report (RateLimit headers,
//     Retry-After), a shaping delay and why a call was refused; the front
//     writes its answer from it;
//   - settle: once the service behind has answered, [Verdict.Answered]
//     settles a login attempt and [Verdict.Done] ends the lease and
//     evaluates shadow budgets, never before the answer.
//
// The engine owns the order of the checks, which is what makes a refusal
// cost nothing whichever check refuses; and what happens when the store
// cannot decide: the local fallback, or failing closed, per route.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/logsample"
	"github.com/tollgate/tollgate/jwtauth"
	"github.com/tollgate/tollgate/policy"
	"go.opentelemetry.io/otel/trace"
)

// Options configures an [Engine]. Store is required, and so is Policy for
// routes (an engine that only decides RLS calls may have none); the zero value of every other field is the default.
type Options struct {
	Policy *policy.Policy
	Store  tollgate.Store
	// Logger receives refusals (sampled) and store errors; nil means
	// slog.Default(). Subjects are logged only as pseudonyms.
	Logger *slog.Logger
	// Metrics, if set, counts decisions and store calls.
	Metrics *Metrics
	// LogRefusalsPerSecond bounds the log lines of each repeated event (a
	// refusal, a store error; default 1 per second after a burst of 10)
	// when Logger is not already sampled (see package internal/logsample).
	LogRefusalsPerSecond float64
	// Now, if set, is the clock every decision is made at (tests walk it);
	// nil means the store's own clock (Redis TIME for Redis).
	Now func() time.Time
	// DenyCacheSize bounds the deny cache, which answers the store's
	// refusals again, until their RetryAfter, without a store call (see
	// denyCache): a subject hammering a used-up budget then costs the
	// store nothing. Zero means no cache, which suits a store in this
	// process; for Redis the gateway keeps 100,000 refusals
	// (DefaultDenyCacheSize).
	DenyCacheSize int
	// Tracer, if set, records a span for each store call, a child of the
	// span in the call's context (see storeSpan); nil records none, at no
	// cost.
	Tracer trace.Tracer
	// JWKS caches the signing keys of a policy that verifies bearer JWTs
	// (policy.JWT); nil means the process's (jwtauth.Shared).
	JWKS *jwtauth.Keys
	// Recording, if set, records every call decided (of the subjects it
	// samples), for package simulate to decide again under another
	// policy.
	Recording *Recording
	// Limiters keeps the upstreams' adaptive concurrency limits across
	// engines (a gateway's reloads); nil means the engine's own.
	Limiters *Limiters
	// DecideOnly makes an engine that decides calls whose subjects it is
	// given (Check) and identifies none: it makes no JWT verifier, so its
	// policy's JWKS URL is never fetched (Identify treats a bearer JWT as
	// a policy without jwt does). For replays (package simulate), whose
	// policy may come from a request.
	DecideOnly bool
}

// DefaultDenyCacheSize is how many refusals the gateway's engine caches
// in front of Redis.
const DefaultDenyCacheSize = 100_000

// Fallbacker is a store that can decide locally while it is unavailable
// (see package resilience).
type Fallbacker interface {
	Fallback(ctx context.Context, req tollgate.Request) (tollgate.Decision, error)
	FallbackAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error)
	// Owes reports whether req's key has admissions of the fallback the
	// store has not been charged for yet: the deny cache keeps no refusal
	// of such a key, which is about what it owes as much as its budget.
	Owes(req tollgate.Request) bool
}

// Engine decides calls under one policy. It is safe for concurrent use.
type Engine struct {
	opts     Options
	policy   *policy.Policy
	log      *slog.Logger
	metrics  *Metrics
	penalty  *penaltyBox
	store    tollgate.Store
	fallback Fallbacker // nil: no local fallback
	deny     *denyCache // nil: no deny cache
	hasher   *identity.Hasher
	items    map[*policy.Budget]string // RateLimit-Policy items of the policy's budgets
	// holdTTL is how long a login attempt holds its places if it is never
	// settled: longer than the service behind may take to answer.
	holdTTL  time.Duration
	tracer   trace.Tracer      // nil: no spans
	jwt      *jwtauth.Verifier // nil: bearer JWTs are not verified
	limiters *Limiters         // the upstreams' adaptive limits
}

// New returns an engine deciding under opts.Policy through opts.Store.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("creating engine: Store is required")
	}
	upstream := time.Duration(0)
	if opts.Policy != nil {
		upstream = opts.Policy.UpstreamTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	e := &Engine{
		opts:     opts,
		policy:   opts.Policy,
		log:      slog.New(logsample.New(logger.Handler(), logsample.Options{PerSecond: opts.LogRefusalsPerSecond})),
		metrics:  opts.Metrics,
		penalty:  &penaltyBox{until: map[string]time.Time{}},
		store:    opts.Store,
		holdTTL:  min(algo.MaxHoldTTL, max(upstream, 30*time.Second)+10*time.Second),
		tracer:   opts.Tracer,
		limiters: opts.Limiters,
	}
	if e.limiters == nil {
		e.limiters = NewLimiters()
	}
	e.fallback, _ = opts.Store.(Fallbacker)
	if opts.Policy != nil {
		if err := e.usePolicy(opts); err != nil {
			return nil, fmt.Errorf("creating engine: %w", err)
		}
	}
	if opts.DenyCacheSize > 0 {
		e.deny = newDenyCache(opts.DenyCacheSize)
	}
	return e, nil
}

// usePolicy readies what e derives from opts.Policy: its pseudonyms, the
// JWT verifier, each budget's RateLimit-Policy item, and (with metrics)
// every budget's error and fallback series, at zero from the start so
// that alerts on their rate see the first one.
func (e *Engine) usePolicy(opts Options) error {
	p := opts.Policy
	e.hasher = identity.NewHasher(p.Secret)
	if p.JWT != nil && !opts.DecideOnly {
		v, err := jwtauth.NewVerifier(p.JWT, opts.JWKS, opts.Now)
		if err != nil {
			return err
		}
		e.jwt = v
	}
	e.items = map[*policy.Budget]string{}
	for _, b := range p.Budgets() {
		e.items[b] = makePolicyItem(b)
		if m := opts.Metrics; m != nil {
			m.StoreErrors.WithLabelValues(b.Name)
			m.Fallbacks.WithLabelValues(b.Name, "fail_open")
			m.Fallbacks.WithLabelValues(b.Name, "fail_closed")
		}
	}
	return nil
}

// Policy returns the policy the engine decides under.
func (e *Engine) Policy() *policy.Policy { return e.policy }

// Check decides c; the engine must have a Policy. A refused call is charged nothing, whichever check
// refuses it: the checks whose state can be given back come first, each
// given back if a later one refuses (the concurrency slot, the login
// guard's holds, a place held in the route's global budget); the one step
// that cannot be undone comes last, one atomic decision on the subject's
// (and tenant's) limits, all charged or none. Only if it admits is the
// held global place charged (the hold guarantees it fits). Shadow budgets
// are evaluated in [Verdict.Done], once the service behind has answered.
//
// The verdict of an admitted call (Allowed or FailOpen) holds what lasts
// while the call is served: its caller must call Done when the call
// ends, and Answered as soon as the service's status is known.
func (e *Engine) Check(ctx context.Context, c Call) *Verdict {
	v := e.check(ctx, c)
	e.record(c, v)
	return v
}

func (e *Engine) check(ctx context.Context, c Call) *Verdict {
	v := &Verdict{e: e, Report: -1, group: c.group(), plan: planName(c.Subject.Plan)}
	if c.Key != KeyNone && !e.checkKey(ctx, v, c) {
		return v
	}
	ch, cost := e.plan(c)
	steps := policy.UnmatchedSteps
	if c.Route != nil {
		steps = c.Route.Steps
	}
	takeSteps(ctx, &taking{e: e, v: v, c: c, ch: ch, cost: cost}, steps)
	return v
}

// plan returns the charges a call makes, and its cost: the subject's
// plan's limits, or the route's own limit in their place or beside them
// (counted per the subject or what the route keys it by), the route's
// candidate budget and its global one in shadow. An unlimited subject is
// charged none of them.
func (e *Engine) plan(c Call) (charges, int64) {
	cost := c.cost()
	var ch charges
	if c.Subject.Unlimited {
		// Counted, never refused by a rate limit: no budget is charged,
		// and only the guards (check) apply.
		return ch, cost
	}
	e.limitCharges(&ch, &c, cost)
	if route := c.Route; route != nil {
		if b := route.Candidate; b != nil {
			ch.add(b, b.Request(c.Subject.ID, "", cost))
		}
		if b := route.Global; b != nil && b.Shadow {
			ch.add(b, b.Request("route", "", cost))
		}
	}
	return ch, cost
}

// limitCharges sets ch to the charges of c's rate limits: its subject's
// plan, or the route's own limit in its place or beside it, counted per
// the subject or what the route keys it by.
func (e *Engine) limitCharges(ch *charges, c *Call, cost int64) {
	route, plan := c.Route, c.Subject.Plan
	var extra *policy.Plan // a route limit charged beside the plan's
	ks := c.Subject        // who the route's own limit is counted per
	if route != nil && route.Limit != nil {
		if route.LimitAdds {
			extra = route.Limit
		} else {
			plan = route.Limit
		}
		if c.LimitKey != "" {
			ks.ID = c.LimitKey
		}
	}
	if plan != nil {
		who := c.Subject
		if route != nil && plan == route.Limit {
			who = ks
		}
		*ch = e.plannedCharges(plan, who, cost, c.Tokens)
	}
	if extra != nil {
		// In the plan's group (its tenant's, if it has one, else the
		// subject's), so that one atomic call decides the route's limit
		// and the plan's; a keyed limit that adds is counted per subject
		// too (policy), so it belongs to the subject's group.
		tag := chargeTag(plan, c.Subject)
		if tag == "" && ks.ID != c.Subject.ID {
			tag = c.Subject.ID
		}
		for _, b := range extra.Limits {
			ch.add(b, b.Request(ks.ID, tag, cost)) // a route's limit counts requests
		}
	}
}

// unlimitedBudget is the budget label a call no rate limit applies to is
// counted under: "unlimited" for an unlimited subject, else "-" (every
// limit in shadow).
func unlimitedBudget(s Subject) string {
	if s.Unlimited {
		return "unlimited"
	}
	return "-"
}

// charges are the budgets a call is decided under and their store
// requests: the enforced ones, decided together, and the shadow ones,
// each decided on its own after the call.
type charges struct {
	budgets []*policy.Budget
	reqs    []tollgate.Request
	shadow  []shadowCharge
}

type shadowCharge struct {
	budget *policy.Budget
	req    tollgate.Request
}

func (ch *charges) add(b *policy.Budget, req tollgate.Request) {
	if b.Shadow {
		ch.shadow = append(ch.shadow, shadowCharge{b, req})
		return
	}
	ch.budgets = append(ch.budgets, b)
	ch.reqs = append(ch.reqs, req)
}

// plannedCharges returns what charging cost to sub under plan takes: one
// request per limit of the plan that applies to the call (a token
// budget's charging the tokens estimated, on a token route: see
// budgetRequest) and, for a subject with a tenant, one for the tenant's
// budget, all in the tenant's group so one call decides them.
func (e *Engine) plannedCharges(plan *policy.Plan, sub Subject, cost int64, tokens *Tokens) charges {
	tag := chargeTag(plan, sub)
	n := len(plan.Limits) + len(plan.Tenant)
	ch := charges{budgets: make([]*policy.Budget, 0, n), reqs: make([]tollgate.Request, 0, n)}
	for _, b := range plan.Limits {
		if req, ok := budgetRequest(b, sub.ID, tag, cost, tokens); ok {
			ch.add(b, req)
		}
	}
	if tag != "" {
		for _, b := range plan.Tenant {
			if req, ok := budgetRequest(b, tag, tag, cost, tokens); ok {
				ch.add(b, req)
			}
		}
	}
	return ch
}

// chargeTag is the group sub's charges under plan are decided in: its
// tenant's when the plan has a tenant budget, else its own ("").
func chargeTag(plan *policy.Plan, sub Subject) string {
	if plan != nil && len(plan.Tenant) > 0 && sub.Tenant != "" {
		return sub.Tenant
	}
	return ""
}

// refuse records that b's decision d refused the call.
func (e *Engine) refuse(ctx context.Context, v *Verdict, sub Subject, b *policy.Budget, d tollgate.Decision) {
	v.Outcome, v.Reason, v.RetryAfter = Refused, ReasonRate, d.RetryAfter
	e.count(b.Name, v.group, v.plan, "refused")
	if e.metrics != nil {
		e.metrics.TopRefused.Add(sub.ID)
	}
	e.logSampled(ctx, slog.LevelInfo, "refused", sub, b.Name, v.group, slog.Int64("retry_after_s", retrySeconds(d.RetryAfter)))
}

// mostRestrictive picks the decision to report: among refusals the one
// that lasts longest, else the least remaining.
func mostRestrictive(ds []tollgate.Decision) int {
	best := 0
	for i := 1; i < len(ds); i++ {
		if restricts(ds[i], ds[best]) {
			best = i
		}
	}
	return best
}

// restricts reports whether d is more restrictive than b: a refusal than
// an admission, of two refusals the one that lasts longer, of two
// admissions the one with less left (or as much, for longer).
func restricts(d, b tollgate.Decision) bool {
	if d.Allowed != b.Allowed {
		return !d.Allowed
	}
	if !d.Allowed {
		return d.RetryAfter > b.RetryAfter
	}
	return d.Remaining < b.Remaining || d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter
}

// checkKey applies the invalid-key limit to a call that presented an API
// key. An address over its budget gets no answer about any key, valid or
// not; an invalid key is charged to the address's budget; a bearer JWT
// that cannot be checked (KeyUnchecked) fails closed, charged nothing:
// the caller is not at fault. It reports whether the call goes on (a
// valid key from an address in good standing); otherwise the verdict is
// final.
func (e *Engine) checkKey(ctx context.Context, v *Verdict, c Call) bool {
	ik := e.policy.InvalidKey
	client := c.Subject.Client
	if until, ok := e.penalty.get(client, e.now()); ok {
		e.count(ik.Name, v.group, "-", "refused")
		v.Outcome, v.Reason, v.RetryAfter = Refused, ReasonInvalidKeys, until.Sub(e.now())
		return false
	}
	switch c.Key {
	case KeyValid:
		return true
	case KeyUnchecked:
		e.count("jwks", v.group, v.plan, "fail_closed")
		v.Outcome, v.Reason, v.Err, v.RetryAfter = FailClosed, ReasonKeysUnavailable, jwtauth.ErrKeysUnavailable, time.Second
		return false
	}
	ds, err := e.decide(ctx, ik.Name, []tollgate.Request{ik.Request(client, "", 1)})
	if err == nil && !ds[0].Allowed {
		d := ds[0]
		e.penalty.set(client, e.now().Add(d.RetryAfter))
		e.count(ik.Name, v.group, "-", "refused")
		e.logSampled(ctx, slog.LevelWarn, "refused: too many invalid API keys", Subject{Kind: "ip", ID: client}, ik.Name, v.group,
			slog.Int64("retry_after_s", retrySeconds(d.RetryAfter)))
		v.Outcome, v.Reason, v.RetryAfter = Refused, ReasonInvalidKeys, d.RetryAfter
		return false
	}
	e.count(ik.Name, v.group, "-", "invalid_key")
	v.Outcome, v.Reason = Invalid, ReasonInvalidKey
	return false
}

// clockTime is the explicit decision time, or zero for the store's clock.
func (e *Engine) clockTime() time.Time {
	if e.opts.Now != nil {
		return e.opts.Now()
	}
	return time.Time{}
}

// now is the engine's clock.
func (e *Engine) now() time.Time {
	if e.opts.Now != nil {
		return e.opts.Now()
	}
	return time.Now()
}

func (e *Engine) count(budget, group, plan, outcome string) {
	if mt := e.metrics; mt != nil {
		if plan == "" {
			plan = "-"
		}
		mt.Decisions.WithLabelValues(budget, group, plan, outcome).Inc()
	}
}

func (e *Engine) countFallback(budget, mode string) {
	if mt := e.metrics; mt != nil {
		mt.Fallbacks.WithLabelValues(budget, mode).Inc()
	}
}

// logSampled logs an event about sub; like every line of the engine's
// logger, it is sampled per message.
func (e *Engine) logSampled(ctx context.Context, level slog.Level, msg string, sub Subject, budget, group string, attrs ...slog.Attr) {
	// On the stack: a line the sampler drops costs no allocation.
	var buf [8]slog.Attr
	all := append(buf[:0],
		slog.String("subject", sub.ID),
		slog.String("subject_kind", sub.Kind),
		slog.String("budget", budget),
		slog.String("route_group", group))
	e.log.LogAttrs(ctx, level, msg, append(all, attrs...)...)
}

// retrySeconds is d in whole seconds, rounded up, and at least 1: what a
// Retry-After of a refusal says.
func retrySeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}
