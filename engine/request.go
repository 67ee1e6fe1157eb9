package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// Request is a call as a front presents it, before anything is known of
// it: [Engine.Decide] matches its route, identifies who makes it and
// decides it. A front fills it from its transport and answers from the
// verdict; it reads nothing of the policy itself.
type Request struct {
	// Front is what the front sees of a call, which says how a path may
	// be read otherwise and which route features it can serve.
	Front Front
	// Method is the request's method (POST for a gRPC call).
	Method string
	// Path is the path decoded; RawPath, if not "", the encoding it was
	// sent in (url.URL.RawPath).
	Path, RawPath string
	Host          string
	// RawQuery is the query as it came ("" where there is none).
	RawQuery string
	// Header holds the request's headers, or a gRPC call's metadata as
	// headers.
	Header http.Header
	// Bodiless says the request has no body (it carries no login).
	Bodiless bool
	// RemoteAddr is the peer's address, host:port ("" when the transport
	// is not TCP).
	RemoteAddr string
	// Custom, when CustomOK, is who the front itself says the call is
	// charged to (Credentials.Custom).
	Custom   string
	CustomOK bool
	// Body, if set, reads the request's body when the engine asks: its
	// credentials once the route is known, a login on a login route.
	Body Body
	// Cost, if set, returns the call's cost, replacing its route's when
	// positive; called once the call is identified.
	Cost func() int64
	// RequireRoute refuses a call that matches no route (ReasonNoRoute)
	// instead of charging it to the subject's plan at cost 1.
	RequireRoute bool
	// CleanPathForwarded says the service behind is handed the cleaned
	// path (Verdict.Path), so the path's other readings do not matter.
	CleanPathForwarded bool
	// Descriptors are an RLS call's (FrontRLS), its only field read.
	Descriptors Descriptors
}

// Body is a request's body, read only when [Engine.Decide] asks.
type Body interface {
	// Credentials returns the credentials the body holds (see
	// Presented.BodyTokens), for a call from client (the address it is
	// charged to, which may bound what one client's bodies hold). An
	// error refuses the call (ReasonUnreadable, the error in
	// Verdict.Err).
	Credentials(client netip.Addr) (tokens []string, malformed bool, err error)
	// Tokens reads what a call to a token route asks of the LLM behind
	// (its JSON body, up to the credential body's bound, put back as it
	// came). An error refuses the call: ReasonBadRequest for one wrapping
	// ErrBadTokenRequest, else ReasonUnreadable. A front without a Body
	// (gRPC) has its token calls estimated at the route's default.
	Tokens(*policy.Tokens) (TokenRequest, error)
	// Login reads the login a call to a login route makes
	// (identity.ReadLogin), putting the canonical body back for the
	// service. An error refuses the call (ReasonBadLogin for one
	// wrapping identity.ErrBadLogin, else ReasonUnreadable).
	Login(*policy.Login) (*identity.Login, error)
}

// Front is what a front sees of the calls it decides.
type Front uint8

// The fronts.
const (
	// FrontHTTP passes requests on to a service (the middleware, the
	// gateway): it sees the body and the answer.
	FrontHTTP Front = iota
	// FrontForwardAuth decides for a proxy that forwards the request as
	// it came: it sees neither the body nor the answer, so routes with a
	// login guard or a concurrency limit are refused (ReasonUnsupported).
	FrontForwardAuth
	// FrontGRPC decides gRPC calls, whose full method is the path read
	// exactly: no login guard (no body to read before the handler).
	FrontGRPC
	// FrontRLS decides for Envoy's rate-limit service: a call is its
	// descriptors (Request.Descriptors), each resolved by its domain's
	// tree, not a route.
	FrontRLS
)

