package policy_test

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// routePolicy is valid with one extra route whose path is PATH.
func routePolicy(p string) string {
	return valid + "  - {name: probe, path: " + strconv.Quote(p) + ", upstream: builtin:echo}\n"
}

// requestPath is what the middleware matches for a request whose target
// is target: net/http's decoded r.URL.Path, cleaned keeping a trailing
// slash (httplimit's cleanPath).
func requestPath(t *testing.T, target string) string {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatalf("request target %q: %v", target, err)
	}
	c := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && c != "/" {
		c += "/"
	}
	return c
}

// TestRoutePathsNoRequestCanMatch: a route path that no cleaned request
// path can equal leaves its route silently unprotected (its requests fall
// to another route), so the file is refused at the route's line.
func TestRoutePathsNoRequestCanMatch(t *testing.T) {
	refused := []struct{ path, want string }{
		{"/api/../export", `not a clean path; requests are matched after cleaning, so write "/export"`},
		{"/api/./x", `write "/api/x"`},
		{"/api/.", `write "/api"`},
		{"/api/..", `write "/"`},
		{"/..", `write "/"`},
		{"/./", `write "/"`},
		{"//api", `write "/api"`},
		{"/api//x", `write "/api/x"`},
		{"/api/x//", `write "/api/x/"`},
		{"/api%2Fexport", "percent-encoding"},
		{"/api%2fexport", "percent-encoding"},
		{"/%2e%2e/admin", "percent-encoding"},
		{"/caf%C3%A9", "percent-encoding"},
		{`/api\export`, "backslash"},
		{`/api\..\admin`, "backslash"},
		{"/a\x00b", "control"},
		{"/a\x1fb", "control"},
		{"/a\x7fb", "control"},
		{"/a\tb", "control"},
		{"/a b", "space"},
		{"/a\u00a0b", "invisible"},
		{"/a\u200bb", "invisible"},
		{"/a\u202eb", "invisible"},
		{"/search?q=x", "query"},
		{"/docs#intro", "fragment"},
		{"/items/{id", "whole segment"},
		{"/items/a{id}", "whole segment"},
		{"/items/{i-d}", "whole segment"},
		{"/items/{id}/{ID}", "named twice"},
		{"/users/:id", "literal"},
		{"/files/*", "literal"},
		{"/page/<name>", "literal"},
		{"/a;b", "path parameters"},
		{"api/", "absolute"},
		{"", "absolute"},
		{"/_tollgate/", "reserved"},
		{"/_tollgate/auth", "reserved"},
		{"/_tollgate", "reserved"},
		{"/_TOLLGATE/x", "reserved"},
	}
	for _, c := range refused {
		t.Run("refused "+strconv.Quote(c.path), func(t *testing.T) {
			src := routePolicy(c.path)
			p, err := policy.Parse([]byte(src), "p.yaml")
			if err == nil {
				t.Fatalf("accepted route path %q (it would match %v)", c.path, p.Match("GET", c.path))
			}
			line := strings.Count(valid, "\n") + 1
			for _, w := range []string{fmt.Sprintf("p.yaml:%d:", line), "routes[3].path", c.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	accepted := []string{
		"/", "/v2/", "/v2/items", "/v1/projects/p:run", "/~user/", "/a-b_c.d/",
		"/caf\u00e9", "/a=b&c", "/@me", "/a+b", "/a!$'(),", "/.well-known/", "/x.", "/_tollgates/", "/x/_tollgate/",
	}
	for _, ap := range accepted {
		t.Run("accepted "+strconv.Quote(ap), func(t *testing.T) {
			p, err := policy.Parse([]byte(routePolicy(ap)), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			// Every accepted path is reached by the request for it, as a
			// client's library escapes it.
			target := (&url.URL{Path: ap}).EscapedPath()
			if r := p.Match("GET", requestPath(t, target)); r == nil || r.Name != "probe" {
				t.Fatalf("request %q matched %+v, want the probe route", target, r)
			}
		})
	}
}

// TestMatchExactRoutes: an exact route is matched by its path with a
// trailing slash too (many upstreams serve /login/ as /login, so the guard
// must not be walked around that way), and an exact route beats a prefix
// route one slash longer (before, the exact /api behind a /api/ prefix
// could match no request at all).
func TestMatchExactRoutes(t *testing.T) {
	src := valid + `  - {name: root, path: /, upstream: builtin:echo}
  - {name: api-exact, path: /api, upstream: builtin:echo}
  - {name: report, method: GET, path: /api/report, upstream: builtin:echo}
  - {name: report-dir, path: /api/report/, upstream: builtin:echo}
`
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ method, path, want string }{
		{"POST", "/login", "login"},
		{"POST", "/login/", "login"},
		{"GET", "/login/", "root"},
		{"GET", "/api", "api-exact"},
		{"GET", "/api/", "api"},
		{"GET", "/api/export/", "export"},
		{"GET", "/api/x", "api"},
		{"GET", "/api/report", "report"},
		{"POST", "/api/report", "report-dir"},
		{"GET", "/api/report/", "report-dir"},
		{"GET", "/api/report/x", "report-dir"},
		{"GET", "/login/x", "root"},
		{"GET", "/loginx", "root"},
	}
	expectMatches(t, p, cases)
}

// TestMatchKey: spellings that common servers read as one path are matched
// alike, and routes that differ only so are one route.
func TestMatchKey(t *testing.T) {
	for in, want := range map[string]string{
		"/api/export":              "/api/export",
		"/API/Export":              "/api/export",
		"/api/export;jsessionid=1": "/api/export",
		"/api/x/..;/export":        "/api/export",
		"/api;v=1/export/":         "/api/export/",
		"/Ünï/x":                   "/ünï/x",
		"/;/..;/login":             "/login",
		// Rails (and DRF, Spring's suffix patterns) serve a format
		// extension as the path without it.
		"/api/export.json":        "/api/export",
		"/api/export.json/":       "/api/export/",
		"/api/users/8/export.CSV": "/api/users/8/export",
		"/api/export.json.gz":     "/api/export",
		"/api/v1.2/export":        "/api/v1.2/export", // only the last segment's
		"/.well-known":            "/.well-known",     // a leading dot is a name
		"/api/.env":               "/api/.env",
		// Symfony and Laravel serve a path under their front controller
		// as the path after it.
		"/index.php/api/export":   "/api/export",
		"/APP_DEV.PHP/login.json": "/login",
		"/index.php":              "/index", // a script, not a front controller
		"/index.php/":             "/",
		"/api/index.php/x":        "/api/index.php/x", // the first segment only
		// IIS and Windows read a segment's trailing dots and spaces away.
		"/api/export.":         "/api/export",
		"/api/export ":         "/api/export",
		"/api/export. . ":      "/api/export",
		"/api./export":         "/api/export",
		"/api/export;":         "/api/export",
		"/api/export.json;x=1": "/api/export",
		// ASP.NET removes its cookieless session segments anywhere.
		"/(S(x1))/api/export":   "/api/export",
		"/api/(S(abc))/export":  "/api/export",
		"/(A(x)S(y)F(z))/login": "/login",
		"/api/(x)/export":       "/api/(x)/export", // not one
		"/api/(S(x)/export":     "/api/(s(x)/export",
	} {
		if got := policy.MatchKey(in); got != want {
			t.Errorf("MatchKey(%q) = %q, want %q", in, got, want)
		}
	}
	const minimal = `
version: v1
listeners: {public: "127.0.0.1:8080", admin: "127.0.0.1:9090"}
plans: {free: {rate: 1, period: 1m}}
identity: {anonymous_plan: free}
routes:
  - {name: b, path: /api/, upstream: "http://127.0.0.1:1"}
`
	if _, err := policy.Parse([]byte(minimal), "ok.yaml"); err != nil {
		t.Fatal(err)
	}
	_, err := policy.Parse([]byte(`
version: v1
listeners: {public: "127.0.0.1:8080", admin: "127.0.0.1:9090"}
plans: {free: {rate: 1, period: 1m}}
identity: {anonymous_plan: free}
routes:
  - {name: a, path: /Api/, upstream: "http://127.0.0.1:1"}
  - {name: b, path: /api/, upstream: "http://127.0.0.1:1"}
`), "dup.yaml")
	if err == nil || !strings.Contains(err.Error(), "another route already matches") {
		t.Fatalf("routes /Api/ and /api/: %v, want them refused as one", err)
	}
	two := minimal + "  - {name: c, path: /export, upstream: \"http://127.0.0.1:1\"}\n  - {name: d, path: /export.json, upstream: \"http://127.0.0.1:1\"}\n"
	if _, err := policy.Parse([]byte(two), "ext.yaml"); err == nil || !strings.Contains(err.Error(), "another route already matches") {
		t.Fatalf("routes /export and /export.json: %v, want them refused as one", err)
	}
	if _, err := policy.Parse([]byte(strings.Replace(minimal, "path: /api/", "path: /a;b", 1)), "semi.yaml"); err == nil {
		t.Fatal("a route path with ';' was accepted")
	}
}

func TestPathReadings(t *testing.T) {
	for _, c := range []struct {
		escaped string
		want    []string
	}{
		{"/api/items", nil},
		{"/api/file.txt", nil},
		{"/api/files/../items", []string{"/api/items", "/api/files/../items"}},
		{"/api/files/%2e%2e/items", []string{"/api/files/../items"}},
		{"/api/files/%2E./items/", []string{"/api/files/../items/"}},
		{"/a/./b", []string{"/a/b", "/a/./b"}},
		{"/users/a%2Fb", []string{"/users/a/b", "/users/a%2fb"}},
		{"/files%2F..%2Fx", []string{"/files/../x", "/files%2f..%2fx"}},
		{"//a//..//b", []string{"/b", "/a/../b"}},
		{"/..", []string{"/", "/.."}},
		{"/.well-known", []string{"/.well-known"}},
	} {
		got := policy.PathReadings(c.escaped)
		if !slices.Equal(got, c.want) {
			t.Errorf("PathReadings(%q) = %q, want %q", c.escaped, got, c.want)
		}
	}
}

// TestAmbiguousPath: decoded paths that servers read as different
// resources are refused; the rest are not.
func TestAmbiguousPath(t *testing.T) {
	for _, c := range []struct {
		path      string
		ambiguous bool
		why       string
	}{
		{"/api/export", false, "a plain path"},
		{"/api/export.json", false, "a format extension is read away, not ambiguous"},
		{"/api/export./", false, "a trailing dot is read away"},
		{"/.well-known/x", false, "a name that starts with a dot"},
		{"/api\\export", true, "a backslash is a separator to some servers"},
		{"/api/export\x00.png", true, "some servers stop reading at NUL"},
		{"/api/x/..;/export", true, "..; is .. to Servlet containers only"},
		{"/api/x/.. /export", true, "'.. ' is '..' to IIS, a name to others"},
		{"/api/x/. /export", true, "'. ' is '.' to IIS"},
		{"/api/x/.../export", true, "'...' is read away by IIS, a name to others"},
		{"/api/x/ /export", true, "a segment of spaces is read away by IIS"},
	} {
		if got := policy.AmbiguousPath(c.path) != ""; got != c.ambiguous {
			t.Errorf("AmbiguousPath(%q) = %v, want %v: %s", c.path, got, c.ambiguous, c.why)
		}
	}
}

// TestQueryPaths: PHP front controllers that take the path from the query
// of the site's root or of the controller itself.
func TestQueryPaths(t *testing.T) {
	for _, c := range []struct {
		path, query string
		want        []string
		why         string
	}{
		{"/index.php", "/api/export", []string{"/api/export"}, "CodeIgniter: the query is the path"},
		{"/", "/api/export?x=1", []string{"/api/export"}, "CodeIgniter: the query goes on after a second '?'"},
		{"/app.php/", "/api//export/", []string{"/api/export/"}, "cleaned"},
		{"/", "/api%2Fexport", []string{"/api/export"}, "decoded"},
		{"/index.php", "q=api/export&x=1", []string{"/api/export"}, "Drupal 7: ?q="},
		{"/", "r=api%2Fexport", []string{"/api/export"}, "Yii: ?r="},
		{"/", "rest_route=/wc/v3/orders", []string{"/wp-json/wc/v3/orders"}, "WordPress: ?rest_route= is under /wp-json"},
		{"/", "x=/api/export", nil, "another parameter"},
		{"/search", "/api/export", nil, "not the root"},
		{"/search", "q=api/export", nil, "a search, not a front controller"},
		{"/index.php/x", "/api/export", nil, "a path after the front controller"},
		{"/", "", nil, "no query"},
	} {
		if got := policy.QueryPaths(c.path, c.query); !slices.Equal(got, c.want) {
			t.Errorf("%s: QueryPaths(%q, %q) = %q, want %q", c.why, c.path, c.query, got, c.want)
		}
	}
}

// TestHeaderPaths: the headers older Symfony and Zend read as the path.
func TestHeaderPaths(t *testing.T) {
	for _, c := range []struct {
		header http.Header
		want   []string
	}{
		{http.Header{"X-Original-Url": {"/api/export?x=1"}}, []string{"/api/export"}},
		{http.Header{"X-Rewrite-Url": {"//api/./export"}}, []string{"/api/export"}},
		{http.Header{"X-Original-Uri": {"/api/export"}}, nil}, // nginx's, for forward-auth
		{http.Header{}, nil},
	} {
		if got := policy.HeaderPaths(c.header); !slices.Equal(got, c.want) {
			t.Errorf("HeaderPaths(%v) = %q, want %q", c.header, got, c.want)
		}
	}
}
