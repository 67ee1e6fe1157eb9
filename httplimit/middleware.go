// Package httplimit is Tollgate's net/http middleware: it finds who a
// request comes from (API key, then a user id from a trusted auth proxy,
// then the client IP), picks the limit (the route's, else the subject's
// plan), asks the store, and either passes the request on with
// RateLimit/RateLimit-Policy headers or answers 429 with Retry-After and an
// application/problem+json body, without calling the handler behind.
//
// Requests with an unknown or malformed API key get 401, and those attempts
// are limited per client IP (policy invalid_key_limit): once an IP is over
// it, every request of its that carries a key is refused with 429, valid
// key or not, so keys cannot be guessed at speed.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/logsample"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/resilience"
)

// Options configures the middleware. Policy and Store are required; the
// zero value of every other field is the default.
type Options struct {
	Policy *policy.Policy
	Store  tollgate.Store
	// Logger receives refusals (sampled) and store errors; nil means
	// slog.Default(). Subjects are logged only as HMAC pseudonyms.
	Logger *slog.Logger
	// Metrics, if set, counts decisions and store calls.
	Metrics *Metrics
	// RequireRoute answers requests that match no route with 404 instead
	// of limiting them under the subject's plan at cost 1.
	RequireRoute bool
	// LogRefusalsPerSecond bounds the log lines of each repeated event
	// (a refusal, a store error; default 1 per second after a burst of 10)
	// when Logger is not already sampled (see package internal/logsample:
	// the gateway's is).
	LogRefusalsPerSecond float64
	// Now, if set, is the clock every decision is made at (tests walk it);
	// nil means the store's own clock (Redis TIME for Redis).
	Now func() time.Time
}

// Subject is who a request was attributed to.
type Subject struct {
	Kind string // "key", "user" or "ip"
	// ID is the HMAC pseudonym used in store keys and logs.
	ID string
	// Plan is the subject's plan (nil for a request refused before one
	// applied).
	Plan   *policy.Plan
	Key    *policy.APIKey // for Kind "key"
	Client string         // client IP group, for the invalid-key limit
	// Tenant is the pseudonym of the key's tenant ("" if none).
	Tenant string
	// Addr is the client address the request was charged to.
	Addr netip.Addr

	chain       []netip.Addr // the forwarding chain vouched for (identity.ClientChain)
	trustedPeer bool         // the immediate peer is a trusted proxy
}

// Info is what the middleware decided, for the handler behind it.
type Info struct {
	Route    *policy.Route // nil when no route matched
	Subject  Subject
	Decision tollgate.Decision
	Path     string // the cleaned request path the route was matched on
}

type ctxKey struct{}

// FromContext returns the middleware's Info for a request it passed on.
func FromContext(ctx context.Context) (*Info, bool) {
	i, ok := ctx.Value(ctxKey{}).(*Info)
	return i, ok
}

type middleware struct {
	opts    Options
	next    http.Handler
	trusted identity.TrustedProxies
	hasher  *identity.Hasher
	log     *slog.Logger
	penalty *penaltyBox
	items   policyItems
	// See forwardHeaders: headers keyed by headerKey that a client may
	// not remove or shadow, and by canonical name those always replaced
	// and those believed only from trusted proxies.
	protected, replaced, trustedOnly map[string]bool
	// holdTTL is how long a login attempt holds its places if it is never
	// settled: longer than the service behind may take to answer.
	holdTTL time.Duration
}

