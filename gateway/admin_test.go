package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/policy"
)

// adminCase is one request to the admin listener and what it must get.
type adminCase struct {
	name         string
	method, path string
	host         string   // "" keeps the listener's address
	header       []string // name, value pairs; Content-Type may repeat
	body         string
	want         int
	problem      string // the problem type of a refusal
}

func (c adminCase) do(t *testing.T, admin string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(c.method, admin+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.body == "" {
		req.Body, req.ContentLength = nil, 0
	}
	if c.host != "" {
		req.Host = c.host
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Add(c.header[i], c.header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// run sends each case and checks its status and problem type; for a
// rollback it also checks that the policy rolled back exactly when it was
// admitted.
func runAdminCases(t *testing.T, g *running, cases []adminCase, header ...string) {
	t.Helper()
	rollbacks := func() string {
		_, body := getBody(t, g.admin+"/metrics", header...)
		return regexp.MustCompile(`(?m)^tollgate_policy_reloads_total\{result="rollback"\} (\d+)$`).FindString(string(body))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.header = append(append([]string(nil), c.header...), header...)
			before := rollbacks()
			resp, body := c.do(t, g.admin)
			if resp.StatusCode != c.want {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, body, c.want)
			}
			if c.problem != "" && (resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"type":"`+c.problem+`"`)) {
				t.Errorf("refusal %s %s, want problem %s", resp.Header.Get("Content-Type"), body, c.problem)
			}
			if acao := resp.Header.Get("Access-Control-Allow-Origin"); acao != "" {
				t.Errorf("Access-Control-Allow-Origin: %s", acao)
			}
			if c.path == "/policy/rollback" {
				if after := rollbacks(); (after != before) != (c.want == 200) {
					t.Errorf("rollbacks went from %q to %q", before, after)
				}
			}
		})
	}
}

// rollbackTarget starts a gateway (on the quickstart, so no admin token
// unless p says otherwise) and reloads as many more versions as a gateway
// keeps to roll back to, so that every admitted rollback (each steps one
// version back) succeeds.
func rollbackTarget(t *testing.T, p *policy.Policy) *running {
	t.Helper()
	g := start(t, p, "")
	for i := 0; i < 16; i++ {
		p2 := *p
		p2.Version += fmt.Sprintf("-%d", i)
		if err := g.g.Reload(&p2); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// TestAdminRequestChecks is the table of what the admin listener (loopback,
// no token) admits: state-changing requests only from the same origin (or
// from no browser at all) and only as application/json; any request only
// under a loopback Host.
func TestAdminRequestChecks(t *testing.T) {
	up := newUpstream(t)
	g := rollbackTarget(t, config(t, up.URL, "[]"))
	self := strings.TrimPrefix(g.admin, "http://")
	port := self[strings.LastIndex(self, ":")+1:]
	const json = "application/json"
	const (
		crossOrigin = gateway.ProblemAdminCrossOrigin
		contentType = gateway.ProblemAdminContentType
		badHost     = gateway.ProblemAdminHost
	)
	rb := func(name string, want int, problem string, header ...string) adminCase {
		return adminCase{name: name, method: "POST", path: "/policy/rollback", header: header, want: want, problem: problem}
	}
	runAdminCases(t, g, []adminCase{
		// Sec-Fetch-Site, as every current browser sends it.
		rb("Sec-Fetch-Site cross-site", 403, crossOrigin, "Sec-Fetch-Site", "cross-site", "Content-Type", json),
		rb("Sec-Fetch-Site same-site (another port)", 403, crossOrigin, "Sec-Fetch-Site", "same-site", "Content-Type", json, "Origin", "http://127.0.0.1:1"),
		rb("Sec-Fetch-Site cross-site with an Origin that matches", 403, crossOrigin, "Sec-Fetch-Site", "cross-site", "Origin", "http://"+self, "Content-Type", json),
		rb("Sec-Fetch-Site same-origin", 200, "", "Sec-Fetch-Site", "same-origin", "Origin", "http://"+self, "Content-Type", json),
		rb("Sec-Fetch-Site none (typed by the user)", 200, "", "Sec-Fetch-Site", "none", "Content-Type", json),
		rb("Sec-Fetch-Site same-origin, text/plain", 415, contentType, "Sec-Fetch-Site", "same-origin", "Content-Type", "text/plain"),
		rb("Sec-Fetch-Site unknown value", 403, crossOrigin, "Sec-Fetch-Site", "same-origin-ish", "Content-Type", json),
		// Origin alone, as older browsers send it.
		rb("Origin of another site", 403, crossOrigin, "Origin", "http://evil.example", "Content-Type", json),
		rb("Origin on another port of loopback", 403, crossOrigin, "Origin", "http://127.0.0.1:1", "Content-Type", json),
		rb("Origin localhost for Host 127.0.0.1", 403, crossOrigin, "Origin", "http://localhost:"+port, "Content-Type", json),
		rb("Origin null (sandboxed frame, file://)", 403, crossOrigin, "Origin", "null", "Content-Type", json),
		rb("Origin that matches", 200, "", "Origin", "http://"+self, "Content-Type", json),
		rb("no browser headers (curl)", 200, "", "Content-Type", json),
		// Content types a page can send anywhere without a preflight, and near misses.
		rb("no content type", 415, contentType),
		rb("text/plain", 415, contentType, "Content-Type", "text/plain"),
		rb("text/plain with a JSON body", 415, contentType, "Content-Type", "text/plain;charset=UTF-8"),
		rb("form urlencoded", 415, contentType, "Content-Type", "application/x-www-form-urlencoded"),
		rb("multipart", 415, contentType, "Content-Type", "multipart/form-data; boundary=x"),
		rb("text/json", 415, contentType, "Content-Type", "text/json"),
		rb("application/jsonp", 415, contentType, "Content-Type", "application/jsonp"),
		rb("application/problem+json", 415, contentType, "Content-Type", "application/problem+json"),
		rb("a list of types", 415, contentType, "Content-Type", "application/json, text/plain"),
		rb("two Content-Type headers", 415, contentType, "Content-Type", json, "Content-Type", "text/plain"),
		rb("malformed parameters", 415, contentType, "Content-Type", "application/json; charset"),
		rb("JSON with a charset", 200, "", "Content-Type", "application/json; charset=utf-8"),
		rb("JSON in capitals", 200, "", "Content-Type", "Application/JSON"),
		// Every state-changing method, whatever its body or spelling.
		{name: "PUT key, text/plain", method: "PUT", path: "/keys/x", body: `{"plan":"free"}`, header: []string{"Content-Type", "text/plain"}, want: 415, problem: contentType},
		{name: "PUT key cross-site", method: "PUT", path: "/keys/x", body: `{"plan":"free"}`, header: []string{"Sec-Fetch-Site", "cross-site", "Content-Type", json}, want: 403, problem: crossOrigin},
		{name: "PUT tenant, form", method: "PUT", path: "/tenants/demo", body: `plan=pro`, header: []string{"Content-Type", "application/x-www-form-urlencoded"}, want: 415, problem: contentType},
		{name: "PUT tenant, JSON", method: "PUT", path: "/tenants/demo", body: `{"plan":"pro"}`, header: []string{"Content-Type", json}, want: 204},
		{name: "DELETE tenant, no content type", method: "DELETE", path: "/tenants/demo", want: 415, problem: contentType},
		{name: "DELETE tenant, other origin", method: "DELETE", path: "/tenants/demo", header: []string{"Origin", "http://evil.example", "Content-Type", json}, want: 403, problem: crossOrigin},
		{name: "DELETE tenant, JSON", method: "DELETE", path: "/tenants/demo", header: []string{"Content-Type", json}, want: 204},
		{name: "DELETE key, no content type", method: "DELETE", path: "/keys/x", want: 415, problem: contentType},
		{name: "lower-case post is not safe", method: "post", path: "/policy/rollback", header: []string{"Origin", "http://evil.example"}, want: 403, problem: crossOrigin},
		{name: "lower-case post, text/plain", method: "post", path: "/policy/rollback", header: []string{"Content-Type", "text/plain"}, want: 415, problem: contentType},
		{name: "lower-case post, JSON, has no endpoint", method: "post", path: "/policy/rollback", header: []string{"Content-Type", json}, want: 405},
		{name: "lower-case get is not safe", method: "get", path: "/policy", header: []string{"Sec-Fetch-Site", "cross-site"}, want: 403, problem: crossOrigin},
		{name: "PATCH, text/plain", method: "PATCH", path: "/tenants/demo", header: []string{"Content-Type", "text/plain"}, want: 415, problem: contentType},
		{name: "an invented method", method: "ROLLBACK", path: "/policy/rollback", header: []string{"Sec-Fetch-Site", "cross-site"}, want: 403, problem: crossOrigin},
		// Safe methods change nothing and pass.
		{name: "GET rollback (navigation) does not roll back", method: "GET", path: "/policy/rollback", header: []string{"Sec-Fetch-Site", "cross-site"}, want: 405},
		{name: "CORS preflight gets no CORS headers", method: "OPTIONS", path: "/keys/x", header: []string{"Origin", "http://evil.example",
			"Access-Control-Request-Method", "PUT", "Access-Control-Request-Headers", "content-type"}, want: 405},
		{name: "GET policy from a page on another site", method: "GET", path: "/policy", header: []string{"Sec-Fetch-Site", "cross-site"}, want: 200},
		{name: "HEAD healthz", method: "HEAD", path: "/healthz", want: 200},
		// The Host, without a token: a DNS-rebinding page sends its own name.
		{name: "Host rebind.example reads", method: "GET", path: "/overrides", host: "rebind.example:" + port, want: 403, problem: badHost},
		{name: "Host rebind.example rolls back same-origin", method: "POST", path: "/policy/rollback", host: "rebind.example:" + port,
			header: []string{"Sec-Fetch-Site", "same-origin", "Origin", "http://rebind.example:" + port, "Content-Type", json}, want: 403, problem: badHost},
		{name: "Host 127.0.0.1.rebind.example", method: "GET", path: "/overrides", host: "127.0.0.1.rebind.example", want: 403, problem: badHost},
		{name: "Host localhost.", method: "GET", path: "/overrides", host: "localhost.:" + port, want: 403, problem: badHost},
		{name: "Host 0.0.0.0", method: "GET", path: "/overrides", host: "0.0.0.0:" + port, want: 403, problem: badHost},
		{name: "Host sub.localhost", method: "GET", path: "/overrides", host: "sub.localhost:" + port, want: 403, problem: badHost},
		{name: "Host localhost", method: "GET", path: "/overrides", host: "localhost:" + port, want: 200},
		{name: "Host LOCALHOST without a port", method: "GET", path: "/overrides", host: "LOCALHOST", want: 200},
		{name: "Host 127.0.0.2", method: "GET", path: "/overrides", host: "127.0.0.2:" + port, want: 200},
		{name: "Host [::1]", method: "GET", path: "/overrides", host: "[::1]:" + port, want: 200},
		{name: "Host localhost, rollback", method: "POST", path: "/policy/rollback", host: "localhost:" + port,
			header: []string{"Origin", "http://localhost:" + port, "Content-Type", json}, want: 200},
	})
	// HTTP/1.0 health checks send no Host; browsers always do.
	if code := rawStatus(t, self, "GET /healthz HTTP/1.0\r\n\r\n"); code != 200 {
		t.Errorf("HTTP/1.0 /healthz without a Host: %d", code)
	}
	if code := rawStatus(t, self, "POST /policy/rollback HTTP/1.0\r\nContent-Length: 0\r\n\r\n"); code != 415 {
		t.Errorf("HTTP/1.0 rollback without a Host or a content type: %d", code)
	}
}

// TestAdminRequestChecksWithToken: with a token the Host may be any name
// (a page cannot send the token), and state-changing requests still need
// the same origin and JSON.
func TestAdminRequestChecksWithToken(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_ADMIN_TOKEN", "s3cret-admin-token-0123")
	up := newUpstream(t)
	p := quickstart(t, up.URL, "  admin: 127.0.0.1:9090\n", "  admin: 0.0.0.0:9090\n  admin_token_env: TOLLGATE_TEST_ADMIN_TOKEN\n")
	g := rollbackTarget(t, p)
	const json = "application/json"
	runAdminCases(t, g, []adminCase{
		{name: "any Host", method: "GET", path: "/overrides", host: "admin.internal.example", want: 200},
		{name: "cross-site", method: "POST", path: "/policy/rollback", header: []string{"Sec-Fetch-Site", "cross-site", "Content-Type", json},
			want: 403, problem: gateway.ProblemAdminCrossOrigin},
		{name: "text/plain", method: "POST", path: "/policy/rollback", header: []string{"Content-Type", "text/plain"},
			want: 415, problem: gateway.ProblemAdminContentType},
		{name: "JSON", method: "POST", path: "/policy/rollback", header: []string{"Content-Type", json}, want: 200},
	}, "Authorization", "Bearer s3cret-admin-token-0123")
	runAdminCases(t, g, []adminCase{
		{name: "no token", method: "POST", path: "/policy/rollback", header: []string{"Content-Type", json},
			want: 401, problem: gateway.ProblemAdminUnauthorized},
	})
}

// TestAdminRefusesFraming: a page on another origin framed
// /dashboard#try=<candidate> every 3 s, and the dashboard replayed it for
// the framing page: 6.6 CPU-seconds in 18 s. No admin response may be
// framed, whatever it answers: every one, refusals and errors included,
// says X-Frame-Options: DENY and frame-ancestors 'none'.
func TestAdminRefusesFraming(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	for _, c := range []struct {
		method, path, host, contentType, reason string
	}{
		{"GET", "/dashboard", "", "", "the page that was framed"},
		{"GET", "/dashboard/data", "", "", "what the page reads"},
		{"GET", "/dashboard/history", "", "", "what the page reads"},
		{"GET", "/policy", "", "", "JSON a frame could show"},
		{"GET", "/overrides", "", "", "JSON a frame could show"},
		{"GET", "/metrics", "", "", "text a frame could show"},
		{"GET", "/recording", "", "", "the recording export"},
		{"GET", "/healthz", "", "", "a probe, answered to anyone"},
		{"GET", "/readyz", "", "", "a probe, answered to anyone"},
		{"GET", "/nowhere", "", "", "a 404"},
		{"POST", "/simulate", "", "text/plain", "a refusal: not JSON"},
		{"GET", "/dashboard", "rebind.example", "", "a refusal: a rebinding Host"},
	} {
		req, _ := http.NewRequest(c.method, g.admin+c.path, strings.NewReader("{}"))
		if c.host != "" {
			req.Host = c.host
		}
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if xfo := resp.Header.Values("X-Frame-Options"); len(xfo) != 1 || xfo[0] != "DENY" {
			t.Errorf("%s %s (%s): %d with X-Frame-Options %q, want DENY", c.method, c.path, c.reason, resp.StatusCode, xfo)
		}
		if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || !strings.Contains(csp[0], "frame-ancestors 'none'") {
			t.Errorf("%s %s (%s): %d with Content-Security-Policy %q, want frame-ancestors 'none'", c.method, c.path, c.reason, resp.StatusCode, csp)
		}
	}
}
