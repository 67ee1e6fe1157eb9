package policy_test

import (
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

const matchRoutes = `  - {name: user-export, path: "/users/{id}/export", upstream: builtin:echo, cost: 10}
  - {name: user-me, path: /users/me/export, upstream: builtin:echo}
  - {name: user-files, path: "/users/{id}/files/", upstream: builtin:echo}
  - {name: users, path: /users, match: prefix, upstream: builtin:echo}
  - {name: exact-root, path: /, match: exact, upstream: builtin:echo}
  - {name: admin-host, path: /api/, host: admin.example.com, upstream: builtin:echo}
  - {name: any-sub, path: /api/, host: "*.example.com", upstream: builtin:echo}
  - {name: gold, path: /api/, headers: {X-Tier: gold}, upstream: builtin:echo}
  - {name: csv, path: /api/, query: {format: csv}, upstream: builtin:echo}
  - {name: any-debug, path: /api/, query: {debug: "*"}, headers: {X-Tier: gold}, upstream: builtin:echo}
  - {name: greeter, path: /helloworld.Greeter/, upstream: builtin:echo}
`

// TestMatchRequest: path parameters match one whole segment, literal
// paths beat parameters, the most specific path wins before
// conditions, and among routes of one path the one with more conditions
// the request meets.
func TestMatchRequest(t *testing.T) {
	p, err := policy.Parse([]byte(valid+matchRoutes), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type req struct {
		path, host string
		header     http.Header
		query      string
	}
	for _, c := range []struct {
		r      req
		want   string
		params map[string]string
	}{
		{req{path: "/users/42/export"}, "user-export", map[string]string{"id": "42"}},
		{req{path: "/users/42/export/"}, "user-export", map[string]string{"id": "42"}},
		{req{path: "/Users/ABC/Export"}, "user-export", map[string]string{"id": "abc"}},
		{req{path: "/users/me/export"}, "user-me", nil},
		{req{path: "/users/42/files/a/b"}, "user-files", map[string]string{"id": "42"}},
		{req{path: "/users/42/files"}, "user-files", map[string]string{"id": "42"}},
		{req{path: "/users/42/other"}, "users", nil},
		{req{path: "/users"}, "users", nil},
		{req{path: "/usersx"}, "", nil},
		{req{path: "/"}, "exact-root", nil},
		{req{path: "/nothing"}, "", nil},
		{req{path: "/api/x"}, "api", nil},
		{req{path: "/api/x", host: "admin.example.com:8443"}, "admin-host", nil},
		{req{path: "/api/x", host: "ADMIN.example.com"}, "admin-host", nil},
		{req{path: "/api/x", host: "eu.example.com"}, "any-sub", nil},
		{req{path: "/api/x", host: "example.com"}, "api", nil},
		{req{path: "/api/x", host: "evilexample.com"}, "api", nil},
		{req{path: "/api/x", header: http.Header{"X-Tier": {"GOLD"}}}, "gold", nil},
		{req{path: "/api/x", header: http.Header{"X-Tier": {"silver"}}}, "api", nil},
		{req{path: "/api/x", query: "format=CSV"}, "csv", nil},
		{req{path: "/api/x", query: "FORMAT=csv"}, "csv", nil},
		{req{path: "/api/x", query: "debug=", header: http.Header{"X-Tier": {"gold"}}}, "any-debug", nil},
		{req{path: "/api/export"}, "export", nil},
		// A prefix's segments all come before the rest of the path: none
		// is a last segment that loses a format extension (a gRPC
		// service's prefix, /package.Service/, matches its methods).
		{req{path: "/helloworld.Greeter/SayHello"}, "greeter", nil},
		{req{path: "/helloworld.greeter/sayhello.json"}, "greeter", nil},
		{req{path: "/helloworld/SayHello"}, "", nil},
	} {
		q, _ := url.ParseQuery(c.r.query)
		r, ps := p.MatchRequest(policy.RouteRequest{Method: "GET", Path: c.r.path, Host: c.r.host, Header: c.r.header, Query: q})
		got := ""
		if r != nil {
			got = r.Name
		}
		if got != c.want {
			t.Errorf("%+v: route %q, want %q", c.r, got, c.want)
			continue
		}
		for k, v := range c.params {
			if ps[k] != v {
				t.Errorf("%+v: param %s = %q, want %q", c.r, k, ps[k], v)
			}
		}
	}
	for _, c := range []struct {
		header http.Header
		query  string
	}{
		{http.Header{"X-Tier": {"gold", "silver"}}, ""},
		{nil, "format=csv&format=json"},
		{nil, "format=csv&FORMAT=json"},
	} {
		q, _ := url.ParseQuery(c.query)
		if why := p.Ambiguous(policy.RouteRequest{Path: "/api/x", Header: c.header, Query: q}); why == "" {
			t.Errorf("%v %q: not ambiguous", c.header, c.query)
		}
	}
	if why := p.Ambiguous(policy.RouteRequest{Path: "/api/x", Header: http.Header{"X-Other": {"a", "b"}}}); why != "" {
		t.Errorf("a header no route reads: %s", why)
	}
}

func TestMatchInvalid(t *testing.T) {
	for _, c := range []struct {
		name, route string
		want        []string
	}{
		{"exact with a slash", `{name: x, path: /x/, match: exact, upstream: builtin:echo}`, []string{"routes[3].match", "conflicts"}},
		{"unknown match", `{name: x, path: /x, match: glob, upstream: builtin:echo}`, []string{"routes[3].match", "exact or prefix"}},
		{"a host with a port", `{name: x, path: /x, host: "a.example:80", upstream: builtin:echo}`, []string{"routes[3].host", "no port"}},
		{"a host with a scheme", `{name: x, path: /x, host: "https://a.example", upstream: builtin:echo}`, []string{"routes[3].host"}},
		{"a credential header", `{name: x, path: /x, headers: {Authorization: x}, upstream: builtin:echo}`, []string{"routes[3].headers.Authorization", "gateway's"}},
		{"a forwarding header", `{name: x, path: /x, headers: {X-Forwarded-Host: x}, upstream: builtin:echo}`, []string{"not a header a route may match"}},
		{"an empty value", `{name: x, path: /x, query: {a: ""}, upstream: builtin:echo}`, []string{"routes[3].query.a", `"*" for any value`}},
		{"a key without a limit", `{name: x, path: /x, limit_key: [subject], upstream: builtin:echo}`, []string{"routes[3].limit_key", "set limit too"}},
		{"an unknown key part", `{name: x, path: /x, limit: {rate: 1, period: 1s}, limit_key: [cookie:a], upstream: builtin:echo}`, []string{"routes[3].limit_key[0]", "want subject, host"}},
		{"an unknown parameter", `{name: x, path: "/x/{id}", limit: {rate: 1, period: 1s}, limit_key: ["path:uid"], upstream: builtin:echo}`, []string{"no parameter {uid}"}},
		{"a claim without JWT", `{name: x, path: /x, limit: {rate: 1, period: 1s}, limit_key: ["claim:org"], upstream: builtin:echo}`, []string{"configure identity.jwt"}},
		{"a part twice", `{name: x, path: /x, limit: {rate: 1, period: 1s}, limit_key: [host, host], upstream: builtin:echo}`, []string{"host is listed twice"}},
		{"a shared key that adds", `{name: x, path: /x, limit: {rate: 1, period: 1s}, limit_mode: add, limit_key: ["header:X-Org"], upstream: builtin:echo}`, []string{"shared by subjects", "limit_mode: replace"}},
		{"the same match twice", `{name: x, path: "/api/{a}", upstream: builtin:echo}
  - {name: y, path: "/api/{b}", upstream: builtin:echo}`, []string{"routes[4].path", "another route already matches"}},
	} {
		src := valid + "  - " + c.route + "\n"
		if _, err := policy.Parse([]byte(src), "p.yaml"); err == nil {
			t.Errorf("%s: accepted", c.name)
		} else {
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
				}
			}
		}
	}
}