// Middleware returns a function wrapping handlers with rate limiting.
func Middleware(opts Options) (func(http.Handler) http.Handler, error) {
	if opts.Policy == nil || opts.Store == nil {
		return nil, errors.New("creating middleware: Policy and Store are required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = slog.New(logsample.New(logger.Handler(), logsample.Options{PerSecond: opts.LogRefusalsPerSecond}))
	base := &middleware{
		opts:        opts,
		trusted:     opts.Policy.Trusted,
		hasher:      identity.NewHasher(opts.Policy.Secret),
		log:         logger,
		items:       newPolicyItems(opts.Policy),
		protected:   protected(opts.Policy.UserHeader),
		replaced:    canonicalSet(addressHeaders),
		trustedOnly: canonicalSet(append(slices.Clone(proxyHeaders), opts.Policy.UserHeader)),
		holdTTL:     min(algo.MaxHoldTTL, max(opts.Policy.UpstreamTimeout, 30*time.Second)+10*time.Second),
	}
	return func(next http.Handler) http.Handler {
		m := *base
		m.next = next
		m.penalty = &penaltyBox{until: map[string]time.Time{}}
		return &m
	}, nil
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := m.opts.Policy
	if !strings.HasPrefix(r.URL.Path, "/") && r.URL.Path != "" {
		WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the request path must be absolute"})
		return
	}
	if why := policy.AmbiguousPath(r.URL.Path); why != "" {
		WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: why})
		return
	}
	clean := policy.CleanPath(r.URL.Path)
	route := p.Match(r.Method, clean)
	if route == nil && m.opts.RequireRoute {
		WriteProblem(w, Problem{Type: ProblemNotFound, Status: http.StatusNotFound, Detail: "no route matches this request"})
		return
	}
	group := "unmatched"
	if route != nil {
		group = route.Group
	}

	sub, ok := m.identify(w, r, group)
	if !ok {
		return
	}
	plan, cost := sub.Plan, int64(1)
	if route != nil {
		cost = route.Cost
		if route.Limit != nil {
			plan = route.Limit
		}
	}
	budgets, reqs := requests(plan, sub, cost)
	budgets, reqs, shadowB, shadowR := splitShadow(budgets, reqs)
	if route != nil && route.Candidate != nil {
		c := route.Candidate
		shadowB = append(shadowB, c)
		shadowR = append(shadowR, tollgate.Request{Policy: c.StoreName, Subject: sub.ID, Limit: c.Limit, Cost: cost})
	}
	if route != nil && route.Global != nil && route.Global.Shadow {
		g := route.Global
		shadowB = append(shadowB, g)
		shadowR = append(shadowR, tollgate.Request{Policy: g.StoreName, Subject: "route", Limit: g.Limit, Cost: cost})
	}
	if len(reqs) == 0 {
		// Every limit here is in shadow: the request passes untouched.
		m.shadow(r.Context(), shadowB, shadowR, group)
		m.count("-", group, sub.Plan.Name, "allowed")
		m.pass(w, r, route, sub, tollgate.Decision{Allowed: true}, clean)
		return
	}
	// A refused request is charged nothing, whichever check refuses it.
	// So the checks whose state can be given back come first, each given
	// back (deferred) if a later one refuses: the concurrency slot, the
	// login guard's holds, a held place in the route's global budget.
	// The one step that cannot be undone comes last: one atomic decision
	// on the subject's (and tenant's) limits, all charged or none. Only
	// if it admits is the held global place charged (the hold guarantees
	// it fits), and then the shadow budgets.
	if route != nil && route.Concurrency != nil {
		release, ok := m.acquireSlot(w, r, route, sub)
		if !ok {
			return
		}
		defer release()
	}
	var rec *statusRecorder
	if route != nil && route.Login != nil {
		login, ok := m.loginBegin(w, r, route.Login, sub)
		if !ok {
			return
		}
		defer login.finish(r.Context(), 0)
		// Only the upstream's answer settles the attempt (see pass); a
		// refusal below gives its holds back.
		rec = &statusRecorder{ResponseWriter: w, onStatus: func(status int) { login.finish(r.Context(), status) }}
	}
	var global *globalHold
	if route != nil && route.Global != nil && !route.Global.Shadow {
		var ok bool
		if global, ok = m.holdGlobal(w, r, route, sub, group, cost); !ok {
			return
		}
		defer global.giveBack(r.Context())
	}
	out := http.ResponseWriter(w) // where the request is passed on
	if rec != nil {
		out = rec
	}
	ds, err := m.decideAll(r.Context(), reqs)
	if err != nil {
		var ok bool
		if ds, ok = m.storeFailed(out, r, err, route, sub, budgets, group, reqs); !ok {
			return
		}
	}
	if global != nil && tollgate.Admitted(ds) {
		gd, ok := global.charge(out, r, route, sub, group)
		if !ok {
			return
		}
		budgets, ds = append(budgets, route.Global), append(ds, gd)
	}
	i := mostRestrictive(ds)
	b, d := budgets[i], ds[i]
	setHeaders(w.Header(), m.items, budgets, b, d, p.LegacyHeaders)
	if !tollgate.Admitted(ds) {
		m.refuse(w, r, sub, b, d, group)
		return
	}
	m.count(b.Name, group, sub.Plan.Name, "allowed")
	m.shadow(r.Context(), shadowB, shadowR, group)
	// A shaping limit admits a request on condition that it waits (holding
	// its slot, if it took one: it is in flight).
	var delay time.Duration
	for _, x := range ds {
		delay = max(delay, x.Delay)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the client gave up while queued
		}
	}
	m.pass(out, r, route, sub, d, clean)
}

