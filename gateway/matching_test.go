package gateway_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/policy"
)

// matchingConfig is the quickstart verifying JWTs from idp, with routes
// that match on a path parameter, a header and a host and count their
// limits per path parameter, per subject and header, and per claim.
func matchingConfig(t *testing.T, idp *jwttest.IdP, upstream string) *policy.Policy {
	t.Helper()
	p := quickstart(t, upstream, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, `trusted_proxies: []
  jwt:
    jwks_url: `+idp.JWKSURL()+`
    algorithms: [ES256]`,
		"  - name: api\n", strings.ReplaceAll(`  - name: user-export            # 3 a minute per user id, whoever asks
    path: "/api/users/{id}/export"
    upstream: builtin:echo
    limit: {algorithm: fixed_window, rate: 3, period: 1m}
    limit_key: ["path:id"]
  - name: org                    # 5 a minute per subject and X-Org, beside the plan
    path: /api/org
    match: prefix
    headers: {X-Org: "*"}
    upstream: builtin:echo
    limit: {algorithm: fixed_window, rate: 5, period: 1m}
    limit_mode: add
    limit_key: [subject, "header:X-Org"]
  - name: by-claim               # 2 a minute per token's org claim
    path: /api/claims/
    upstream: builtin:echo
    limit: {algorithm: fixed_window, rate: 2, period: 1m}
    limit_key: ["claim:org"]
  - name: admin-host             # 1 a minute per subject on the admin host
    path: /api/
    host: admin.example.com
    upstream: builtin:echo
    limit: {algorithm: fixed_window, rate: 1, period: 1m}
  - name: api
`, "builtin:echo", upstream))
	return p
}

// TestRouteHeadersForwardedAsRead: a header a route matches or keys on
// reaches the upstream as the gateway read it: an underscore spelling
// (which CGI-style servers read as the same header) is removed, and a
// Connection header cannot strip it.
func TestRouteHeadersForwardedAsRead(t *testing.T) {
	up := newUpstream(t)
	g := start(t, matchingConfig(t, jwttest.NewIdP(t), up.URL), "")
	if code := sendRaw(t, g.public+"/api/org/items", [][2]string{{"X-Api-Key", proKey}, {"X-Org", "org-a"}, {"X_Org", "org-b"}, {"Connection", "X-Org"}}); code != 200 {
		t.Fatalf("status %d", code)
	}
	h := up.lastHeader()
	if got := h.Values("X-Org"); len(got) != 1 || got[0] != "org-a" {
		t.Errorf("the upstream got X-Org %q, want the org-a charged", got)
	}
	for name := range h {
		if strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "x-org") && name != "X-Org" {
			t.Errorf("the upstream got %s: %q", name, h[name])
		}
	}
}
