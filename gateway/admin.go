package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/identity"
)

// Problem types the admin listener answers with when it refuses a request
// before any endpoint sees it.
const (
	ProblemAdminUnauthorized = "urn:tollgate:problem:admin-unauthorized"
	ProblemAdminHost         = "urn:tollgate:problem:admin-host-refused"
	ProblemAdminCrossOrigin  = "urn:tollgate:problem:admin-cross-origin"
	ProblemAdminContentType  = "urn:tollgate:problem:admin-content-type"
)

// noFraming is the Content-Security-Policy of every admin response: no
// page may frame it.
const noFraming = "frame-ancestors 'none'"

// guardAdmin wraps the whole admin mux in the checks every admin request
// passes before any endpoint sees it, so an endpoint added later cannot
// forget them:
//
//   - Without an admin token, the Host must name this machine: localhost or a
//     loopback address. A DNS-rebinding page (its own name, later resolved
//     to 127.0.0.1) talks to the listener same-origin, and only its Host
//     gives it away; it could otherwise read every admin endpoint too.
//   - With a token, Authorization must carry it. A page cannot make a
//     browser send it, so the Host check is not needed then (and operators
//     may reach a non-loopback admin listener by any name).
//   - Except for the probes: GET or HEAD /healthz and /readyz answer
//     anyone, since orchestrators' probes cannot carry a secret, but say
//     no more than "ok" and ready or degraded; /readyz adds why, and the
//     policy version, only for a request that passed the checks above.
//   - A state-changing request (any method but GET, HEAD and OPTIONS, spelt
//     exactly so) must not come from another origin, as Sec-Fetch-Site or
//     Origin tell (http.CrossOriginProtection, no trusted origins), and must
//     say Content-Type: application/json, which a page can send to another
//     origin only after a CORS preflight that this listener never grants
//     (it sends no Access-Control-* headers). The second check also covers
//     browsers that send neither header. Non-browser clients send neither
//     header and pass with the content type.
//   - No page of another origin may frame any admin response (a framed
//     dashboard ran replays for whoever framed it): every answer, refusals
//     included, says X-Frame-Options: DENY and frame-ancestors 'none'
//     (a page's own Content-Security-Policy adds its other directives).
func guardAdmin(mux http.Handler, token string) http.Handler {
	var want [sha256.Size]byte
	if token != "" {
		want = sha256.Sum256([]byte("Bearer " + token))
	}
	csrf := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", noFraming)
		h.Set("X-Content-Type-Options", "nosniff")
		if isProbe(r) && !authorized(r, token, want) {
			mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), probeOnly{}, true)))
			return
		}
		if refuseStranger(w, r, token, want) {
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			mux.ServeHTTP(w, r)
			return
		}
		if refuseCrossOrigin(w, r, csrf) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// isProbe reports whether r is an orchestrator's probe: GET or HEAD
// /healthz or /readyz.
func isProbe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

// refuseStranger answers a request that fails the admin listener's
// identity checks, and reports whether it did: without a token, one whose
// Host does not name this machine; with one (want is the hash of its
// Authorization header), one that does not carry it.
func refuseStranger(w http.ResponseWriter, r *http.Request, token string, want [sha256.Size]byte) bool {
	if authorized(r, token, want) {
		return false
	}
	if token == "" {
		httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemAdminHost, Status: http.StatusForbidden,
			Detail: "the admin listener has no token, so it answers only requests addressed to localhost or a loopback address " +
				"(a page under another name may be a DNS-rebinding attack); set listeners.admin_token_env to reach it by another name"})
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-admin"`)
	httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemAdminUnauthorized, Status: http.StatusUnauthorized,
		Detail: "the admin endpoints need the admin bearer token"})
	return true
}

// refuseCrossOrigin answers a state-changing request that a page of
// another origin may have sent, and reports whether it did: one that csrf
// refuses, or one without Content-Type: application/json.
func refuseCrossOrigin(w http.ResponseWriter, r *http.Request, csrf *http.CrossOriginProtection) bool {
	if err := csrf.Check(r); err != nil {
		httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemAdminCrossOrigin, Status: http.StatusForbidden,
			Detail: "a state-changing admin request from another origin is refused (" + err.Error() +
				"); send it from a client that is not a web page, e.g. curl, with Content-Type: application/json"})
		return true
	}
	if !jsonContentType(r.Header) {
		httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemAdminContentType, Status: http.StatusUnsupportedMediaType,
			Detail: "a state-changing admin request needs Content-Type: application/json, even without a body " +
				"(a web page cannot send that to another origin without a CORS preflight, which the admin listener refuses)"})
		return true
	}
	return false
}

// probeOnly marks, in a request's context, a probe that passed none of
// the admin checks: it gets the status alone.
type probeOnly struct{}

// authorized reports whether r passes the admin listener's identity
// checks: the token when there is one (want is the hash of its
// Authorization header), else a Host naming this machine.
func authorized(r *http.Request, token string, want [sha256.Size]byte) bool {
	if token == "" {
		return loopbackHost(r.Host)
	}
	got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// jsonContentType reports whether h has exactly one Content-Type, and it is
// application/json (any parameters, any case).
func jsonContentType(h http.Header) bool {
	v := h.Values("Content-Type")
	if len(v) != 1 {
		return false
	}
	mt, _, err := mime.ParseMediaType(v[0])
	return err == nil && mt == "application/json"
}

// loopbackHost reports whether a request's Host names this machine:
// localhost or a loopback address, with any port. An empty Host (HTTP/1.0
// health checks) passes: browsers always send one.
func loopbackHost(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return identity.LoopbackHost(host)
}
