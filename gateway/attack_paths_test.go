package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// catchAllConfig is the quickstart with a catch-all route (/, cost 1) to
// the upstream, the usual way a gateway fronts a whole site, every 127/8
// address trusted, and the login route's own limit out of the way.
func catchAllConfig(t *testing.T, upstream string) *policy.Policy {
	t.Helper()
	return quickstart(t, upstream, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
		"limit: {algorithm: sliding_log, rate: 10, period: 1m}", "limit: {algorithm: fixed_window, rate: 100000, period: 1m}",
		"\nheaders:", "\n  - {name: site, path: /, upstream: \""+upstream+"\"}\n\nheaders:")
}

// TestPathSpellings: a path that a common upstream reads as an expensive
// or guarded route is charged as that route, or refused: upper case (for
// case-insensitive servers), path parameters (';', which Servlet
// containers drop, and "..;" which they read as ".."), backslashes (read as
// '/' by some servers) and control bytes (where some stop reading).
func TestPathSpellings(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 0)
		g := start(t, catchAllConfig(t, up.URL), redisURL)
		// The export route costs 10: a Pro key starts with 1,000.
		spent := 0
		for _, path := range []string{"/API/EXPORT", "/api/Export", "/api/export;jsessionid=1", "/api/x/..;/export", "/api;v=1/export"} {
			req, _ := http.NewRequest("GET", g.public+path, nil)
			req.Header.Set("X-API-Key", proKey)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 400 {
				continue
			}
			spent += 10
			if want := fmt.Sprintf(`"pro";r=%d;`, 1000-spent); !strings.HasPrefix(resp.Header.Get("RateLimit"), want) {
				t.Errorf("%s: %d, RateLimit %q: not charged as an export (want %s...)", path, resp.StatusCode, resp.Header.Get("RateLimit"), want)
				spent = 1000 - atoiPrefix(resp.Header.Get("RateLimit"))
			}
		}
		for _, path := range []string{"/api\\export", "/api/export%00.png", "/api/export%0a"} {
			req, _ := http.NewRequest("GET", g.public+strings.ReplaceAll(path, "\\", "%5C"), nil)
			req.Header.Set("X-API-Key", proKey)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Errorf("%s: %d, want 400", path, resp.StatusCode)
			}
		}
		// Lock alice, then log in with the right password by other paths.
		for i := 0; i < 5; i++ {
			postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`)
		}
		for _, path := range []string{"/LOGIN", "/Login", "/login;jsessionid=1", "/x/..;/login", "/login/", "/login%00", "/x%5C..%5Clogin"} {
			postLogin(t, g, "198.51.100.1", path, "application/json", `{"username":"alice","password":"demo"}`)
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times through other spellings of /login", n)
		}
	})
}

// atoiPrefix reads r= from a RateLimit header.
func atoiPrefix(h string) int {
	var n int
	if i := strings.Index(h, ";r="); i >= 0 {
		fmt.Sscanf(h[i+3:], "%d", &n)
	}
	return n
}

// TestExpensiveRouteBypass: exact routes asked for in the forms an upstream
// commonly serves alike. /api/export/ (trailing slash) fell to the cheap
// /api/ prefix, and the exact /api/report could match nothing beside the
// prefix /api/report/: each request then cost 1 instead of 10, so three
// reached the upstream where the budget allows one.
func TestExpensiveRouteBypass(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		for i, target := range []string{"/api/export/", "/api/report", "/api/export"} {
			if redisURL != "" {
				flushShared(t) // one policy each time: its budgets start afresh only on a clean store
			}
			up := newUpstream(t)
			p, err := policy.Parse([]byte(fmt.Sprintf(`version: bypass-%d
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
store: {timeout: 5s}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free: {algorithm: fixed_window, rate: 10, period: 1h}
routes:
  - {name: export, path: /api/export, upstream: %[2]q, cost: 10}
  - {name: api, path: /api/, upstream: %[2]q}
  - {name: report, path: /api/report, upstream: %[2]q, cost: 10}
  - {name: reports, path: /api/report/, upstream: %[2]q}
`, i, up.URL)), "bypass.yaml")
			if err != nil {
				t.Fatal(err)
			}
			g := startStill(t, p, redisURL) // a fixed window of an hour
			var codes []int
			for range 3 {
				codes = append(codes, get(t, g.public+target).StatusCode)
			}
			if n := up.hits.Load(); n != 1 || codes[0] != 200 || codes[1] != 429 || codes[2] != 429 {
				t.Errorf("GET %s ×3: statuses %v, %d reached the upstream; want 200 429 429 and 1 (each costs the whole budget)", target, codes, n)
			}
		}
	})
}

// TestDotSegmentParameters: "/admin/..;/x" is "/x" to a Servlet container
// but "/admin/..;/x", under /admin/, to most other servers. Matching it as
// either lets a client pick the cheaper route for what the upstream
// serves as the other, so a dot segment with parameters is refused.
func TestDotSegmentParameters(t *testing.T) {
	up := newUpstream(t)
	p := quickstart(t, up.URL, "\nheaders:", "\n  - {name: site, path: /, upstream: \""+up.URL+"\"}\n\nheaders:")
	g := start(t, p, "")
	for _, path := range []string{"/api/export/..;/x", "/api/.;/export", "/api/x/..;jsessionid=1/export", "/api/export/..;"} {
		before := up.hits.Load()
		if code := get(t, g.public+path, "X-API-Key", proKey).StatusCode; code != 400 {
			t.Errorf("%s: %d, want 400", path, code)
		}
		if up.hits.Load() != before {
			t.Errorf("%s reached the upstream", path)
		}
	}
}

// TestMethodOverride: Rails, Laravel, Express's method-override and
// ASP.NET Core's UseHttpMethodOverride serve a POST as the method that
// X-HTTP-Method-Override (or a _method parameter) names. A POST that the
// upstream served as DELETE /api/items/{id} (cost 10) was charged as
// POST under /api/ (cost 1). A request whose override names a method
// that matches another route is now a 400 that costs nothing; one whose
// override changes nothing is decided as before.
func TestMethodOverride(t *testing.T) {
	up := newUpstream(t)
	g := start(t, quickstart(t, up.URL, "  - name: reports", `  - name: delete
    method: DELETE
    path: /api/items/{id}
    upstream: builtin:echo
    cost: 10
  - name: reports`), "")
	do := func(method, url string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("X-API-Key", proKey)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		url    string
		header []string
	}{
		{"/api/items/1", []string{"X-HTTP-Method-Override", "DELETE"}},
		{"/api/items/1", []string{"X-Http-Method-Override", "delete"}},
		{"/api/items/1", []string{"X-HTTP-Method", "DELETE"}},
		{"/api/items/1", []string{"X-Method-Override", "DELETE"}},
		{"/api/items/1?_method=DELETE", nil},
		{"/api/items/1?_METHOD=delete", nil},
		{"/api/items/1?a=1;_method=DELETE", nil},
	} {
		before := up.hits.Load()
		if resp := do("POST", g.public+c.url, c.header...); resp.StatusCode != 400 || resp.Header.Get("RateLimit") != "" || up.hits.Load() != before {
			t.Errorf("POST %s %v: %d, RateLimit %q; want 400, nothing charged or forwarded", c.url, c.header, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	// An override that matches the same route as the method: decided.
	if resp := do("POST", g.public+"/api/other", "X-HTTP-Method-Override", "DELETE"); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"pro";r=999;`) {
		t.Errorf("POST /api/other overridden to DELETE: %d, RateLimit %q; want 200 at cost 1", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if resp := do("DELETE", g.public+"/api/items/1"); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"pro";r=989;`) {
		t.Errorf("DELETE /api/items/1: %d, RateLimit %q; want 200 at cost 10", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

// TestRouteReadings: a path the upstream serves as a route with its own
// cost, limit, concurrency or shaping is decided as that route however it
// is spelt: with a format extension (Rails: /api/export.json is
// /api/export), under a PHP front controller (Symfony, Laravel:
// /index.php/api/export; CodeIgniter's /index.php?/api/export, Drupal's
// ?q=api/export), with a trailing dot or space or a cookieless session
// segment (IIS, ASP.NET), or in X-Original-URL (old Symfony, Zend). Each
// was
// charged as the cheaper /api/ or / route: 10 exports for 10 units
// instead of 100, 10 of 10 user exports where the route admits 3, 20 at
// once past a 10-in-flight limit, and a shaped route unshaped.
func TestRouteReadings(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		var held atomic.Int64
		release := make(chan struct{})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "reports") {
				held.Add(1)
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
		}))
		defer up.Close()
		p := quickstart(t, up.URL, "  - name: api\n", `  - name: user-export
    path: /api/users/{id}/export
    upstream: `+up.URL+`
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
    limit_key: [subject, path:id]
  - {name: site, path: /, upstream: "`+up.URL+`"}
  - name: api
`)
		g := startStill(t, p, redisURL)
		do := func(path string) *http.Response {
			t.Helper()
			resp := get(t, g.public+path, "X-API-Key", proKey)
			resp.Body.Close()
			return resp
		}
		spent := 0
		for _, path := range []string{"/api/export.json", "/api/export.JSON", "/api/export.json/", "/index.php/api/export",
			"/app.php/api/export.csv", "/api/export.", "/api/export%20", "/api/export;", "/api/export.json;x=1", "/API/Export.Json",
			"/(S(x1))/api/export", "/api/(A(x)S(y))/export"} {
			resp := do(path)
			spent += 10
			if want := fmt.Sprintf(`"pro";r=%d;`, 1000-spent); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), want) {
				t.Errorf("GET %s: %d, RateLimit %q: not charged as an export (want %s...)", path, resp.StatusCode, resp.Header.Get("RateLimit"), want)
				spent = 1000 - atoiPrefix(resp.Header.Get("RateLimit"))
			}
		}
		// Front controllers that take the path from the query (CodeIgniter
		// ?/x, Drupal ?q=x, Yii ?r=x), and old Symfony and Zend from
		// X-Original-URL: refused where it names another route.
		for _, c := range []struct{ target, header string }{
			{"/index.php?/api/export", ""}, {"/?/api/export", ""}, {"/INDEX.PHP?/api/export?x=1", ""}, {"/?/api/users/1/export", ""},
			{"/index.php?q=api/export", ""}, {"/?q=api/export", ""}, {"/index.php?r=api%2Fexport", ""},
			{"/", "X-Original-URL"}, {"/", "X-Rewrite-URL"},
		} {
			header := []string{"X-API-Key", proKey}
			if c.header != "" {
				header = append(header, c.header, "/api/export")
			}
			resp := get(t, g.public+c.target, header...)
			resp.Body.Close()
			if resp.StatusCode != 400 || resp.Header.Get("RateLimit") != "" {
				t.Errorf("GET %s %s: %d, RateLimit %q; want 400, nothing charged", c.target, c.header, resp.StatusCode, resp.Header.Get("RateLimit"))
			}
		}
		if resp := do("/?/"); resp.StatusCode != 200 {
			t.Errorf("GET /?/ (the root either way): %d", resp.StatusCode)
		}
		for _, id := range []string{"8", "9", "10"} {
			admitted := 0
			for _, path := range []string{"/api/users/" + id + "/export.json", "/index.php/api/users/" + id + "/export", "/api/users/" + id + "/export."} {
				for range 4 {
					if do(path).StatusCode == 200 {
						admitted++
					}
				}
			}
			if admitted != 3 {
				t.Errorf("user %s's export spelt three ways, 12 times: %d admitted, want the route's 3", id, admitted)
			}
		}
		// Concurrency: 20 at once against 10 in flight; the upstream
		// holds what reaches it until every answer is in.
		var wg sync.WaitGroup
		var refused atomic.Int64
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := []string{"/api/reports.json", "/index.php/api/reports", "/api/reports."}[i%3]
				if do(path).StatusCode == 429 {
					refused.Add(1)
				}
			}()
		}
		deadline := time.Now().Add(30 * time.Second) // only a broken gateway takes it
		for held.Load()+refused.Load() < 20 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := held.Load(); n != 10 {
			t.Errorf("20 reports at once spelt otherwise: %d in flight at the upstream, %d refused; want 10 and 10", n, refused.Load())
		}
		close(release)
		wg.Wait()
		// Shaping: 10/s, burst 1, held up to 2 s: of 25 at once on a
		// still clock 21 pass (each held its turn), 4 are refused.
		var passed atomic.Int64
		refused.Store(0)
		for i := range 25 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch do([]string{"/api/webhooks.json", "/index.php/api/webhooks"}[i%2]).StatusCode {
				case 200:
					passed.Add(1)
				case 429:
					refused.Add(1)
				}
			}()
		}
		wg.Wait()
		if passed.Load() != 21 || refused.Load() != 4 {
			t.Errorf("25 webhooks at once spelt otherwise: %d passed, %d refused; want 21 and 4 (shaped)", passed.Load(), refused.Load())
		}
	})
}
