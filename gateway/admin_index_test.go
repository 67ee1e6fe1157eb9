package gateway_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/gateway"
)

// indexLinks are the pages the admin index must link to.
var indexLinks = []string{"/dashboard", "/metrics", "/policy", "/healthz", "/readyz"}

// An indexCase is a request to the admin listener, what it must get,
// and why.
type indexCase struct {
	adminCase
	reason string
}

// checkIndexCases sends each case to admin and checks its status; an
// answer of 200 to GET must be the HTML index linking every page.
func checkIndexCases(t *testing.T, admin string, cases []indexCase) {
	t.Helper()
	for _, c := range cases {
		resp, body := c.do(t, admin)
		if resp.StatusCode != c.want {
			t.Errorf("%s %s (%s): %d, want %d: %s", c.method, c.path, c.reason, resp.StatusCode, c.want, body)
			continue
		}
		if c.problem != "" && !strings.Contains(body, `"type":"`+c.problem+`"`) {
			t.Errorf("%s %s (%s): %s, want problem %s", c.method, c.path, c.reason, body, c.problem)
		}
		if c.want != 200 || c.method != "GET" {
			continue
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("%s %s (%s): Content-Type %q, want text/html", c.method, c.path, c.reason, ct)
		}
		for _, l := range indexLinks {
			if !strings.Contains(body, `href="`+l+`"`) {
				t.Errorf("%s %s (%s): the index does not link %s:\n%s", c.method, c.path, c.reason, l, body)
			}
		}
	}
}

// TestAdminIndex: the admin listener's root is an HTML index of its
// pages, behind the same checks as they are; other unknown paths are
// still 404.
func TestAdminIndex(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	port := g.admin[strings.LastIndex(g.admin, ":")+1:]
	checkIndexCases(t, g.admin, []indexCase{
		{adminCase{method: "GET", path: "/", want: 200}, "the root was a bare 404; it is where a browser lands first"},
		{adminCase{method: "HEAD", path: "/", want: 200}, "HEAD answers as GET does"},
		{adminCase{method: "GET", path: "/", host: "localhost:" + port, want: 200}, "a loopback Host passes as for every page"},
		{adminCase{method: "GET", path: "/", host: "rebind.example:" + port, want: 403, problem: gateway.ProblemAdminHost},
			"without a token, a page under another name (DNS rebinding) is refused, as for every page"},
		{adminCase{method: "GET", path: "/nowhere", want: 404}, "an unknown path is still not found"},
		{adminCase{method: "GET", path: "/index.html", want: 404}, "only the root is the index"},
		{adminCase{method: "GET", path: "/dashboard/", want: 404}, "the index does not catch paths under a page"},
	})
}

// TestAdminIndexWithToken: with an admin token, the index needs it as
// every other page does.
func TestAdminIndexWithToken(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_ADMIN_TOKEN", "s3cret-admin-token-0123")
	up := newUpstream(t)
	p := quickstart(t, up.URL, "  admin: 127.0.0.1:9090\n", "  admin: 0.0.0.0:9090\n  admin_token_env: TOLLGATE_TEST_ADMIN_TOKEN\n")
	g := start(t, p, "")
	auth := []string{"Authorization", "Bearer s3cret-admin-token-0123"}
	checkIndexCases(t, g.admin, []indexCase{
		{adminCase{method: "GET", path: "/", want: 401, problem: gateway.ProblemAdminUnauthorized}, "no token: refused, as every page is"},
		{adminCase{method: "GET", path: "/", header: []string{"Authorization", "Bearer wrong"}, want: 401, problem: gateway.ProblemAdminUnauthorized},
			"a wrong token: refused"},
		{adminCase{method: "GET", path: "/", header: auth, want: 200}, "the token: the index"},
		{adminCase{method: "GET", path: "/", host: "admin.internal.example", header: auth, want: 200}, "with the token, any Host, as for every page"},
		{adminCase{method: "GET", path: "/nowhere", header: auth, want: 404}, "an unknown path, with the token, is still not found"},
	})
}