// Decide decides req: it matches the route (match), identifies the
// caller ([Engine.IdentifyPresented], on the body's credentials once the
// route is known), keys the route's limit, reads a login, and checks the
// call ([Engine.Check]). The verdict says everything a front answers
// with; for an admitted call its caller must call Done when the call
// ends. A call refused before the checks (a bad request, no route, a
// front that cannot serve the route) has Outcome Invalid and one of the
// reasons of requests (ReasonBadRequest and those after it). An RLS call
// (FrontRLS) is its descriptors, decided all or nothing; its verdict holds
// nothing that lasts.
func (e *Engine) Decide(ctx context.Context, req Request) *Verdict {
	if req.Front == FrontRLS {
		return e.decideDescriptors(ctx, req.Descriptors)
	}
	m, v := e.match(req)
	if v != nil {
		return v
	}
	id, err := e.address(req.Header, req.RemoteAddr)
	if err != nil {
		return e.invalid(ReasonNoClientAddress, err.Error(), err)
	}
	pr, err := presented(req, id)
	if err != nil {
		return e.invalid(ReasonUnreadable, "", err)
	}
	call, id, err := e.identifyAt(ctx, pr, id)
	if err != nil {
		return e.invalid(ReasonMalformedUser, "the user id is malformed", err)
	}
	e.route(&call, m.route, m.rr, m.params)
	if req.Cost != nil {
		call.Cost = req.Cost()
	}
	if m.route != nil && m.route.Tokens != nil && (call.Key == KeyNone || call.Key == KeyValid) {
		if v := e.readTokens(ctx, req, m.route.Tokens, id, &call); v != nil {
			return v
		}
	}
	if m.route != nil && m.route.Login != nil && (call.Key == KeyNone || call.Key == KeyValid) {
		if v := e.readLogin(ctx, req, m.route.Login, id, &call); v != nil {
			return v
		}
	}
	v = e.Check(ctx, call)
	v.Call, v.Identity, v.Path = call, id, m.clean
	return v
}

// presented is what req presents from the address id found, the
// credentials in its body read (Body.Credentials).
func presented(req Request, id Identity) (Presented, error) {
	pr := Presented{Header: req.Header, RawQuery: req.RawQuery, RemoteAddr: req.RemoteAddr, Custom: req.Custom, CustomOK: req.CustomOK}
	if req.Body == nil {
		return pr, nil
	}
	var err error
	pr.BodyTokens, pr.BodyMalformed, err = req.Body.Credentials(id.Addr)
	return pr, err
}

// invalid is the verdict of a call refused as presented, before any
// check.
func (e *Engine) invalid(r Reason, detail string, err error) *Verdict {
	return &Verdict{e: e, Report: -1, Outcome: Invalid, Reason: r, Detail: detail, Err: err}
}

// readLogin reads the login req makes (Body.Login) and puts its
// account on call, for the login guard; on failure it returns the
// verdict, nothing held and no store asked.
func (e *Engine) readLogin(ctx context.Context, req Request, lg *policy.Login, id Identity, call *Call) *Verdict {
	if req.Body == nil {
		return e.invalid(ReasonUnsupported, "login guards need the request body", nil)
	}
	l, err := req.Body.Login(lg)
	switch {
	case errors.Is(err, identity.ErrBadLogin):
		e.count("login_body", "login", "-", "bad_request")
		e.logSampled(ctx, slog.LevelInfo, "refused: unreadable login request", id.Subject, "login_body", "login", slog.String("reason", err.Error()))
		return e.invalid(ReasonBadLogin, strings.TrimPrefix(err.Error(), identity.ErrBadLogin.Error()+": "), err)
	case err != nil:
		// The body did not arrive (in time, or at all).
		e.count("login_body", "login", "-", "unread")
		return e.invalid(ReasonUnreadable, "", err)
	}
	call.Account, call.Spelling = e.Pseudonym("acct", identity.AccountKey(l.Account)), e.spelling(l.Account)
	return nil
}

// A matched call is a call's route, found by match.
type matched struct {
	rr     policy.RouteRequest
	route  *policy.Route // nil for none
	params policy.Params
	clean  string // the cleaned path the route was matched on
}

