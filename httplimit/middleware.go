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
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/identity"
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
	// LogRefusalsPerSecond bounds refusal log lines (default 1 per second,
	// bursts of 10); store errors share the budget.
	LogRefusalsPerSecond float64
}

// Subject is who a request was attributed to.
type Subject struct {
	Kind string // "key", "user" or "ip"
	// ID is the HMAC pseudonym used in store keys and logs.
	ID     string
	Plan   *policy.Plan
	Key    *policy.APIKey // for Kind "key"
	Client string         // client IP group, for the invalid-key limit
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
	logRate *rate.Limiter
	penalty *penaltyBox
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
	perSec := opts.LogRefusalsPerSecond
	if perSec <= 0 {
		perSec = 1
	}
	base := &middleware{
		opts:    opts,
		trusted: opts.Policy.Trusted,
		hasher:  identity.NewHasher(opts.Policy.Secret),
		log:     logger,
		logRate: rate.NewLimiter(rate.Limit(perSec), 10),
	}
	return func(next http.Handler) http.Handler {
		m := *base
		m.next = next
		m.penalty = &penaltyBox{until: map[string]time.Time{}}
		return &m
	}, nil
}

// cleanPath normalises the request path for route matching, keeping a
// trailing slash, so "/api/../login" is matched (and proxied) as "/login".
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := m.opts.Policy
	if !strings.HasPrefix(r.URL.Path, "/") && r.URL.Path != "" {
		WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the request path must be absolute"})
		return
	}
	clean := cleanPath(r.URL.Path)
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
	d, err := m.decide(r.Context(), plan, sub.ID, cost)
	if err != nil {
		var ok bool
		if d, ok = m.storeFailed(w, r, err, route, sub, plan, group, cost); !ok {
			return
		}
	}
	setHeaders(w.Header(), plan.Name, plan.Limit, d, p.LegacyHeaders)
	if !d.Allowed {
		m.count(plan.Name, group, sub.Plan.Name, "refused")
		retry := max(1, ceilSeconds(d.RetryAfter))
		m.logSampled(r.Context(), slog.LevelInfo, "refused", sub, plan, group, slog.Int64("retry_after_s", retry))
		WriteProblem(w, Problem{Type: ProblemRateLimited, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("The %q limit of %d per %v is used up; retry after %d s.", plan.Name, plan.Limit.Rate, plan.Limit.Period, retry)})
		return
	}
	m.count(plan.Name, group, sub.Plan.Name, "allowed")
	m.pass(w, r, route, sub, d, clean)
}

// Fallbacker is a store that can decide locally while it is unavailable
// (see package resilience).
type Fallbacker interface {
	Fallback(ctx context.Context, req tollgate.Request) (tollgate.Decision, error)
}

// storeFailed applies the route's failure policy when the store could not
// decide. It returns the decision to go on with, or false when it has
// answered the request itself.
func (m *middleware) storeFailed(w http.ResponseWriter, r *http.Request, err error, route *policy.Route, sub Subject, plan *policy.Plan, group string, cost int64) (tollgate.Decision, bool) {
	if errors.Is(err, tollgate.ErrCostExceedsBurst) || errors.Is(err, tollgate.ErrInvalidLimit) || errors.Is(err, tollgate.ErrNegativeCost) {
		// The policy compiler rules these out; never let one through.
		m.log.LogAttrs(r.Context(), slog.LevelError, "invalid rate-limit request", slog.String("policy", plan.Name), slog.String("error", err.Error()))
		WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusInternalServerError, Detail: "the rate limit for this route is misconfigured"})
		return tollgate.Decision{}, false
	}
	if r.Context().Err() != nil {
		return tollgate.Decision{}, false // the client went away
	}
	if !errors.Is(err, resilience.ErrUnavailable) {
		m.logSampled(r.Context(), slog.LevelError, "store error", sub, plan, group, slog.String("error", err.Error()))
	}
	if route != nil && route.FailClosed {
		m.fallback(plan.Name, "fail_closed")
		m.count(plan.Name, group, sub.Plan.Name, "fail_closed")
		WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, RetryAfter: 1,
			Detail: "the rate limiter is unavailable and this route does not proceed without it"})
		return tollgate.Decision{}, false
	}
	m.fallback(plan.Name, "fail_open")
	if fb, ok := m.opts.Store.(Fallbacker); ok {
		d, ferr := fb.Fallback(r.Context(), tollgate.Request{Policy: plan.StoreName, Subject: sub.ID, Limit: plan.Limit, Cost: cost})
		if ferr == nil {
			return d, true
		}
		m.logSampled(r.Context(), slog.LevelError, "local fallback failed, allowing", sub, plan, group, slog.String("error", ferr.Error()))
	}
	m.count(plan.Name, group, sub.Plan.Name, "fail_open")
	m.pass(w, r, route, sub, tollgate.Decision{Allowed: true}, cleanPath(r.URL.Path))
	return tollgate.Decision{}, false
}

func (m *middleware) fallback(policyName, mode string) {
	if mt := m.opts.Metrics; mt != nil {
		mt.Fallbacks.WithLabelValues(policyName, mode).Inc()
	}
}

