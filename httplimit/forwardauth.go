package httplimit

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/engine"
)

// Problem types of the forward-auth endpoint.
const (
	// ProblemForwardAuthUntrusted answers a forward-auth request whose
	// peer is not a trusted proxy: the request it describes is the
	// proxy's word, believed from no one else.
	ProblemForwardAuthUntrusted = "urn:tollgate:problem:forward-auth-untrusted"
	// ProblemForwardAuthBadRequest answers a forward-auth request that
	// does not describe one request exactly: a method or URI missing,
	// given twice, or given differently by two header styles.
	ProblemForwardAuthBadRequest = "urn:tollgate:problem:forward-auth-bad-request"
	// ProblemForwardAuthUnsupported answers a forward-auth request for a
	// route whose checks need the end of the request, which forward-auth
	// never sees (a login guard, a concurrency limit).
	ProblemForwardAuthUnsupported = "urn:tollgate:problem:forward-auth-unsupported"
)

// The headers that describe the request a forward-auth request is about:
// nginx's auth_request examples (X-Original-*) and Traefik's ForwardAuth
// and Caddy's forward_auth (X-Forwarded-*).
var (
	methodHeaders = []string{"X-Original-Method", "X-Forwarded-Method"}
	uriHeaders    = []string{"X-Original-Uri", "X-Forwarded-Uri"}
)

// Headers of a forward-auth answer given under
// ForwardAuthOptions.RefusalStatus: the status Tollgate means, and its
// problem body on one line.
const (
	StatusHeader  = "X-Tollgate-Status"
	ProblemHeader = "X-Tollgate-Problem"
)

// ForwardAuthOptions configures a forward-auth endpoint; the zero value
// answers with the statuses the gateway would (Caddy, Traefik).
type ForwardAuthOptions struct {
	// RefusalStatus, if set, is the status of every answer that is not
	// 2xx, for proxies that pass only some statuses through: nginx's
	// auth_request takes 2xx, 401 and 403 and makes anything else a 500,
	// so its configuration uses 403 here. The status Tollgate means (429,
	// 401, 404, 503, ...) is then in X-Tollgate-Status and the problem
	// body, on one line, in X-Tollgate-Problem, beside Retry-After and
	// the RateLimit headers, for the proxy to answer the client with.
	RefusalStatus int
}

// ForwardAuth returns a forward-auth endpoint deciding under opts; see
// [Front.ForwardAuth].
func ForwardAuth(opts Options, fo ForwardAuthOptions) (http.Handler, error) {
	f, err := New(opts)
	if err != nil {
		return nil, err
	}
	return f.ForwardAuth(fo), nil
}

// ForwardAuth returns the forward-auth endpoint: a proxy (nginx
// auth_request, Traefik ForwardAuth, Caddy forward_auth) asks it about a
// request before forwarding that request, and it decides exactly as the
// middleware would have for that request: same route matching on the
// same cleaned path, same identification (API key, user header and
// X-Forwarded-For from trusted proxies), same cost and budgets, in the
// same engine.
//
// The request is described by the proxy's headers: its method by
// X-Original-Method or X-Forwarded-Method, its URI (origin-form, as the
// proxy received it, query included) by X-Original-URI or
// X-Forwarded-Uri; its credentials and forwarding chain by the request's
// own headers, which the proxy copies. These are believed only from a
// trusted proxy (identity.trusted_proxies): any other peer gets 403. A
// description that is missing, given twice, or given differently by the
// two styles (a client adding X-Forwarded-Uri to what nginx forwards) is
// a 400, never decided on either.
//
// Admitted: 200, empty, with RateLimit, RateLimit-Policy (and the legacy
// X-RateLimit-* headers) for the proxy to copy; a shaping limit's delay is
// waited out before answering. Otherwise the gateway's answer: 429 with
// Retry-After and a problem body, 401 for an invalid key, 404 for no
// route, 503 when failing closed (see ForwardAuthOptions.RefusalStatus
// for nginx). Shadow budgets are evaluated right after the answer. A
// route with a login guard or a concurrency limit is answered 500
// (forward-auth-unsupported), charging nothing: forward-auth never sees
// the body or the end of the request, which those need. Options.Refused
// is not used here.
func (f *Front) ForwardAuth(fo ForwardAuthOptions) http.Handler {
	return &forwardAuth{m: f.base, opts: fo}
}

type forwardAuth struct {
	m    *middleware
	opts ForwardAuthOptions
}