// refuse answers 429 for the rate limit b, whose decision d refused the
// request.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, sub Subject, b *policy.Budget, d tollgate.Decision, group string) {
	m.count(b.Name, group, sub.Plan.Name, "refused")
	if mt := m.opts.Metrics; mt != nil {
		mt.TopRefused.Add(sub.ID)
	}
	retry := max(1, ceilSeconds(d.RetryAfter))
	m.logSampled(r.Context(), slog.LevelInfo, "refused", sub, b.Name, group, slog.Int64("retry_after_s", retry))
	WriteProblem(w, Problem{Type: ProblemRateLimited, Status: http.StatusTooManyRequests, RetryAfter: retry,
		Detail: fmt.Sprintf("The %q limit of %d per %v is used up; retry after %d s.", b.Name, b.Limit.Rate, b.Limit.Period, retry)})
}

// globalHoldTTL bounds how long a place held in a route's global budget
// outlives its request when the hold is never settled (the gateway
// stopped, or the store failed between the two calls): the place is
// taken, though nothing was charged, for at most this long.
const globalHoldTTL = 5 * time.Second

// globalHold is a request's place in its route's global budget, which
// lives in another slot than the subject's limits and so cannot be
// decided in the same atomic call. The place is held first (Reserve: it
// admits only if the budget could take every place held and this one,
// and charges nothing), then charged if the subject's limits admit the
// request, else given back; so a request refused by either side is
// charged by neither, and the global budget never admits more than it
// would one request at a time. (Requests at once may be refused while
// places held for requests their own limits then refuse fill the budget:
// stricter for that moment, never looser.) Where the store cannot hold
// places, or could not (unavailable), the budget is decided after the
// subject's limits, as a charge that stands if it refuses.
type globalHold struct {
	m       *middleware
	req     tollgate.Request
	hold    tollgate.Hold
	rs      tollgate.Reserver // nil: no place held
	reserve tollgate.Decision // the reservation's decision
	settled bool
}

// holdGlobal holds the request's place in route's global budget. On
// refusal it has answered the request and returns false.
func (m *middleware) holdGlobal(w http.ResponseWriter, r *http.Request, route *policy.Route, sub Subject, group string, cost int64) (*globalHold, bool) {
	g := route.Global
	gh := &globalHold{m: m, req: tollgate.Request{Policy: g.StoreName, Subject: "route", Limit: g.Limit, Cost: cost}}
	rs, ok := m.opts.Store.(tollgate.Reserver)
	if !ok {
		return gh, true
	}
	gh.req.Now = m.clockTime()
	gh.hold = tollgate.Hold{ID: newLeaseID(), TTL: globalHoldTTL}
	d, err := rs.Reserve(r.Context(), gh.req, gh.hold)
	switch {
	case err != nil && algo.IsInvalid(err):
		_, ok := m.storeFailed(w, r, err, route, sub, []*policy.Budget{g}, group, []tollgate.Request{gh.req})
		return nil, ok
	case err != nil:
		// Decided after the subject's limits instead (see globalHold). A
		// reservation that reached the store late expires by its TTL.
		return gh, true
	case !d.Allowed:
		setHeaders(w.Header(), m.items, []*policy.Budget{g}, g, d, m.opts.Policy.LegacyHeaders)
		m.refuse(w, r, sub, g, d, group)
		return nil, false
	}
	gh.rs, gh.reserve = rs, d
	return gh, true
}

