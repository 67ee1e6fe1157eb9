package gateway_test

import (
	"context"
	"net/http"
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

func codeOf(t *testing.T, url string, header ...string) int {
	t.Helper()
	return get(t, url, header...).StatusCode
}

// TestRouteMatchingAndKeys: routes match path parameters, headers and
// hosts, and their limits are counted per what limit_key names (a path
// parameter shared by every subject, a header value per subject beside
// the plan, a JWT claim), each value hashed: no value reaches a store key.
func TestRouteMatchingAndKeys(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		ec := jwttest.NewKey(t, "ES256", "ec-1")
		idp := jwttest.NewIdP(t, ec)
		g := startStill(t, matchingConfig(t, idp, policy.BuiltinEcho), redisURL) // fixed windows of a minute
		u := g.public

		// Per path parameter: 3 exports of user-xyzzy a minute, whoever
		// asks and however the path is spelt.
		for i := 0; i < 3; i++ {
			if c := codeOf(t, u+"/api/users/user-xyzzy/export", "X-API-Key", freeKey); c != 200 {
				t.Fatalf("export %d: %d", i, c)
			}
		}
		for _, c := range []struct {
			path, key string
			want      int
		}{
			{"/api/users/user-xyzzy/export", freeKey, 429},
			{"/api/users/user-xyzzy/export", proKey, 429},
			{"/API/Users/USER-XYZZY/Export/", proKey, 429},
			{"/api/users/user-other/export", freeKey, 200},
		} {
			if got := codeOf(t, u+c.path, "X-API-Key", c.key); got != c.want {
				t.Errorf("%s: %d, want %d", c.path, got, c.want)
			}
		}

		// Per subject and X-Org, beside the plan: 5 for org-plugh, then
		// another org or another subject has its own 5.
		for i := 0; i < 5; i++ {
			if c := codeOf(t, u+"/api/org/items", "X-API-Key", proKey, "X-Org", "org-plugh"); c != 200 {
				t.Fatalf("org %d: %d", i, c)
			}
		}
		if c := codeOf(t, u+"/api/org/items", "X-API-Key", proKey, "X-Org", "ORG-PLUGH"); c != 429 {
			t.Errorf("the 6th for org-plugh (in other case): %d, want 429", c)
		}
		if c := codeOf(t, u+"/api/org/items", "X-API-Key", proKey, "X-Org", "org-other"); c != 200 {
			t.Errorf("another org: %d", c)
		}
		if c := codeOf(t, u+"/api/org/items", "X-API-Key", freeKey, "X-Org", "org-plugh"); c != 200 {
			t.Errorf("another subject: %d", c)
		}
		if c := codeOf(t, u+"/api/org/items", "X-API-Key", proKey); c != 200 {
			t.Errorf("without X-Org (the api route): %d", c)
		}
		req, _ := http.NewRequest("GET", u+"/api/org/items", nil)
		req.Header["X-Org"] = []string{"org-other", "org-plugh"}
		req.Header.Set("X-API-Key", proKey)
		if resp, err := client.Do(req); err != nil || resp.StatusCode != 400 {
			t.Errorf("X-Org twice: %v %v, want 400", resp, err)
		} else {
			resp.Body.Close()
		}

		// Per claim: two subjects of org acme-plugh share 2 a minute.
		tok := func(sub, org string) string {
			return "Bearer " + jwttest.Sign(t, ec, jwttest.Valid(sub, stillTime).With("org", org))
		}
		for _, c := range []struct {
			auth string
			want int
		}{
			{tok("alice", "acme-plugh"), 200}, {tok("bob", "acme-plugh"), 200}, {tok("carol", "acme-plugh"), 429},
			{tok("alice", "other-org"), 200},
		} {
			if got := codeOf(t, u+"/api/claims/x", "Authorization", c.auth); got != c.want {
				t.Errorf("claims: %d, want %d", got, c.want)
			}
		}

		// By host: 1 a minute on admin.example.com, the api route else.
		for i, want := range []int{200, 429} {
			req, _ := http.NewRequest("GET", u+"/api/items", nil)
			req.Host = "admin.example.com"
			req.Header.Set("X-API-Key", proKey)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("admin host %d: %d, want %d", i, resp.StatusCode, want)
			}
		}
		if c := codeOf(t, u+"/api/items", "X-API-Key", proKey); c != 200 {
			t.Errorf("another host: %d", c)
		}

		if redisURL != "" {
			c, err := srv.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			keys, err := c.Do(context.Background(), c.B().Keys().Pattern("rl:*").Build()).AsStrSlice()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys: %v %v", keys, err)
			}
			for _, k := range keys {
				if strings.Contains(strings.ToLower(k), "xyzzy") || strings.Contains(strings.ToLower(k), "plugh") {
					t.Errorf("a store key holds a raw value: %s", k)
				}
			}
		}
		if l := strings.ToLower(g.logs.String()); strings.Contains(l, "plugh") {
			t.Errorf("the logs hold a raw header or claim value")
		}
	})
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