func (fa *forwardAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	aw := &authWriter{ResponseWriter: w, refusal: fa.opts.RefusalStatus}
	defer aw.finish()
	m := fa.m
	if !m.peerTrusted(r) {
		WriteProblem(aw, Problem{Type: ProblemForwardAuthUntrusted, Status: http.StatusForbidden,
			Detail: "forward-auth requests are answered only for trusted proxies (identity.trusted_proxies)"})
		return
	}
	described, err := describedRequest(r)
	if err == nil {
		err = m.underscored(described.Header)
	}
	if err != nil {
		WriteProblem(aw, Problem{Type: ProblemForwardAuthBadRequest, Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	d := m.decide(aw, described, engine.FrontForwardAuth)
	defer d.release()
	v := d.v
	if !v.Outcome.Admitted() {
		m.writeRefusal(aw, v)
		return
	}
	defer v.Done(r.Context()) // after the answer: shadow budgets
	if !v.Wait(r.Context()) {
		return // the proxy gave up on the request
	}
	aw.WriteHeader(http.StatusOK)
	aw.finish()
	if v.Deferred() {
		http.NewResponseController(w).Flush()
	}
}

// underscored refuses a header that the gateway would remove before the
// service (an identity, credential, forwarding or route header spelt with
// '_' for '-'): here the proxy passes it on, and a service that reads '_'
// as '-' would see what the decision did not.
func (m *middleware) underscored(h http.Header) error {
	for name := range h {
		if m.shadows(name) {
			return fmt.Errorf("the header %s is spelt with '_', which services read differently; send it with '-'", name)
		}
	}
	return nil
}

// describedRequest returns the request r describes, for deciding: r with
// the method and URI its headers give.
func describedRequest(r *http.Request) (*http.Request, error) {
	method, err := described(r.Header, methodHeaders, "method")
	if err != nil {
		return nil, err
	}
	if !isToken(method) {
		return nil, fmt.Errorf("the described method %q is not an HTTP method", method)
	}
	uri, u, err := describedURI(r.Header)
	if err != nil {
		return nil, err
	}
	d := new(http.Request)
	*d = *r
	d.Method, d.URL, d.RequestURI = method, u, uri
	if hs := r.Header.Values("X-Forwarded-Host"); len(hs) == 1 {
		d.Host = hs[0] // the host the proxy was asked for, which host: routes match
	} else if len(hs) > 1 {
		return nil, fmt.Errorf("the described host is given %d times in X-Forwarded-Host", len(hs))
	}
	return d, nil
}

// describedURI returns the URI the headers h describe, as given and
// parsed: origin-form only, as a proxy received it, and parsed as
// net/http parses a request line, so the path is the one the gateway
// would match.
func describedURI(h http.Header) (string, *url.URL, error) {
	uri, err := described(h, uriHeaders, "URI")
	if err != nil {
		return "", nil, err
	}
	switch {
	case !strings.HasPrefix(uri, "/"):
		return "", nil, fmt.Errorf("the described URI must be a path (origin-form, such as /api/items?x=1), got %q", uri)
	case strings.IndexByte(uri, '#') >= 0:
		return "", nil, fmt.Errorf("the described URI holds '#', which servers read differently (a fragment, or part of the path)")
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return "", nil, fmt.Errorf("the described URI cannot be parsed: %v", err)
	}
	return uri, u, nil
}

// described returns the one value that the headers names give (each at
// most once; where several are given, all the same).
func described(h http.Header, names []string, what string) (string, error) {
	var val, from string
	for _, name := range names {
		vs := h[name]
		switch {
		case len(vs) == 0:
			continue
		case len(vs) > 1:
			return "", fmt.Errorf("the described %s is given %d times in %s", what, len(vs), name)
		case vs[0] == "":
			return "", fmt.Errorf("the described %s in %s is empty", what, name)
		case from != "" && vs[0] != val:
			return "", fmt.Errorf("the described %s differs between %s and %s", what, from, name)
		}
		val, from = vs[0], name
	}
	if from == "" {
		return "", fmt.Errorf("no described %s: set %s", what, strings.Join(names, " or "))
	}
	return val, nil
}

// isToken reports whether s is an HTTP token (RFC 9110), as a method is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// authWriter holds a forward-auth answer until it is complete, so that
// under a RefusalStatus a refusal's status and problem body can go into
// headers.
type authWriter struct {
	http.ResponseWriter
	refusal int
	status  int
	body    bytes.Buffer
	done    bool
}

func (a *authWriter) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

func (a *authWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

// finish writes the answer held; calling it again does nothing.
func (a *authWriter) finish() {
	if a.done || a.status == 0 {
		return
	}
	a.done = true
	status := a.status
	if a.refusal != 0 && (status < 200 || status > 299) {
		h := a.Header()
		h.Set(StatusHeader, strconv.Itoa(status))
		if body := bytes.TrimSpace(a.body.Bytes()); len(body) <= 4<<10 && bytes.IndexAny(body, "\r\n") < 0 {
			h.Set(ProblemHeader, string(body))
		}
		status = a.refusal
	}
	a.ResponseWriter.WriteHeader(status)
	a.ResponseWriter.Write(a.body.Bytes())
}