// charge charges the request's place in the global budget, once the
// subject's limits admitted it, and returns the budget's decision; or,
// with no place held, decides the budget now. On failure it has answered
// the request and returns false.
func (gh *globalHold) charge(w http.ResponseWriter, r *http.Request, route *policy.Route, sub Subject, group string) (tollgate.Decision, bool) {
	m := gh.m
	if gh.rs == nil {
		greq := []tollgate.Request{gh.req}
		gds, err := m.decideAll(r.Context(), greq)
		if err != nil {
			var ok bool
			if gds, ok = m.storeFailed(w, r, err, route, sub, []*policy.Budget{route.Global}, group, greq); !ok {
				return tollgate.Decision{}, false
			}
		}
		return gds[0], true
	}
	gh.settled = true
	req := gh.req
	req.Now = m.clockTime()
	d, err := gh.rs.Settle(context.WithoutCancel(r.Context()), req, gh.hold, true)
	if err != nil {
		// The place stays held until the hold's TTL, in place of the
		// charge: the request is admitted, as its reservation said.
		m.logSampled(r.Context(), slog.LevelWarn, "charging a held place in a global budget (it stays held until it expires)", sub,
			route.Global.Name, group, slog.String("error", err.Error()))
		return gh.reserve, true
	}
	// Refused only if the hold expired before it was charged.
	return d, true
}

// giveBack ends a place held and not charged.
func (gh *globalHold) giveBack(ctx context.Context) {
	if gh.rs == nil || gh.settled {
		return
	}
	gh.settled = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	req := gh.req
	req.Now = gh.m.clockTime()
	if _, err := gh.rs.Settle(ctx, req, gh.hold, false); err != nil {
		gh.m.log.LogAttrs(ctx, slog.LevelWarn, "giving back a held place in a global budget (it expires by itself)", slog.String("error", err.Error()))
	}
}

// requests builds the store requests that charge cost to sub under plan:
// one per limit of the plan and, for a subject with a tenant, one for the
// tenant's budget, all in the tenant's group so one call decides them.
func requests(plan *policy.Plan, sub Subject, cost int64) ([]*policy.Budget, []tollgate.Request) {
	tag := ""
	if plan.Tenant != nil && sub.Tenant != "" {
		tag = sub.Tenant
	}
	budgets := make([]*policy.Budget, 0, len(plan.Limits)+1)
	reqs := make([]tollgate.Request, 0, len(plan.Limits)+1)
	for _, b := range plan.Limits {
		budgets = append(budgets, b)
		reqs = append(reqs, tollgate.Request{Policy: b.StoreName, Subject: sub.ID, Tag: tag, Limit: b.Limit, Cost: cost})
	}
	if tag != "" {
		budgets = append(budgets, plan.Tenant)
		reqs = append(reqs, tollgate.Request{Policy: plan.Tenant.StoreName, Subject: tag, Tag: tag, Limit: plan.Tenant.Limit, Cost: cost})
	}
	return budgets, reqs
}

// splitShadow separates the shadow budgets (and their requests) from the
// enforced ones. Without shadow budgets, the usual case, it returns its
// arguments as they are.
func splitShadow(budgets []*policy.Budget, reqs []tollgate.Request) (eb []*policy.Budget, er []tollgate.Request, sb []*policy.Budget, sr []tollgate.Request) {
	if !slices.ContainsFunc(budgets, func(b *policy.Budget) bool { return b.Shadow }) {
		return budgets, reqs, nil, nil
	}
	for i, b := range budgets {
		if b.Shadow {
			sb, sr = append(sb, b), append(sr, reqs[i])
		} else {
			eb, er = append(eb, b), append(er, reqs[i])
		}
	}
	return eb, er, sb, sr
}

