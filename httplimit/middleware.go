// Package httplimit is Tollgate's net/http middleware: it finds who a
// request comes from (API key, then a user id from a trusted auth proxy,
// then the client IP), matches its route, asks the decision engine
// (package engine), and either passes the request on with
// RateLimit/RateLimit-Policy headers or answers 429 with Retry-After and an
// application/problem+json body, without calling the handler behind.
//
// Requests with an unknown or malformed API key (or, under a policy that
// verifies bearer JWTs, a token that does not verify) get 401, and those attempts
// are limited per client IP (policy invalid_key_limit): once an IP is over
// it, every request of its that carries a key is refused with 429, valid
// key or not, so keys cannot be guessed at speed.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/jwtauth"
	"github.com/tollgate/tollgate/policy"
	"go.opentelemetry.io/otel/trace"
)

// Options configures the middleware. Store is required, and either Policy
// or Limit; the zero value of every other field is the default.
type Options struct {
	// Engine, if set, decides every request: the one a gateway's other
	// fronts (gRPC, forward-auth) share, so that they decide under the
	// same budgets, identities and penalties. Its policy is the Policy,
	// and the fields that configure an engine (Policy, Limit, Store,
	// Logger, Metrics, LogRefusalsPerSecond, Now, DenyCacheSize, Tracer,
	// JWKS, Recording) are not read. Without it the front builds its own.
	Engine *engine.Engine
	// Policy is what to enforce: plans, API keys, routes (see package
	// policy: a file, or a File compiled in code).
	Policy *policy.Policy
	// Limit, without a Policy, is one limit applied to every request, per
	// client address or per Subject (see policy.ForLimit).
	Limit tollgate.Limit
	Store tollgate.Store
	// Subject, if set, names who a request is charged to: when it returns
	// true, the id it returns (pseudonymised like every identity) is the
	// subject, under the policy's user plan (the anonymous plan if it has
	// none), and API keys and user headers are not looked at; when it
	// returns false, the request is identified as usual.
	Subject func(r *http.Request) (id string, ok bool)
	// Cost, if set, returns a request's cost, replacing its route's; a
	// cost of zero or less keeps the route's. A cost no limit of the
	// request could ever admit is answered 400.
	Cost func(r *http.Request) int64
	// Refused, if set, answers the requests the middleware does not pass
	// on, instead of its application/problem+json bodies; the RateLimit
	// headers are already set, and v says why (see engine.Verdict). Bad
	// requests (an unreadable path or login body) are answered as usual.
	Refused func(w http.ResponseWriter, r *http.Request, v *engine.Verdict)
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
	// DenyCacheSize bounds the engine's deny cache (see
	// engine.Options.DenyCacheSize): zero, none; in front of Redis,
	// engine.DefaultDenyCacheSize.
	DenyCacheSize int
	// Tracer, if set, records a span per store call under the request's
	// span (see engine.Options.Tracer); nil records none.
	Tracer trace.Tracer
	// JWKS caches the signing keys of a policy that verifies bearer JWTs
	// (see engine.Options.JWKS); nil means the process's.
	JWKS *jwtauth.Keys
	// Recording, if set, records the calls decided (see
	// engine.Options.Recording).
	Recording *engine.Recording
	// CleanPathForwarded says that the handler behind hands the request
	// on with its cleaned path (Info.Path) in place of its own, as the
	// gateway does. Otherwise the handler gets the path as the client
	// wrote it, and a path whose readings (policy.PathReadings: dot
	// segments, encoded slashes) match different routes is answered 400:
	// the server behind may serve any of them. Forward-auth always
	// refuses such a path, since the proxy forwards the request as it
	// came.
	CleanPathForwarded bool
}

// Metrics are the decision engine's Prometheus metrics; see
// [engine.Metrics].
type Metrics = engine.Metrics

// TopRefused tracks the most refused subjects; see [engine.TopRefused].
type TopRefused = engine.TopRefused

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered); see [engine.NewMetrics].
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) { return engine.NewMetrics(reg) }

// Subject is who a request was attributed to: the identity every front
// reports (engine.Identity).
type Subject = engine.Identity

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

