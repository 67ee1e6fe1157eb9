package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/engine"
)

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
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
	ProblemInvalidToken  = "urn:tollgate:problem:invalid-token"
	ProblemUnavailable   = "urn:tollgate:problem:limiter-unavailable"
	ProblemNotFound      = "urn:tollgate:problem:no-route"
	ProblemBadRequest    = "urn:tollgate:problem:bad-request"
	ProblemBadGateway    = "urn:tollgate:problem:bad-gateway"
	ProblemUpstreamSlow  = "urn:tollgate:problem:gateway-timeout"
	ProblemLoginLocked   = "urn:tollgate:problem:login-locked"
	ProblemTooManyFailed = "urn:tollgate:problem:too-many-failures"
	// ProblemTooManyInFlight answers a request over a concurrency limit.
	ProblemTooManyInFlight = "urn:tollgate:problem:too-many-in-flight"
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
