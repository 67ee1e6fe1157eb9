package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
)

// TestJWKSUnavailable: while the identity provider's JWKS cannot be
// fetched, a token is answered 503 with a Retry-After (its type says
// the IdP's keys are unavailable), not 401; the failures are logged and
// counted, and /readyz says degraded, naming the JWKS. Once the JWKS is
// served again, the next token after min_refresh_interval fetches it and
// passes, /readyz is ready, and a token the keys refute is a 401.
func TestJWKSUnavailable(t *testing.T) {
	rsa := jwttest.NewKey(t, "RS256", "rsa-1")
	idp := jwttest.NewIdP(t, rsa)
	idp.Break(http.StatusServiceUnavailable, "down for maintenance")
	up := newUpstream(t)
	edits := fixture.JWT(idp.JWKSURL())
	edits[1] += "\n    min_refresh_interval: 1s"
	g := start(t, quickstart(t, up.URL, edits...), "")
	token := "Bearer " + jwttest.Sign(t, rsa, claims("carol"))
	forged := "Bearer " + jwttest.Sign(t, jwttest.NewKey(t, "RS256", "rsa-1"), claims("carol"))
	for _, c := range []struct {
		name, why  string
		mend       bool // the JWKS is served again before the step
		auth       string
		status     int
		problem    string // the problem type, "" for none
		retryAfter string
		ready      bool
	}{
		{"unreachable", "the JWKS answers 503: the token cannot be checked", false, token, 503, httplimit.ProblemKeysUnavailable, "1", false},
		{"unreachable again", "a second token fails as fast, and is not charged as an invalid key", false, token, 503, httplimit.ProblemKeysUnavailable, "1", false},
		{"recovered", "the JWKS is served again: the token is checked, and passes", true, token, 200, "", "", true},
		{"bad signature", "the keys are served and refute the token", false, forged, 401, httplimit.ProblemInvalidToken, "", true},
	} {
		if c.mend {
			idp.Mend()
		}
		var resp *http.Response
		var body []byte
		// After a mend, the JWKS is fetched again by the first token
		// min_refresh_interval (1 s) after the last fetch.
		waitFor(t, c.name, 10*time.Second, func() bool {
			resp, body = getBody(t, g.public+"/api/items", "Authorization", c.auth)
			return !c.mend || resp.StatusCode == c.status
		})
		var p httplimit.Problem
		json.Unmarshal(body, &p)
		if resp.StatusCode != c.status || p.Type != c.problem || resp.Header.Get("Retry-After") != c.retryAfter {
			t.Fatalf("%s: %d %s, Retry-After %q; want %d %q, Retry-After %q (%s)", c.name, resp.StatusCode, body,
				resp.Header.Get("Retry-After"), c.status, c.problem, c.retryAfter, c.why)
		}
		if c.problem == httplimit.ProblemKeysUnavailable &&
			(resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Title, "keys unavailable") || resp.Header.Get("WWW-Authenticate") != "") {
			t.Fatalf("%s: Content-Type %q, title %q, WWW-Authenticate %q", c.name, resp.Header.Get("Content-Type"), p.Title, resp.Header.Get("WWW-Authenticate"))
		}
		ready := readyz(t, g)
		if got := strings.Contains(ready, `"status":"ready"`); got != c.ready ||
			!c.ready && (!strings.Contains(ready, `"status":"degraded"`) || !strings.Contains(ready, "jwks unavailable") || !strings.Contains(ready, "503")) {
			t.Fatalf("%s: /readyz %s, want ready %v (%s)", c.name, ready, c.ready, c.why)
		}
		if c.name == "unreachable again" {
			if n := metric(t, g, "tollgate_jwks_fetch_errors_total"); n < 1 {
				t.Fatalf("tollgate_jwks_fetch_errors_total = %v while the JWKS answers 503", n)
			}
			if !strings.Contains(g.logs.String(), `"msg":"fetching the JWKS failed"`) {
				t.Fatalf("no failed fetch logged:\n%s", g.logs.String())
			}
		}
	}
}