// Record is what the middleware learned of a request, for an access log
// or metrics: a handler in front of the middleware puts one in the
// request's context (WithRecord), and reads it once the request has been
// served. Fields the request never reached stay empty.
type Record struct {
	Route, Group string // the route matched (Group "unmatched" for none)
	SubjectKind  string // "key", "user", "ip" or "custom"
	Subject      string // the subject's pseudonym
	Outcome      string // the engine's outcome: allowed, refused, fail_open, fail_closed, invalid
	Budget       string // the budget reported in RateLimit (or that refused)
	Decision     time.Duration
	// Upstream is the time the service behind took, set by whoever calls
	// it (the gateway).
	Upstream time.Duration
}

type recordKey struct{}

// WithRecord returns ctx carrying rec, for the middleware to fill in.
func WithRecord(ctx context.Context, rec *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, rec)
}

// RecordFrom returns the Record in ctx, if any.
func RecordFrom(ctx context.Context) (*Record, bool) {
	rec, ok := ctx.Value(recordKey{}).(*Record)
	return rec, ok
}

// fill sets what the verdict v, reached in decision, says of the
// request.
func (rec *Record) fill(v *engine.Verdict, decision time.Duration) {
	rec.Decision = decision
	rec.Group, rec.SubjectKind, rec.Subject, rec.Outcome = v.Call.Group(), v.Identity.Kind, v.Identity.ID, v.Outcome.String()
	if v.Call.Route != nil {
		rec.Route = v.Call.Route.Name
	}
	if c, ok := v.Reported(); ok {
		rec.Budget = c.Budget.Name
	}
}

type middleware struct {
	opts    Options
	next    http.Handler
	engine  *engine.Engine
	trusted identity.TrustedProxies
	held    *bodyBudget // bodies held for their credentials (readCredentialBody)
	// See forwardHeaders: headers keyed by headerKey that a client may
	// not remove or shadow, and by canonical name those always replaced
	// and those believed only from trusted proxies.
	protected, replaced, trustedOnly map[string]bool
}

// Front is the middleware and the forward-auth endpoint (see
// [Front.ForwardAuth]) over one decision engine, so both decide every
// request under the same budgets, identities and invalid-key penalties.
type Front struct{ base *middleware }

// New returns the front that Middleware and ForwardAuth are made of.
func New(opts Options) (*Front, error) {
	if opts.Engine != nil {
		opts.Policy = opts.Engine.Policy()
		return newFront(opts, opts.Engine), nil
	}
	if opts.Store == nil {
		return nil, errors.New("creating middleware: Store is required")
	}
	if opts.Policy == nil {
		if opts.Limit == (tollgate.Limit{}) {
			return nil, errors.New("creating middleware: a Policy or a Limit is required")
		}
		p, err := policy.ForLimit(opts.Limit)
		if err != nil {
			return nil, fmt.Errorf("creating middleware: %w", err)
		}
		opts.Policy = p
	}
	e, err := engine.New(engine.Options{Policy: opts.Policy, Store: opts.Store, Logger: opts.Logger,
		Metrics: opts.Metrics, LogRefusalsPerSecond: opts.LogRefusalsPerSecond, Now: opts.Now, DenyCacheSize: opts.DenyCacheSize,
		Tracer: opts.Tracer, JWKS: opts.JWKS, Recording: opts.Recording})
	if err != nil {
		return nil, fmt.Errorf("creating middleware: %w", err)
	}
	return newFront(opts, e), nil
}

// newFront is the front over e, whose policy opts.Policy is.
func newFront(opts Options, e *engine.Engine) *Front {
	return &Front{base: &middleware{
		opts:        opts,
		engine:      e,
		trusted:     opts.Policy.Trusted,
		held:        new(bodyBudget),
		protected:   protected(opts.Policy.UserHeader, opts.Policy.RouteHeaders()...),
		replaced:    canonicalSet(addressHeaders),
		trustedOnly: canonicalSet(append(slices.Clone(proxyHeaders), opts.Policy.UserHeader)),
	}}
}

// Middleware wraps next with rate limiting.
func (f *Front) Middleware(next http.Handler) http.Handler {
	m := *f.base
	m.next = next
	return &m
}