func (m *middleware) pass(w http.ResponseWriter, r *http.Request, route *policy.Route, sub Subject, d tollgate.Decision, clean string) {
	info := &Info{Route: route, Subject: sub, Decision: d, Path: clean}
	m.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, info)))
}

// identify resolves the subject; on failure it has answered the request.
func (m *middleware) identify(w http.ResponseWriter, r *http.Request, group string) (Subject, bool) {
	p := m.opts.Policy
	ip, ok := identity.ClientIP(r, m.trusted)
	if !ok {
		WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the client address cannot be determined"})
		return Subject{}, false
	}
	client := identity.ClientGroup(ip)
	ipID := m.hasher.Hash("ip", client)

	key, present, kerr := identity.APIKey(r.Header)
	if present || kerr != nil {
		return m.identifyKey(w, r, group, key, kerr, ipID)
	}
	if p.UserHeader != "" && m.peerTrusted(r) {
		user, ok, err := identity.UserID(r.Header, p.UserHeader)
		if err != nil {
			WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the user id header is malformed"})
			return Subject{}, false
		}
		if ok {
			return Subject{Kind: "user", ID: m.hasher.Hash("u", user), Plan: p.UserPlan, Client: ipID}, true
		}
	}
	return Subject{Kind: "ip", ID: ipID, Plan: p.AnonymousPlan, Client: ipID}, true
}

func (m *middleware) identifyKey(w http.ResponseWriter, r *http.Request, group, key string, kerr error, ipID string) (Subject, bool) {
	p := m.opts.Policy
	ik := p.InvalidKey
	// An IP over its invalid-key budget gets no answer about any key.
	if until, ok := m.penalty.get(ipID); ok {
		m.count(ik.Name, group, "-", "refused")
		retry := max(1, ceilSeconds(time.Until(until)))
		WriteProblem(w, Problem{Type: ProblemTooManyFailed, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("Too many requests with invalid API keys from this address; retry after %d s.", retry)})
		return Subject{}, false
	}
	var k *policy.APIKey
	if kerr == nil {
		k = p.Keys[identity.KeyDigest(key)]
	}
	if k != nil {
		return Subject{Kind: "key", ID: m.hasher.Hash("k", k.ID), Plan: k.Plan, Key: k, Client: ipID}, true
	}
	sub := Subject{Kind: "ip", ID: ipID, Plan: ik, Client: ipID}
	d, err := m.decide(r.Context(), ik, ipID, 1)
	if err == nil && !d.Allowed {
		m.penalty.set(ipID, time.Now().Add(d.RetryAfter))
		m.count(ik.Name, group, "-", "refused")
		retry := max(1, ceilSeconds(d.RetryAfter))
		m.logSampled(r.Context(), slog.LevelWarn, "refused: too many invalid API keys", sub, ik, group, slog.Int64("retry_after_s", retry))
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

// peerTrusted reports whether the immediate peer is a trusted proxy.
func (m *middleware) peerTrusted(r *http.Request) bool {
	peer, ok := identity.PeerAddr(r)
	return ok && m.trusted.Contains(peer)
}

func (m *middleware) decide(ctx context.Context, plan *policy.Plan, subject string, cost int64) (tollgate.Decision, error) {
	start := time.Now()
	d, err := m.opts.Store.Allow(ctx, tollgate.Request{Policy: plan.StoreName, Subject: subject, Limit: plan.Limit, Cost: cost})
	if mt := m.opts.Metrics; mt != nil {
		mt.StoreLatency.Observe(time.Since(start).Seconds())
		if err != nil {
			mt.StoreErrors.WithLabelValues(plan.Name).Inc()
		}
	}
	return d, err
}

func (m *middleware) count(policyName, group, plan, outcome string) {
	if mt := m.opts.Metrics; mt != nil {
		mt.Decisions.WithLabelValues(policyName, group, plan, outcome).Inc()
	}
}

func (m *middleware) logSampled(ctx context.Context, level slog.Level, msg string, sub Subject, plan *policy.Plan, group string, attrs ...slog.Attr) {
	if !m.logRate.Allow() {
		return
	}
	all := append([]slog.Attr{
		slog.String("subject", sub.ID),
		slog.String("subject_kind", sub.Kind),
		slog.String("policy", plan.Name),
		slog.String("route_group", group),
	}, attrs...)
	m.log.LogAttrs(ctx, level, msg, all...)
}

// penaltyBox remembers, in this process, client IPs that are over their
// invalid-key budget, so their further key attempts are refused without a
// store call. It holds at most maxPenalties entries.
type penaltyBox struct {
	mu    sync.Mutex
	until map[string]time.Time
}

const maxPenalties = 100_000

func (b *penaltyBox) get(id string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.until[id]
	if ok && time.Now().After(t) {
		delete(b.until, id)
		return t, false
	}
	return t, ok
}

func (b *penaltyBox) set(id string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.until) >= maxPenalties {
		now := time.Now()
		for k, v := range b.until {
			if now.After(v) {
				delete(b.until, k)
			}
		}
		if len(b.until) >= maxPenalties {
			return
		}
	}
	b.until[id] = t
}
