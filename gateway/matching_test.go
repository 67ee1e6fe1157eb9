package gateway_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/policy"
)

// matchingConfig is the quickstart verifying JWTs from idp, with routes
// to upstream that match on a path parameter, a header and a host and
// count their limits per path parameter, per subject and header, and per
// claim (fixture.Matching).
func matchingConfig(t *testing.T, idp *jwttest.IdP, upstream string) *policy.Policy {
	t.Helper()
	return quickstart(t, upstream, fixture.Matching(idp.JWKSURL(), upstream)...)
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