// Middleware returns a function wrapping handlers with rate limiting.
func Middleware(opts Options) (func(http.Handler) http.Handler, error) {
	f, err := New(opts)
	if err != nil {
		return nil, err
	}
	return f.Middleware, nil
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := m.decide(w, r, engine.FrontHTTP)
	defer d.release()
	v := d.v
	route := v.Call.Route
	if !v.Outcome.Admitted() {
		m.refuse(w, r, v)
		return
	}
	defer v.Done(r.Context())
	out := http.ResponseWriter(w) // where the request is passed on
	if route != nil && (route.Login != nil || route.Adaptive != nil) {
		// Only the service's answer settles the attempt; its time is
		// the adaptive limit's sample.
		out = &statusRecorder{ResponseWriter: w, onStatus: func(status int) { v.Answered(r.Context(), status) }}
	}
	var mw *meterWriter
	if route != nil && route.Tokens != nil {
		// Its usage settles the call's token budgets (Done).
		mw = meterTokens(out, r, route.Tokens)
		defer func() { v.Used(mw.usage()) }()
		out = mw
	}
	if !v.Wait(r.Context()) {
		return // the client gave up while queued
	}
	dec := tollgate.Decision{Allowed: true}
	if c, ok := v.Reported(); ok {
		dec = c.Decision
	}
	m.pass(out, r, route, v.Identity, dec, v.Path)
	if mw != nil {
		mw.whole = true
	}
	if v.Deferred() {
		// Shadow budgets are evaluated after the response, not before
		// its last bytes.
		http.NewResponseController(w).Flush()
	}
}

// decision is what the engine decided for a request.
type decision struct {
	v    *engine.Verdict
	body *requestBody
}

// release gives back the body held for the request's credentials.
func (d decision) release() { d.body.release() }

// decide asks the engine to decide r (engine.Engine.Decide), reading its
// body for credentials and a login only when the engine asks, and sets
// the RateLimit headers of the verdict on w.
func (m *middleware) decide(w http.ResponseWriter, r *http.Request, front engine.Front) decision {
	d := decision{body: &requestBody{m: m, r: r}}
	req := engine.Request{Front: front, Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath, Host: r.Host,
		RawQuery: r.URL.RawQuery, Header: r.Header, Bodiless: r.ContentLength == 0 && len(r.TransferEncoding) == 0,
		RemoteAddr: r.RemoteAddr, RequireRoute: m.opts.RequireRoute, CleanPathForwarded: m.opts.CleanPathForwarded, Body: d.body}
	if m.opts.Subject != nil {
		req.Custom, req.CustomOK = m.opts.Subject(r)
	}
	if m.opts.Cost != nil {
		req.Cost = func() int64 { return m.opts.Cost(r) }
	}
	start := time.Now()
	d.v = m.engine.Decide(r.Context(), req)
	v := d.v
	if v.Reason.OfRequest() {
		return d
	}
	if f, ok := v.RateLimit(); ok {
		setHeaders(w.Header(), f, m.opts.Policy.LegacyHeaders)
	}
	if m.opts.Policy.LLMHeaders && v.Call.Tokens != nil {
		setTokenHeaders(w.Header(), v)
	}
	if rec, ok := RecordFrom(r.Context()); ok {
		rec.fill(v, time.Since(start))
	}
	return d
}

// refuse answers a request the engine did not admit: with the Refused
// hook if there is one, unless the request was refused as presented or
// the client went away; otherwise with writeRefusal.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, v *engine.Verdict) {
	if m.opts.Refused != nil && v.Reason != engine.ReasonCanceled && !v.Reason.OfRequest() {
		m.opts.Refused(w, r, v)
		return
	}
	m.writeRefusal(w, v)
}

// writeRefusal answers a call the engine did not admit.
func (m *middleware) writeRefusal(w http.ResponseWriter, v *engine.Verdict) {
	if v.Reason.OfRequest() {
		writeInvalid(w, v)
		return
	}
	retry := v.RetrySeconds()
	pr := Problem{Status: http.StatusTooManyRequests, RetryAfter: retry}
	if rf := refusalOf(v); rf != nil {
		if len(rf.Body) > 0 {
			writeRouteRefusal(w, rf, retry)
			return
		}
		pr.Status = rf.Status
	}
	if pr, ok := refusalProblem(w.Header(), v, pr); ok {
		WriteProblem(w, pr)
	}
}