// shadow evaluates shadow budgets exactly as if they were enforced (each
// charged when it would admit) and counts what they would have refused; it
// never touches the response.
func (m *middleware) shadow(ctx context.Context, budgets []*policy.Budget, reqs []tollgate.Request, group string) {
	for i, req := range reqs {
		ds, err := m.decideAll(ctx, []tollgate.Request{req})
		if err != nil {
			m.log.LogAttrs(ctx, slog.LevelWarn, "shadow decision failed", slog.String("policy", budgets[i].Name), slog.String("error", err.Error()))
			continue
		}
		outcome := "allowed"
		if !ds[0].Allowed {
			outcome = "refused"
		}
		if mt := m.opts.Metrics; mt != nil {
			mt.Shadow.WithLabelValues(budgets[i].Name, group, outcome).Inc()
		}
	}
}

// mostRestrictive picks the decision to report in RateLimit: among
// refusals the one that lasts longest, else the least remaining.
func mostRestrictive(ds []tollgate.Decision) int {
	best := 0
	for i, d := range ds[1:] {
		i++
		b := ds[best]
		switch {
		case !d.Allowed && b.Allowed:
			best = i
		case !d.Allowed && !b.Allowed && d.RetryAfter > b.RetryAfter:
			best = i
		case d.Allowed && b.Allowed && (d.Remaining < b.Remaining || d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter):
			best = i
		}
	}
	return best
}

// decideAll asks the store: a single request through Allow (where the deny
// cache works), a group through AllowAll.
func (m *middleware) decideAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error) {
	start := time.Now()
	if m.opts.Now != nil {
		now := m.opts.Now()
		for i := range reqs {
			reqs[i].Now = now
		}
	}
	var ds []tollgate.Decision
	var err error
	if len(reqs) == 1 && reqs[0].Tag == "" {
		var d tollgate.Decision
		d, err = m.opts.Store.Allow(ctx, reqs[0])
		ds = []tollgate.Decision{d}
	} else if ms, ok := m.opts.Store.(tollgate.MultiStore); ok {
		ds, err = ms.AllowAll(ctx, reqs)
	} else {
		err = errors.New("deciding several limits: the store cannot decide them together")
	}
	if mt := m.opts.Metrics; mt != nil {
		mt.StoreLatency.Observe(time.Since(start).Seconds())
		if err != nil {
			mt.StoreErrors.WithLabelValues(reqs[0].Policy).Inc()
		}
	}
	return ds, err
}

// Fallbacker is a store that can decide locally while it is unavailable
// (see package resilience).
type Fallbacker interface {
	Fallback(ctx context.Context, req tollgate.Request) (tollgate.Decision, error)
	FallbackAll(ctx context.Context, reqs []tollgate.Request) ([]tollgate.Decision, error)
}

// storeFailed applies the route's failure policy when the store could not
// decide. It returns the decisions to go on with, or false when it has
// answered the request itself.
func (m *middleware) storeFailed(w http.ResponseWriter, r *http.Request, err error, route *policy.Route, sub Subject, budgets []*policy.Budget, group string, reqs []tollgate.Request) ([]tollgate.Decision, bool) {
	name := budgets[0].Name
	if algo.IsInvalid(err) {
		// The policy compiler rules these out; never let one through.
		m.log.LogAttrs(r.Context(), slog.LevelError, "invalid rate-limit request", slog.String("policy", name), slog.String("error", err.Error()))
		WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusInternalServerError, Detail: "the rate limit for this route is misconfigured"})
		return nil, false
	}
	if r.Context().Err() != nil {
		return nil, false // the client went away
	}
	if !errors.Is(err, resilience.ErrUnavailable) {
		m.logSampled(r.Context(), slog.LevelError, "store error", sub, name, group, slog.String("error", err.Error()))
	}
	failClosed := func() {
		m.fallback(name, "fail_closed")
		m.count(name, group, sub.Plan.Name, "fail_closed")
		WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, RetryAfter: 1,
			Detail: "the rate limiter is unavailable and this route does not proceed without it"})
	}
	if route != nil && route.FailClosed {
		failClosed()
		return nil, false
	}
	if fb, ok := m.opts.Store.(Fallbacker); ok {
		var ds []tollgate.Decision
		var ferr error
		if len(reqs) == 1 {
			var d tollgate.Decision
			d, ferr = fb.Fallback(r.Context(), reqs[0])
			ds = []tollgate.Decision{d}
		} else {
			ds, ferr = fb.FallbackAll(r.Context(), reqs)
		}
		if ferr == nil {
			m.fallback(name, "fail_open")
			return ds, true
		}
		if errors.Is(ferr, resilience.ErrUnavailable) {
			// A budget that fails closed on any route (a calendar quota;
			// see resilience.CalendarFallback).
			failClosed()
			return nil, false
		}
		m.logSampled(r.Context(), slog.LevelError, "local fallback failed, allowing", sub, name, group, slog.String("error", ferr.Error()))
	}
	m.fallback(name, "fail_open")
	m.count(name, group, sub.Plan.Name, "fail_open")
	m.pass(w, r, route, sub, tollgate.Decision{Allowed: true}, policy.CleanPath(r.URL.Path))
	return nil, false
}

