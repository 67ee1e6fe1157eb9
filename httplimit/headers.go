package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/policy"
)

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// setHeaders writes the draft-ietf-httpapi-ratelimit-headers fields
// (structured fields; names are plan, limit or group names, which the
// policy package restricts to token characters): RateLimit-Policy lists
// every budget that applied, RateLimit reports the most restrictive one, b,
// whose decision is d:
//
//	RateLimit-Policy: "free.second";q=10;w=1, "free.hour";q=1000;w=3600
//	RateLimit: "free.second";r=7;t=1
//
// t is the seconds until the full quota is back for an allowed request,
// and the seconds until this request would be allowed for a refusal, so
// that Retry-After (set by the caller) is never earlier than t.
func setHeaders(h http.Header, items policyItems, budgets []*policy.Budget, b *policy.Budget, d tollgate.Decision, legacy bool) {
	var pol string
	if len(budgets) == 1 {
		pol = items.of(budgets[0])
	} else {
		var sb strings.Builder
		for i, x := range budgets {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(items.of(x))
		}
		pol = sb.String()
	}
	t := ceilSeconds(d.ResetAfter)
	if !d.Allowed {
		t = max(1, ceilSeconds(d.RetryAfter))
	}
	q := strconv.FormatInt(b.Limit.Rate, 10)
	r := strconv.FormatInt(d.Remaining, 10)
	ts := strconv.FormatInt(t, 10)
	h.Set("RateLimit-Policy", pol)
	h.Set("RateLimit", `"`+b.Name+`";r=`+r+";t="+ts)
	if legacy {
		h.Set("X-RateLimit-Limit", q)
		h.Set("X-RateLimit-Remaining", r)
		h.Set("X-RateLimit-Reset", ts)
	}
}

// policyItems holds each budget of a policy as an item of the
// RateLimit-Policy field, made once when the middleware is built (the
// policy is immutable), so a request only looks them up.
type policyItems map[*policy.Budget]string

// policyItem returns b as one RateLimit-Policy item: "name";q=rate;w=seconds.
func policyItem(b *policy.Budget) string {
	return `"` + b.Name + `";q=` + strconv.FormatInt(b.Limit.Rate, 10) + ";w=" + strconv.FormatInt(ceilSeconds(b.Limit.Period), 10)
}

// newPolicyItems returns the items of every budget of p.
func newPolicyItems(p *policy.Policy) policyItems {
	items := policyItems{}
	for _, b := range p.Budgets() {
		items[b] = policyItem(b)
	}
	return items
}

// of returns b's item, made now if b is not in the table.
func (items policyItems) of(b *policy.Budget) string {
	if s, ok := items[b]; ok {
		return s
	}
	return policyItem(b)
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
	ProblemRateLimited   = "urn:tollgate:problem:rate-limited"
	ProblemInvalidKey    = "urn:tollgate:problem:invalid-api-key"
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