// writeRouteRefusal answers a refusal with the route's own body, retry
// seconds its Retry-After.
func writeRouteRefusal(w http.ResponseWriter, rf *policy.Refusal, retry int64) {
	h := w.Header()
	h.Set("Content-Type", rf.ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	w.WriteHeader(rf.Status)
	w.Write(rf.Body)
}

// refusalProblem returns the problem that answers v, made from pr (the
// 429, or the route's own status, with its Retry-After), setting on h
// the headers it asks for. false: the client went away (ReasonCanceled)
// and there is nobody to answer.
func refusalProblem(h http.Header, v *engine.Verdict, pr Problem) (Problem, bool) {
	switch v.Reason {
	case engine.ReasonInvalidKey:
		return invalidKeyProblem(h, v.Call), true
	case engine.ReasonCostExceedsBurst:
		return Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the request costs more than its rate limit could ever admit"}, true
	case engine.ReasonMisconfigured:
		return Problem{Type: ProblemUnavailable, Status: http.StatusInternalServerError, Detail: "the rate limit for this route is misconfigured"}, true
	case engine.ReasonUnavailable:
		pr.Type, pr.Status, pr.Detail = ProblemUnavailable, http.StatusServiceUnavailable, "the rate limiter is unavailable and this route does not proceed without it"
		if route := v.Call.Route; route != nil && route.Login != nil {
			pr.Detail = "login is unavailable while the rate limiter is"
		}
		return pr, true
	case engine.ReasonOverload:
		pr.Type, pr.Title, pr.Status = ProblemOverloaded, "Upstream overloaded", http.StatusServiceUnavailable
		pr.Detail = fmt.Sprintf("The service behind is at its concurrency limit, which follows its latency; retry after %d s.", pr.RetryAfter)
		return pr, true
	case engine.ReasonKeysUnavailable:
		pr.Type, pr.Title, pr.Status = ProblemKeysUnavailable, "Identity provider's keys unavailable", http.StatusServiceUnavailable
		pr.Detail = fmt.Sprintf("The bearer token cannot be checked: the identity provider's signing keys cannot be fetched; retry after %d s.", pr.RetryAfter)
		return pr, true
	}
	var ok bool
	pr.Type, pr.Detail, ok = tooManyProblem(v, pr.RetryAfter)
	return pr, ok
}

// tooManyProblem returns the type and detail of a refusal for too many
// requests (a budget used up, too many in flight, too many failed logins
// or invalid keys), retry seconds its Retry-After; false for another
// reason.
func tooManyProblem(v *engine.Verdict, retry int64) (typ, detail string, ok bool) {
	switch v.Reason {
	case engine.ReasonRate:
		c, _ := v.Reported()
		b := c.Budget
		unit := ""
		if b.Unit != policy.UnitRequests {
			unit = " " + strings.ReplaceAll(b.Unit.String(), "_", " ")
		}
		return ProblemRateLimited, fmt.Sprintf("The %q limit of %d%s per %v is used up; retry after %d s.", b.Name, b.Limit.Rate, unit, b.Limit.Period, retry), true
	case engine.ReasonConcurrency:
		return ProblemTooManyInFlight, fmt.Sprintf("At most %d requests may be in flight here at once; retry shortly.", v.Call.Route.Concurrency.Limit), true
	case engine.ReasonLoginAddress:
		return ProblemTooManyFailed, fmt.Sprintf("Too many failed logins from this address; retry after %d s.", retry), true
	case engine.ReasonLoginLocked:
		return ProblemLoginLocked, fmt.Sprintf("This account is locked after repeated failed logins; retry after %d s.", retry), true
	case engine.ReasonLoginBusy:
		return ProblemLoginBusy, "Too many login attempts for this account are in progress; retry after 1 s.", true
	case engine.ReasonInvalidKeys:
		return ProblemTooManyFailed, fmt.Sprintf("Too many requests with invalid API keys from this address; retry after %d s.", retry), true
	}
	return "", "", false
}

// invalidKeyProblem returns the 401 that answers a call with an invalid
// API key or bearer token, setting WWW-Authenticate on h.
func invalidKeyProblem(h http.Header, call engine.Call) Problem {
	pr := Problem{Type: ProblemInvalidKey, Status: http.StatusUnauthorized, Detail: "The API key is not valid."}
	if call.Key == engine.KeyMalformed {
		pr.Detail = "The API key is malformed."
	}
	if call.JWT {
		// Why a token failed (expired, another issuer, an unknown
		// key) is not told: the client learns it from its issuer.
		pr.Type, pr.Detail = ProblemInvalidToken, "The bearer token is not valid."
		h.Set("WWW-Authenticate", `Bearer realm="tollgate", error="invalid_token"`)
	} else {
		h.Set("WWW-Authenticate", `Bearer realm="tollgate"`)
	}
	return pr
}

// writeInvalid answers a request the engine refused as presented
// (engine.Reason.OfRequest).
func writeInvalid(w http.ResponseWriter, v *engine.Verdict) {
	pr := Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: v.Detail}
	var pe *problemError
	switch v.Reason {
	case engine.ReasonMalformedUser:
		pr.Detail = "the user id header is malformed"
	case engine.ReasonNoRoute:
		pr.Type, pr.Status = ProblemNotFound, http.StatusNotFound
	case engine.ReasonLoginElsewhere:
		w.Header().Set("Allow", v.Allow)
		pr.Type, pr.Status = ProblemBadLogin, http.StatusMethodNotAllowed
	case engine.ReasonBadLogin:
		pr.Type = ProblemBadLogin
	case engine.ReasonUnsupported:
		pr.Type, pr.Status = ProblemForwardAuthUnsupported, http.StatusInternalServerError
	case engine.ReasonUnreadable:
		if !errors.As(v.Err, &pe) {
			writeUnread(w, v.Err)
			return
		}
		pr = pe.Problem
	}
	WriteProblem(w, pr)
}