func (m *middleware) fallback(policyName, mode string) {
	if mt := m.opts.Metrics; mt != nil {
		mt.Fallbacks.WithLabelValues(policyName, mode).Inc()
	}
}

// pass hands the request on, with the headers forwardHeaders allows. A
// login attempt's recorder (w) settles the attempt with the status the
// handler behind writes from here on.
func (m *middleware) pass(w http.ResponseWriter, r *http.Request, route *policy.Route, sub Subject, d tollgate.Decision, clean string) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.armed = true
	}
	info := &Info{Route: route, Subject: sub, Decision: d, Path: clean}
	r2 := r.WithContext(context.WithValue(r.Context(), ctxKey{}, info))
	r2.Header = m.forwardHeaders(r.Header, sub, sub.trustedPeer)
	m.next.ServeHTTP(w, r2)
}

// identify resolves the subject; on failure it has answered the request.
func (m *middleware) identify(w http.ResponseWriter, r *http.Request, group string) (Subject, bool) {
	p := m.opts.Policy
	ip, chain, ok := identity.ClientChain(r, m.trusted)
	if !ok {
		WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the client address cannot be determined"})
		return Subject{}, false
	}
	ipID := m.hasher.Hash("ip", identity.ClientGroup(ip))
	trustedPeer := m.peerTrusted(r)
	// base is what every subject of this request shares: where it comes
	// from.
	base := Subject{Client: ipID, Addr: ip, chain: chain, trustedPeer: trustedPeer}

	key, present, kerr := identity.APIKey(r.Header)
	if present || kerr != nil {
		return m.identifyKey(w, r, group, key, kerr, base)
	}
	if p.UserHeader != "" && trustedPeer {
		user, ok, err := identity.UserID(r.Header, p.UserHeader)
		if err != nil {
			WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the user id header is malformed"})
			return Subject{}, false
		}
		if ok {
			sub := base
			sub.Kind, sub.ID, sub.Plan = "user", m.hasher.Hash("u", user), p.UserPlan
			return sub, true
		}
	}
	sub := base
	sub.Kind, sub.ID, sub.Plan = "ip", ipID, p.AnonymousPlan
	return sub, true
}