// match finds req's route on its cleaned path, refusing a call that the
// server behind could serve as another route (an ambiguous path, a path
// or method read otherwise, a login route's path by another method), one
// that matches none when a route is required, and one whose route the
// front cannot serve, before anything is charged. On a refusal it returns
// the verdict.
func (e *Engine) match(req Request) (matched, *Verdict) {
	if req.Front == FrontGRPC {
		return e.matchExact(req)
	}
	p := e.policy
	rr, v := e.routeRequest(req)
	if v != nil {
		return matched{}, v
	}
	route, params := p.MatchRequest(rr)
	others := otherPaths(req, rr)
	if why := readsAsOtherRoute(p, req, rr, route, others); why != "" {
		return matched{}, e.invalid(ReasonBadRequest, why, nil)
	}
	if req.Front == FrontForwardAuth {
		if lr := loginRouteAt(p, rr, others); lr != nil {
			// The proxy shows neither the body nor the upstream's
			// answer, whatever the method: no attempt can be guarded.
			route = lr
		}
	}
	if why, allow := loginElsewhere(p, req, rr, route, others); why != "" {
		e.count("login_body", "login", "-", "bad_request")
		v := e.invalid(ReasonLoginElsewhere, why, nil)
		v.Allow = allow
		return matched{}, v
	}
	m := matched{rr: rr, route: route, params: params, clean: rr.Path}
	return m, e.serves(req, route)
}

// routeRequest returns req as the routes read it, on its cleaned path;
// or the verdict refusing a path or query that the server behind could
// read otherwise.
func (e *Engine) routeRequest(req Request) (policy.RouteRequest, *Verdict) {
	p := e.policy
	if !strings.HasPrefix(req.Path, "/") && req.Path != "" {
		return policy.RouteRequest{}, e.invalid(ReasonBadRequest, "the request path must be absolute", nil)
	}
	if why := policy.AmbiguousPath(req.Path); why != "" {
		return policy.RouteRequest{}, e.invalid(ReasonBadRequest, why, nil)
	}
	rr := policy.RouteRequest{Method: req.Method, Path: policy.CleanPath(req.Path), Host: req.Host, Header: req.Header}
	if p.UsesQuery() {
		// The query is read as strictly as the upstream could read it:
		// what does not parse, or names a parameter twice, is refused.
		q, err := url.ParseQuery(req.RawQuery)
		if err != nil {
			return policy.RouteRequest{}, e.invalid(ReasonBadRequest, "the query string cannot be parsed", nil)
		}
		rr.Query = q
	}
	if why := p.Ambiguous(rr); why != "" {
		return policy.RouteRequest{}, e.invalid(ReasonBadRequest, why, nil)
	}
	return rr, nil
}

// matchExact finds the route of a call whose path the server behind
// reads exactly as sent (a gRPC full method): its metadata are its
// headers, for the routes that match or key on them.
func (e *Engine) matchExact(req Request) (matched, *Verdict) {
	p := e.policy
	rr := policy.RouteRequest{Method: req.Method, Path: policy.CleanPath(req.Path)}
	if p.ReadsHeaders() {
		rr.Header = req.Header
	}
	if why := p.Ambiguous(rr); why != "" {
		return matched{}, e.invalid(ReasonBadRequest, why, nil)
	}
	route, params := p.MatchRequest(rr)
	return matched{rr: rr, route: route, params: params, clean: rr.Path}, e.serves(req, route)
}

// serves returns the verdict refusing a call to route (nil for none) that
// req's front cannot serve, or nil.
func (e *Engine) serves(req Request, route *policy.Route) *Verdict {
	if route == nil {
		if req.RequireRoute {
			return e.invalid(ReasonNoRoute, "no route matches this request", nil)
		}
		return nil
	}
	why := ""
	switch {
	case req.Front == FrontGRPC && route.Login != nil:
		why = fmt.Sprintf("route %q has a login guard, which reads the request body before the handler; gRPC has none to read", route.Name)
	case req.Front == FrontForwardAuth && route.Login != nil:
		why = fmt.Sprintf("route %q has a login guard, which reads the request body and learns the upstream's status; forward-auth sees neither, so serve this route through the gateway", route.Name)
	case req.Front == FrontForwardAuth && route.Tokens != nil:
		why = fmt.Sprintf("route %q is charged by the token, settled at the response's usage; forward-auth never sees the response, so serve this route through the gateway", route.Name)
	case req.Front == FrontForwardAuth && route.Adaptive != nil:
		why = fmt.Sprintf("route %q has an adaptive concurrency limit, which learns from the upstream's latency; forward-auth never sees the answer, so serve this route through the gateway", route.Name)
	case req.Front == FrontForwardAuth && route.Concurrency != nil:
		why = fmt.Sprintf("route %q has a concurrency limit, whose slot lasts until the response ends; forward-auth never sees it end, so serve this route through the gateway", route.Name)
	default:
		return nil
	}
	e.count("-", route.Group, "-", "unsupported")
	return e.invalid(ReasonUnsupported, why, nil)
}