// refusalOf returns the route's own answer to v, nil for none: a route
// may answer the refusals of its rate and concurrency limits.
func refusalOf(v *engine.Verdict) *policy.Refusal {
	if v.Call.Route == nil || v.Reason != engine.ReasonRate && v.Reason != engine.ReasonConcurrency {
		return nil
	}
	return v.Call.Route.Refusal
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
	r2.Header = m.forwardHeaders(r.Header, sub, sub.TrustedPeer)
	m.next.ServeHTTP(w, r2)
}

// peerTrusted reports whether the immediate peer is a trusted proxy.
func (m *middleware) peerTrusted(r *http.Request) bool {
	peer, ok := identity.PeerAddr(r)
	return ok && m.trusted.Contains(peer)
}

// setHeaders writes the RateLimit and RateLimit-Policy fields of a
// verdict (engine.Verdict.RateLimit), and with legacy the X-RateLimit-*
// headers of the same budget.
func setHeaders(h http.Header, f engine.RateLimitFields, legacy bool) {
	h.Set("RateLimit-Policy", f.Policy)
	h.Set("RateLimit", f.Limit)
	if legacy {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(f.Quota, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(f.Remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(f.Reset, 10))
	}
}

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// Problem types Tollgate answers with.
const (
	ProblemRateLimited = "urn:tollgate:problem:rate-limited"
	ProblemInvalidKey  = "urn:tollgate:problem:invalid-api-key"
	// ProblemInvalidToken answers a bearer JWT that does not verify.
	ProblemInvalidToken = "urn:tollgate:problem:invalid-token"
	ProblemUnavailable  = "urn:tollgate:problem:limiter-unavailable"
	// ProblemKeysUnavailable answers a bearer JWT that cannot be
	// checked because the identity provider's JWKS cannot be fetched (a
	// 503 with a Retry-After, not a 401: the token may be good).
	ProblemKeysUnavailable = "urn:tollgate:problem:identity-provider-keys-unavailable"
	ProblemNotFound        = "urn:tollgate:problem:no-route"
	ProblemBadRequest      = "urn:tollgate:problem:bad-request"
	ProblemBadGateway      = "urn:tollgate:problem:bad-gateway"
	ProblemUpstreamSlow    = "urn:tollgate:problem:gateway-timeout"
	ProblemLoginLocked     = "urn:tollgate:problem:login-locked"
	ProblemTooManyFailed   = "urn:tollgate:problem:too-many-failures"
	// ProblemTooManyInFlight answers a request over a concurrency limit.
	ProblemTooManyInFlight = "urn:tollgate:problem:too-many-in-flight"
	// ProblemOverloaded: the upstream's adaptive concurrency limit
	// (routes[].adaptive) refused the request, a 503.
	ProblemOverloaded = "urn:tollgate:problem:overloaded"
	// ProblemBadLogin answers a login request whose account the guard
	// cannot read exactly as the service behind would.
	ProblemBadLogin = "urn:tollgate:problem:unreadable-login"
	// ProblemBodyTimeout answers a request whose body did not arrive in
	// time (the gateway's listeners.body_timeout).
	ProblemBodyTimeout = "urn:tollgate:problem:body-timeout"
	// ProblemLoginBusy answers a login attempt for an account whose
	// failures and attempts in progress already add up to its allowance.
	ProblemLoginBusy = "urn:tollgate:problem:login-attempts-in-progress"
)

// WriteProblem writes p as application/problem+json, with Retry-After when
// p.RetryAfter is set.
func WriteProblem(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(p.RetryAfter, 10))
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	body, _ := json.Marshal(p)
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}