func (m *middleware) identifyKey(w http.ResponseWriter, r *http.Request, group, key string, kerr error, base Subject) (Subject, bool) {
	ipID := base.Client
	p := m.opts.Policy
	ik := p.InvalidKey
	// An IP over its invalid-key budget gets no answer about any key.
	if until, ok := m.penalty.get(ipID, m.now()); ok {
		m.count(ik.Name, group, "-", "refused")
		retry := max(1, ceilSeconds(until.Sub(m.now())))
		WriteProblem(w, Problem{Type: ProblemTooManyFailed, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("Too many requests with invalid API keys from this address; retry after %d s.", retry)})
		return Subject{}, false
	}
	var k *policy.APIKey
	if kerr == nil {
		k = p.Keys[identity.KeyDigest(key)]
	}
	if k != nil {
		sub := base
		sub.Kind, sub.ID, sub.Plan, sub.Key = "key", m.hasher.Hash("k", k.ID), k.Plan, k
		if k.User != "" {
			// A key's user shares one budget with that user's other keys
			// and with the user id an auth proxy reports.
			sub.ID = m.hasher.Hash("u", k.User)
		}
		if k.Tenant != "" {
			sub.Tenant = m.hasher.Hash("t", k.Tenant)
		}
		return sub, true
	}
	sub := base
	sub.Kind, sub.ID = "ip", ipID
	ds, err := m.decideAll(r.Context(), []tollgate.Request{{Policy: ik.StoreName, Subject: ipID, Limit: ik.Limit, Cost: 1}})
	if err == nil && !ds[0].Allowed {
		d := ds[0]
		m.penalty.set(ipID, m.now().Add(d.RetryAfter))
		m.count(ik.Name, group, "-", "refused")
		retry := max(1, ceilSeconds(d.RetryAfter))
		m.logSampled(r.Context(), slog.LevelWarn, "refused: too many invalid API keys", sub, ik.Name, group, slog.Int64("retry_after_s", retry))
		WriteProblem(w, Problem{Type: ProblemTooManyFailed, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("Too many requests with invalid API keys from this address; retry after %d s.", retry)})
		return Subject{}, false
	}
	m.count(ik.Name, group, "-", "invalid_key")
	detail := "The API key is not valid."
	if kerr != nil {
		detail = "The API key is malformed."
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
	WriteProblem(w, Problem{Type: ProblemInvalidKey, Status: http.StatusUnauthorized, Detail: detail})
	return Subject{}, false
}

// clockTime is the explicit decision time, or zero for the store's clock.
func (m *middleware) clockTime() time.Time {
	if m.opts.Now != nil {
		return m.opts.Now()
	}
	return time.Time{}
}

// now is the middleware's clock.
func (m *middleware) now() time.Time {
	if m.opts.Now != nil {
		return m.opts.Now()
	}
	return time.Now()
}

// peerTrusted reports whether the immediate peer is a trusted proxy.
func (m *middleware) peerTrusted(r *http.Request) bool {
	peer, ok := identity.PeerAddr(r)
	return ok && m.trusted.Contains(peer)
}

func (m *middleware) count(policyName, group, plan, outcome string) {
	if mt := m.opts.Metrics; mt != nil {
		if plan == "" {
			plan = "-"
		}
		mt.Decisions.WithLabelValues(policyName, group, plan, outcome).Inc()
	}
}

// logSampled logs an event about sub; like every line of the middleware's
// logger, it is sampled per message.
func (m *middleware) logSampled(ctx context.Context, level slog.Level, msg string, sub Subject, policyName, group string, attrs ...slog.Attr) {
	// On the stack: a line the sampler drops costs no allocation.
	var buf [8]slog.Attr
	all := append(buf[:0],
		slog.String("subject", sub.ID),
		slog.String("subject_kind", sub.Kind),
		slog.String("policy", policyName),
		slog.String("route_group", group))
	m.log.LogAttrs(ctx, level, msg, append(all, attrs...)...)
}

// penaltyBox remembers, in this process, client IPs that are over their
// invalid-key budget, so their further key attempts are refused without a
// store call. It holds at most maxPenalties entries.
type penaltyBox struct {
	mu    sync.Mutex
	until map[string]time.Time
}

const maxPenalties = 100_000

func (b *penaltyBox) get(id string, now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.until[id]
	if ok && !now.Before(t) {
		delete(b.until, id)
		return t, false
	}
	return t, ok
}

func (b *penaltyBox) set(id string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.until[id]; !ok && len(b.until) >= maxPenalties {
		// Full: evict, of a few entries taken at random (map order), the
		// one that ends first, so that no request pays for a scan. An
		// address evicted early is still over its budget in the store:
		// its next invalid key is refused there and boxed again.
		var victim string
		var end time.Time
		n := 0
		for k, v := range b.until {
			if n == 0 || v.Before(end) {
				victim, end = k, v
			}
			if n++; n == 8 {
				break
			}
		}
		delete(b.until, victim)
	}
	b.until[id] = t
}