// otherPaths returns the paths besides rr's that the server behind may
// serve req as: its path read otherwise (policy.PathReadings: dot
// segments, encoded slashes; unless the cleaned path is forwarded), a
// path a front controller takes from its query (policy.QueryPaths) or an
// old framework from a header (policy.HeaderPaths), both forwarded as
// they came.
func otherPaths(req Request, rr policy.RouteRequest) []string {
	var paths []string
	if req.Front == FrontForwardAuth || !req.CleanPathForwarded {
		u := url.URL{Path: req.Path, RawPath: req.RawPath}
		paths = policy.PathReadings(u.EscapedPath())
	}
	paths = append(paths, policy.QueryPaths(rr.Path, req.RawQuery)...)
	return append(paths, policy.HeaderPaths(req.Header)...)
}

// readsAsOtherRoute returns why the server behind may serve req as
// another route than route, which rr matched, or "": its path read
// otherwise (one of others, see otherPaths), its method read otherwise
// (policy.MethodReadings: X-HTTP-Method-Override, _method), or both.
func readsAsOtherRoute(p *policy.Policy, req Request, rr policy.RouteRequest, route *policy.Route, others []string) string {
	methods := policy.MethodReadings(req.Method, req.Header, req.RawQuery)
	if len(methods) == 0 && len(others) == 0 {
		return "" // the usual case
	}
	methods = append([]string{req.Method}, methods...)
	paths := append([]string{rr.Path}, others...)
	for i, method := range methods {
		for j, path := range paths {
			if i == 0 && j == 0 {
				continue
			}
			other := rr
			other.Method, other.Path = method, path
			if o, _ := p.MatchRequest(other); o == route {
				continue
			}
			if i == 0 {
				return "the request path reads as different routes to different servers (a dot segment, an encoded '/', a path in the query, which CodeIgniter and Drupal serve /index.php?/x and ?q=x as, or in X-Original-URL); send it without them"
			}
			return "the request names another method (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override or _method) that reads as another route; send it with that method"
		}
	}
	return ""
}

// loginElsewhere returns why req may reach a login route's handler by
// another method than that route's, carrying an attempt the guard would
// not see (a Go handler that does not check r.Method, a PHP script,
// Express's app.all), with the method to Allow, or "": at its own path or
// one it reads as (others, see otherPaths: CodeIgniter's
// /index.php?/login). req could carry an attempt unless it is a GET, HEAD
// or OPTIONS with no body and no account field in its query string (the
// login page). route is the route rr matched; another route (or none)
// would pass req on unguarded. The path's other spellings (/login.json,
// /index.php/login) are the login route's own: they match it
// (policy.MatchKey).
func loginElsewhere(p *policy.Policy, req Request, rr policy.RouteRequest, route *policy.Route, others []string) (why, allow string) {
	if route != nil && route.Login != nil {
		return "", ""
	}
	safe := safeMethod(req.Method)
	if safe && req.Bodiless && req.RawQuery == "" && len(others) == 0 {
		return "", "" // the usual case: no attempt to carry
	}
	o := loginRouteAt(p, rr, others)
	if o == nil || safe && req.Bodiless && identity.CheckLoginQuery(req.RawQuery, o.Login.AccountField) == nil {
		return "", ""
	}
	return fmt.Sprintf("this path is a login route for %s: a login attempt by another method is not accepted", o.Method), o.Method
}

// safeMethod reports whether method is one a login page is fetched by
// (GET, HEAD, OPTIONS), which carries no attempt without a body.
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// loginRouteAt returns the login route that rr's path, or one of others
// that it reads as, matches under the route's own method (whatever rr's
// method), or nil.
func loginRouteAt(p *policy.Policy, rr policy.RouteRequest, others []string) *policy.Route {
	for _, path := range append([]string{rr.Path}, others...) {
		for _, lr := range p.Routes {
			if lr.Login == nil {
				continue
			}
			other := rr
			other.Path = path
			if lr.Method != "" {
				other.Method = lr.Method
			}
			if o, _ := p.MatchRequest(other); o != nil && o.Login != nil {
				return o
			}
		}
	}
	return nil
}
