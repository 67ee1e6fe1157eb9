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
	m.shadow(r.Context(), shadowB, shadowR, group)
	if len(reqs) == 0 {
		// Every limit here is in shadow: the request passes untouched.
		m.count("-", group, sub.Plan.Name, "allowed")
		m.pass(w, r, route, sub, tollgate.Decision{Allowed: true}, clean)
		return
	}
	ds, err := m.decideAll(r.Context(), reqs)
	if err != nil {
		var ok bool
		if ds, ok = m.storeFailed(w, r, err, route, sub, budgets, group, reqs); !ok {
			return
		}
	}
	// The route's global budget lives in another slot: charged second,
	// only for requests the subject's own limits admitted.
	if route != nil && route.Global != nil && !route.Global.Shadow && tollgate.Admitted(ds) {
		g := route.Global
		greq := []tollgate.Request{{Policy: g.StoreName, Subject: "route", Limit: g.Limit, Cost: cost}}
		gds, err := m.decideAll(r.Context(), greq)
		if err != nil {
			var ok bool
			if gds, ok = m.storeFailed(w, r, err, route, sub, []*policy.Budget{g}, group, greq); !ok {
				return
			}
		}
		budgets, ds = append(budgets, g), append(ds, gds...)
	}
	i := mostRestrictive(ds)
	b, d := budgets[i], ds[i]
	setHeaders(w.Header(), m.items, budgets, b, d, p.LegacyHeaders)
	if !tollgate.Admitted(ds) {
		m.count(b.Name, group, sub.Plan.Name, "refused")
		if mt := m.opts.Metrics; mt != nil {
			mt.TopRefused.Add(sub.ID)
		}
		retry := max(1, ceilSeconds(d.RetryAfter))
		m.logSampled(r.Context(), slog.LevelInfo, "refused", sub, b.Name, group, slog.Int64("retry_after_s", retry))
		WriteProblem(w, Problem{Type: ProblemRateLimited, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("The %q limit of %d per %v is used up; retry after %d s.", b.Name, b.Limit.Rate, b.Limit.Period, retry)})
		return
	}
	m.count(b.Name, group, sub.Plan.Name, "allowed")
	// A shaping limit admits a request on condition that it waits.
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
	if route != nil && route.Concurrency != nil {
		release, ok := m.acquireSlot(w, r, route, sub)
		if !ok {
			return
		}
		defer release()
	}
	if route != nil && route.Login != nil {
		// The guard comes after the route's own limits, which refuse a
		// flood before its bodies are read.
		login, ok := m.loginBegin(w, r, route.Login, sub)
		if !ok {
			return
		}
		defer login.finish(r.Context(), 0)
		w = &statusRecorder{ResponseWriter: w, onStatus: func(status int) { login.finish(r.Context(), status) }}
	}
	m.pass(w, r, route, sub, d, clean)
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

// pass hands the request on, with the headers forwardHeaders allows.
func (m *middleware) pass(w http.ResponseWriter, r *http.Request, route *policy.Route, sub Subject, d tollgate.Decision, clean string) {
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