// TestClientChosenKeyWarns: a route limit that replaces the plan and is
// counted only per something the client chooses loads, with a warning
// that a new value each time escapes both; per a claim (the issuer's) or
// with subject it loads without one.
func TestClientChosenKeyWarns(t *testing.T) {
	for _, c := range []struct {
		key  string
		warn bool
	}{{`["header:X-Org"]`, true}, {`["path:id"]`, true}, {`[host]`, true}, {`[subject, "header:X-Org"]`, false}} {
		b, err := os.ReadFile("../examples/quickstart.yaml")
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Replace(string(b), "  - name: api\n", `  - name: keyed
    path: "/api/k/{id}"
    upstream: builtin:echo
    limit: {rate: 5, period: 1m}
    limit_key: `+c.key+"\n  - name: api\n", 1)
		p, err := policy.Parse([]byte(text), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		warned := false
		for _, w := range p.Warnings {
			warned = warned || strings.Contains(w.String(), "the client chooses")
		}
		if warned != c.warn {
			t.Errorf("limit_key %s: warned %v, want %v (%v)", c.key, warned, c.warn, p.Warnings)
		}
	}
}

// TestFormatReadingsAmbiguous: a path ending in '/' whose last segment has
// a dot reads as that segment to most servers and as the path without its
// extension to Rails; when the two readings are different routes (an
// exact /t of cost 10 and a prefix /t.v/ of cost 1), the request is
// refused as ambiguous, so no client picks the cheaper one for the other.
func TestFormatReadingsAmbiguous(t *testing.T) {
	p, err := policy.Parse([]byte(valid+`  - {name: t, path: /t, upstream: builtin:echo, cost: 10}
  - {name: tv, path: /t.v/, upstream: builtin:echo}
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path      string
		ambiguous bool
		why       string
	}{
		{"/t.V/", true, "/t to Rails, under /t.v/ to others"},
		{"/t.V/x", false, "the dot is not in the last segment: one reading"},
		{"/t/", false, "no dot: one reading"},
		{"/api/v1.0/", false, "both readings are under /api/"},
		{"/t.json", false, "no trailing slash: the extension reading alone"},
	} {
		got := p.Ambiguous(policy.RouteRequest{Method: "GET", Path: c.path}) != ""
		if got != c.ambiguous {
			t.Errorf("%s: ambiguous %v, want %v (%s)", c.path, got, c.ambiguous, c.why)
		}
	}
}
