package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// loginUpstream is a login service written the way a typical Go service
// is: JSON bodies decoded into a struct with encoding/json's Decoder (which
// matches field names case-insensitively and stops after the first value),
// forms read with r.FormValue (which merges the query string and reads
// multipart bodies). The password is "demo" for every account. It records
// which accounts it let in and how many attempts it saw at once.
type loginUpstream struct {
	*httptest.Server
	delay    time.Duration
	hits     atomic.Int64
	inFlight atomic.Int64
	peak     atomic.Int64
	mu       sync.Mutex
	let      map[string]int // account -> successful logins
	bodies   []string       // the bodies it received, in order
}

func newLoginUpstream(t *testing.T, delay time.Duration) *loginUpstream {
	return newReadingUpstream(t, delay, func(r *http.Request, _ []byte) (acct, pw string) {
		switch ct := r.Header.Get("Content-Type"); {
		case strings.HasPrefix(ct, "application/x-www-form-urlencoded"), strings.HasPrefix(ct, "multipart/form-data"):
			acct, pw = r.FormValue("username"), r.FormValue("password")
		default:
			var body struct{ Username, Password string }
			json.NewDecoder(r.Body).Decode(&body)
			acct, pw = body.Username, body.Password
		}
		return strings.ToLower(acct), pw
	})
}

// newReadingUpstream returns a loginUpstream that reads a request's
// account and password with read (given the request, its body restored,
// and the body), and records the account as read returns it.
func newReadingUpstream(t *testing.T, delay time.Duration, read func(r *http.Request, raw []byte) (acct, pw string)) *loginUpstream {
	u := &loginUpstream{delay: delay, let: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		n := u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
		}
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		acct, pw := read(r, raw)
		u.mu.Lock()
		u.bodies = append(u.bodies, string(raw))
		u.mu.Unlock()
		if u.delay > 0 {
			time.Sleep(u.delay) // hashing the password
		}
		if pw != "demo" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		u.mu.Lock()
		u.let[acct]++
		u.mu.Unlock()
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *loginUpstream) logins(acct string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.let[acct]
}

func (u *loginUpstream) lastBody() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		return ""
	}
	return u.bodies[len(u.bodies)-1]
}

// onStores runs f on the memory store and on a real Redis.
func onStores(t *testing.T, f func(t *testing.T, redisURL string)) {
	t.Run("memory", func(t *testing.T) { f(t, "") })
	t.Run("redis", func(t *testing.T) {
		flushShared(t)
		f(t, "redis://"+srv.Addr+"/0")
	})
}

// loginConfig is the quickstart with every address of 127/8 a trusted
// proxy (so tests choose client addresses with X-Forwarded-For) and the
// login route's own limit raised out of the way, so that only the guard
// stands between a guess and the upstream.
func loginConfig(t *testing.T, upstream string) *policy.Policy {
	t.Helper()
	p := quickstart(t, upstream, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
		"limit: {algorithm: sliding_log, rate: 10, period: 1m}", "limit: {algorithm: fixed_window, rate: 100000, period: 1m}")
	return p
}

// postLogin sends a login request from client address from and returns
// the status.
func postLogin(t *testing.T, g *running, from, path, ctype, body string, header ...string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", g.public+path, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("X-Forwarded-For", from)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func multipartLogin(user, password string) (string, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.WriteField("username", user)
	mw.WriteField("password", password)
	mw.Close()
	return mw.FormDataContentType(), b.String()
}

// TestLoginParserDifferences: once an account is locked, no spelling of a
// login request gets its right password to the upstream. Every body the
// guard cannot read exactly as the upstream would is refused with 400, and
// a body it can read reaches the upstream as the guard read it.
func TestLoginParserDifferences(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 0)
		g := start(t, loginConfig(t, up.URL), redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		mpType, mpBody := multipartLogin("alice", "demo")
		pad := strings.Repeat(" ", 70<<10)
		for _, v := range []struct{ name, path, ctype, body string }{
			{"a case-variant field", "/login", "application/json", `{"Username":"alice","password":"demo"}`},
			{"a field that folds to the account field", "/login", "application/json", `{"uſername":"alice","password":"demo"}`},
			{"an upper-case field", "/login", "application/json", `{"USERNAME":"alice","password":"demo"}`},
			{"trailing bytes after the JSON", "/login", "application/json", `{"username":"alice","password":"demo"} {"username":"bob"}`},
			{"trailing garbage after the JSON", "/login", "application/json", `{"username":"alice","password":"demo"}]`},
			{"a body padded beyond max_body", "/login", "application/json", `{"username":"alice","password":"demo"}` + pad},
			{"a JSON body padded inside beyond max_body", "/login", "application/json", `{"username":"alice","password":"demo","x":"` + pad + `"}`},
			{"multipart/form-data", "/login", mpType, mpBody},
			{"the account in the query string", "/login?username=alice", "application/x-www-form-urlencoded", "password=demo"},
			{"the account in the query string, JSON body", "/login?username=alice", "application/json", `{"password":"demo"}`},
			{"a duplicate account field", "/login", "application/json", `{"username":"bob","username":"alice","password":"demo"}`},
			{"a duplicate form field", "/login", "application/x-www-form-urlencoded", "username=alice&username=bob&password=demo"},
			{"a form field in another case", "/login", "application/x-www-form-urlencoded", "Username=alice&username=bob&password=demo"},
			{"no content type", "/login", "", `{"username":"alice","password":"demo"}`},
			{"text/plain", "/login", "text/plain", `{"username":"alice","password":"demo"}`},
			{"a UTF-16 charset", "/login", "application/json; charset=utf-16", `{"username":"alice","password":"demo"}`},
			{"an account that is not a string", "/login", "application/json", `{"username":["alice"],"password":"demo"}`},
			{"a JSON array", "/login", "application/json", `[{"username":"alice","password":"demo"}]`},
			{"a compressed body", "/login", "application/json", `{"username":"alice","password":"demo"}`},
			{"two content types", "/login", "application/json", `{"username":"alice","password":"demo"}`},
		} {
			var extra []string
			switch v.name {
			case "a compressed body":
				extra = []string{"Content-Encoding", "gzip"}
			case "two content types":
				extra = []string{"Content-Type", "application/x-www-form-urlencoded"}
			}
			before := up.hits.Load()
			code := postLogin(t, g, "198.51.100.7", v.path, v.ctype, v.body, extra...)
			if want := map[bool]int{false: 400, true: 415}[v.name == "a compressed body"]; code != want {
				t.Errorf("%s: status %d, want %d", v.name, code, want)
			}
			if up.hits.Load() != before {
				t.Errorf("%s: reached the upstream", v.name)
			}
		}
		// A body that cannot be read at all (malformed chunks) is a 400
		// too, never an empty 200.
		before := up.hits.Load()
		if code := rawStatus(t, strings.TrimPrefix(g.public, "http://"), "POST /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n"+
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"); code != 400 {
			t.Errorf("malformed chunks: status %d, want 400", code)
		}
		if up.hits.Load() != before {
			t.Error("malformed chunks reached the upstream")
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times", n)
		}
		// What the guard reads exactly still works, for other accounts, and
		// reaches the upstream in a canonical form the guard read.
		for _, v := range []struct{ ctype, body, want string }{
			{"application/json", `{"username": "Bob", "password": "demo"}`, `{"username":"Bob","password":"demo"}`},
			{"application/json; charset=UTF-8", "{\"username\":\"b\\u006fb\",\"password\":\"demo\",\"n\":1.50}\n", `{"username":"bob","password":"demo","n":1.50}`},
			{"application/x-www-form-urlencoded", "username=bob&password=demo&next=%2Fhome", "username=bob&password=demo&next=%2Fhome"},
		} {
			if code := postLogin(t, g, "198.51.100.8", "/login", v.ctype, v.body); code != 200 {
				t.Errorf("%s %s: status %d, want 200", v.ctype, v.body, code)
			}
			if got := up.lastBody(); got != v.want {
				t.Errorf("the upstream got %q, want %q", got, v.want)
			}
		}
		if code := postLogin(t, g, "198.51.100.8", "/login", "application/json", `{"username":"alice","password":"demo"}`); code != 429 {
			t.Fatalf("alice, canonical: %d, want 429 (locked)", code)
		}
	})
}

// TestLoginConcurrentGuesses: guesses sent at once, while the upstream
// takes 300 ms to hash each password, get no further than guesses sent
// one at a time: at most the account's remaining allowance (5) reaches the
// upstream, and at most an address's remaining failure budget (20) -- on
// one gateway and across two sharing Redis.
func TestLoginConcurrentGuesses(t *testing.T) {
	burst := func(gs []*running, n int, from, acct func(i int) string) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				body := fmt.Sprintf(`{"username":%q,"password":"guess-%d"}`, acct(i), i)
				if code := postLogin(t, gs[i%len(gs)], from(i), "/login", "application/json", body); code != 401 && code != 429 {
					t.Errorf("guess %d: status %d", i, code)
				}
			}(i)
		}
		wg.Wait()
	}
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 300*time.Millisecond)
		// An address's failures count in a fixed window of 10 minutes.
		gs := []*running{startStill(t, loginConfig(t, up.URL), redisURL)}
		if redisURL != "" {
			gs = append(gs, startStill(t, loginConfig(t, up.URL), redisURL))
		}
		// 30 guesses for one account, from 30 addresses.
		burst(gs, 30, func(i int) string { return fmt.Sprintf("203.0.113.%d", i) }, func(int) string { return "carol" })
		if n := up.hits.Load(); n != 5 {
			t.Fatalf("%d guesses for one account reached the upstream, want 5", n)
		}
		if code := postLogin(t, gs[0], "203.0.113.200", "/login", "application/json", `{"username":"carol","password":"demo"}`); code != 429 {
			t.Fatalf("after the burst, the right password: %d, want 429 (locked)", code)
		}
		// 30 guesses for 30 accounts, from one address: its failure budget
		// is 20.
		up.hits.Store(0)
		burst(gs, 30, func(int) string { return "198.51.100.66" }, func(i int) string { return fmt.Sprintf("user%d", i) })
		if n := up.hits.Load(); n != 20 {
			t.Fatalf("%d guesses from one address reached the upstream, want 20", n)
		}
		if code := postLogin(t, gs[0], "198.51.100.66", "/login", "application/json", `{"username":"dave","password":"demo"}`); code != 429 {
			t.Fatalf("after the burst, from the same address: %d, want 429", code)
		}
	})
}

// foldedUpstream is a login service whose account lookup is as broad as a
// database's default collation (MySQL 8's utf8mb4_0900_ai_ci, SQL
// Server's *_CI_AI, a nondeterministic ICU collation at level 1): case
// and accents ignored, ignorable characters (soft hyphen, zero-width
// space) skipped, letters with a stroke (ł, ø) the letter. It keeps its
// own small table rather than a collation library, so the test does not
// grade the guard by the guard's own rule. Forms are read the way PHP
// (Laravel) reads them: a name's leading spaces dropped, cut at a NUL,
// ' ' and '.' made '_', the last of a name winning. The password is
// "demo" for every account; it records the accounts it let in.
type foldedUpstream = loginUpstream

func newFoldedUpstream(t *testing.T) *foldedUpstream {
	return newReadingUpstream(t, 0, func(r *http.Request, raw []byte) (acct, pw string) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			form := phpForm(string(raw))
			return collated(form["username"]), form["password"]
		}
		var body struct{ Username, Password string }
		json.Unmarshal(raw, &body)
		return collated(body.Username), body.Password
	})
}

// collated is an account as an accent- and case-insensitive collation
// compares it, for the letters these tests use.
func collated(s string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(strings.TrimSpace(s)) {
		switch c {
		case '\u00ad', '\u200b', '\u200c', '\u200d', '\u2060', '\ufeff', '\u0301', '\u0308', '\u030a':
			continue // ignorable, or a combining accent
		case 'á', 'à', 'â', 'ä', 'å', 'ã':
			c = 'a'
		case 'é', 'è', 'ê', 'ë':
			c = 'e'
		case 'í', 'ì', 'î', 'ï':
			c = 'i'
		case 'ç':
			c = 'c'
		case 'ł':
			c = 'l'
		case 'ø':
			c = 'o'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// phpForm parses a form body as PHP does: names with their leading spaces
// dropped, cut at a NUL, ' ' and '.' turned into '_'; the last value of a
// name wins.
func phpForm(raw string) map[string]string {
	form := map[string]string{}
	for _, pair := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(pair, "=")
		name, err1 := url.QueryUnescape(k)
		value, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			continue
		}
		name = strings.TrimLeft(name, " ")
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		form[strings.NewReplacer(" ", "_", ".", "_").Replace(name)] = value
	}
	return form
}

// TestLoginAccountSpellings: an account locked after 5 wrong passwords
// stays locked for every spelling a service's lookup may take as it: with
// accents, ignorable characters, a stroke, or in another case. Each
// spelling counted apart would give a guesser 5 more guesses at the same
// account, without end, from any number of addresses.
func TestLoginAccountSpellings(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newFoldedUpstream(t)
		g := start(t, loginConfig(t, up.URL), redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		for _, acct := range []string{"alicé", "ÁLICE", "ålice", "alice\u0301", "ałice", "ali\u00adce", "a\u200blice", "alice\u2060", "ALÏÇE"} {
			body, _ := json.Marshal(map[string]string{"username": acct, "password": "demo"})
			if code := postLogin(t, g, "198.51.100.9", "/login", "application/json", string(body)); code != 429 {
				t.Errorf("%q with the right password: status %d, want 429 (locked)", acct, code)
			}
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times", n)
		}
		// Spellings of other accounts are other accounts.
		for _, acct := range []string{"bob", "Bób", "øle", "olé"} {
			body, _ := json.Marshal(map[string]string{"username": acct, "password": "demo"})
			if code := postLogin(t, g, "198.51.100.9", "/login", "application/json", string(body)); code != 200 {
				t.Errorf("%q: status %d, want 200", acct, code)
			}
		}
	})
}

// TestLoginFieldNameSpellings: a form field whose name a PHP service
// reads as the account field (leading spaces, a NUL and what follows,
// '.' or ' ' for '_') cannot name the account beside the field the guard
// reads: the guard would charge one account while the service checks the
// password of another.
func TestLoginFieldNameSpellings(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newFoldedUpstream(t)
		g := start(t, loginConfig(t, up.URL), redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		for _, body := range []string{
			"username=bob&+username=alice&password=demo",
			"username=bob&%20%20username=alice&password=demo",
			"username=bob&username%00x=alice&password=demo",
			"username=bob&username%00=alice&password=demo",
			"username=bob&%20Username=alice&password=demo",
			"username=bob&+username%5B%5D=alice&password=demo",
		} {
			before := up.hits.Load()
			if code := postLogin(t, g, "198.51.100.9", "/login", "application/x-www-form-urlencoded", body); code != 400 {
				t.Errorf("%s: status %d, want 400", body, code)
			}
			if up.hits.Load() != before {
				t.Errorf("%s: reached the upstream", body)
			}
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times", n)
		}
		// A field that is another field to every parser still passes.
		if code := postLogin(t, g, "198.51.100.9", "/login", "application/x-www-form-urlencoded", "username=bob&user_name=x&password=demo&next=%2F"); code != 200 {
			t.Errorf("an unrelated field: status %d, want 200", code)
		}
	})
}

// nestedUpstream is a login service that finds the account inside a
// nested object or under a prefix, as frameworks do: Rails'
// wrap_parameters reads a JSON body's fields under the controller's key
// ("session") and, when the client already sent that key, reads the
// client's object instead; ASP.NET Core's model binding reads form fields
// under the parameter's name ("model.username") when any is present,
// else the bare names; Rails and PHP read "user[username]" as a nested
// field, which a service may prefer to the bare one. The password is
// "demo" for every account; it records the accounts it let in.
type nestedUpstream = loginUpstream

func newNestedUpstream(t *testing.T) *nestedUpstream {
	return newReadingUpstream(t, 0, func(r *http.Request, raw []byte) (acct, pw string) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			form, _ := url.ParseQuery(string(raw))
			acct, pw = form.Get("username"), form.Get("password")
			for _, prefix := range []string{"model.", "user["} {
				for k := range form {
					if strings.HasPrefix(k, prefix) {
						suffix := ""
						if prefix == "user[" {
							suffix = "]"
						}
						acct = form.Get(prefix + "username" + suffix)
						if v := form.Get(prefix + "password" + suffix); v != "" {
							pw = v
						}
					}
				}
			}
			return acct, pw
		}
		var body map[string]any
		json.Unmarshal(raw, &body)
		wrapped, ok := body["session"].(map[string]any)
		if !ok {
			wrapped = body
		}
		acct, _ = wrapped["username"].(string)
		pw, _ = wrapped["password"].(string)
		return acct, pw
	})
}

// TestLoginNestedAccount: the account field inside a nested JSON object,
// or under a prefix or in brackets in a form, is a 400 beside the field
// the guard reads: frameworks read the account from there, and the guard
// would charge one account while the service checks another's password.
func TestLoginNestedAccount(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newNestedUpstream(t)
		g := start(t, loginConfig(t, up.URL), redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		for _, v := range []struct{ ctype, body string }{
			{"application/json", `{"username":"bob","session":{"username":"alice","password":"demo"}}`},
			{"application/json", `{"username":"bob","session":{"Username":"alice","password":"demo"}}`},
			{"application/json", `{"username":"bob","a":[{"b":{"username":"alice"}}],"password":"demo"}`},
			{"application/x-www-form-urlencoded", "username=bob&model.username=alice&password=demo"},
			{"application/x-www-form-urlencoded", "username=bob&model.Username=alice&password=demo"},
			{"application/x-www-form-urlencoded", "username=bob&user%5Busername%5D=alice&password=demo"},
			{"application/x-www-form-urlencoded", "username=bob&user[username][]=alice&password=demo"},
		} {
			before := up.hits.Load()
			if code := postLogin(t, g, "198.51.100.9", "/login", v.ctype, v.body); code != 400 {
				t.Errorf("%s: status %d, want 400", v.body, code)
			}
			if up.hits.Load() != before {
				t.Errorf("%s: reached the upstream", v.body)
			}
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times", n)
		}
		// Nested fields that are not the account pass.
		for _, v := range []struct{ ctype, body string }{
			{"application/json", `{"username":"bob","password":"demo","device":{"name":"phone","user_agent":"x"}}`},
			{"application/x-www-form-urlencoded", "username=bob&password=demo&device.name=phone&prefs[usernames]=1"},
		} {
			if code := postLogin(t, g, "198.51.100.9", "/login", v.ctype, v.body); code != 200 {
				t.Errorf("%s: status %d, want 200", v.body, code)
			}
		}
	})
}

// TestLoginOtherMethods: a login route names its method (POST), but a
// service's login handler may answer any method (a Go handler that does
// not check r.Method, a PHP script, Express's app.all). Beside a route
// for everything else, a request to the login path with another method
// that carries an attempt (a body, or the account in the query) is
// refused, and does not reach the service past the account's lock; the
// login page (GET with neither) is served as before.
func TestLoginOtherMethods(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 0)
		p := quickstart(t, up.URL, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
			"limit: {algorithm: sliding_log, rate: 10, period: 1m}", "limit: {algorithm: fixed_window, rate: 100000, period: 1m}",
			"  - name: login\n", "  - name: everything-else\n    path: /\n    upstream: "+up.URL+"\n  - name: login\n")
		g := start(t, p, redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		send := func(method, target, ctype, body string) int {
			req, _ := http.NewRequest(method, g.public+target, strings.NewReader(body))
			if body == "" {
				req.Body, req.ContentLength = nil, 0
			}
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			req.Header.Set("X-Forwarded-For", "198.51.100.9")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, v := range []struct{ method, target, ctype, body string }{
			{"PUT", "/login", "application/json", `{"username":"alice","password":"demo"}`},
			{"PATCH", "/login", "application/json", `{"username":"alice","password":"demo"}`},
			{"GET", "/login", "application/json", `{"username":"alice","password":"demo"}`},
			{"DELETE", "/login/", "application/x-www-form-urlencoded", "username=alice&password=demo"},
			{"GET", "/login?username=alice&password=demo", "", ""},
			{"PUT", "/LOGIN?username=alice&password=demo", "", ""},
		} {
			before := up.hits.Load()
			if code := send(v.method, v.target, v.ctype, v.body); code != 405 {
				t.Errorf("%s %s: status %d, want 405", v.method, v.target, code)
			}
			if up.hits.Load() != before {
				t.Errorf("%s %s: reached the upstream", v.method, v.target)
			}
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times", n)
		}
		// The login page, and everything else, are served.
		for _, target := range []string{"/login", "/login?next=%2Fhome", "/other"} {
			if code := send("GET", target, "", ""); code != 401 { // the test upstream answers 401 to no password
				t.Errorf("GET %s: status %d, want the upstream's 401", target, code)
			}
		}
	})
}

// TestLoginPathSpellings: Rails routes a path with a format extension
// ("/login.json") to the route without it, and Symfony and Laravel serve
// a path under their front controller ("/index.php/login") as the path
// after it, so beside a route for everything else an attempt at a login
// route's path so spelt is guarded as the login route: with the account
// locked, the right password does not reach the service. So is one under
// an ASP.NET cookieless segment, and one that names it in the query
// (CodeIgniter's /index.php?/login, Drupal's ?q=login) is refused by any
// method. A login page
// asked for with an extension (GET /login.html, no body) is served.
func TestLoginPathSpellings(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 0)
		p := quickstart(t, up.URL, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
			"limit: {algorithm: sliding_log, rate: 10, period: 1m}", "limit: {algorithm: fixed_window, rate: 100000, period: 1m}",
			"  - name: login\n", "  - name: everything-else\n    path: /\n    upstream: "+up.URL+"\n  - name: login\n")
		g := start(t, p, redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		for _, path := range []string{"/login.json", "/Login.JSON", "/login.x", "/login.json/", "/index.php/login", "/app.php/login/", "/index.php/login.json",
			"/(S(x))/login"} {
			before := up.hits.Load()
			if code := postLogin(t, g, "198.51.100.9", path, "application/json", `{"username":"alice","password":"demo"}`); code != 429 {
				t.Errorf("POST %s: status %d, want 429 (the account is locked)", path, code)
			}
			if up.hits.Load() != before {
				t.Errorf("POST %s: reached the upstream", path)
			}
		}
		// The path in the query (CodeIgniter, Drupal), by any method.
		for _, c := range []struct{ method, target string }{
			{"GET", "/index.php?/login"}, {"OPTIONS", "/?/login"}, {"POST", "/?q=login"}, {"PUT", "/index.php?q=login"},
		} {
			req, _ := http.NewRequest(c.method, g.public+c.target, strings.NewReader(`{"username":"alice","password":"demo"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", "198.51.100.9")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 && resp.StatusCode != 405 {
				t.Errorf("%s %s: status %d, want 400 or 405", c.method, c.target, resp.StatusCode)
			}
		}
		if n := up.logins("alice"); n != 0 {
			t.Fatalf("the locked account was logged into %d times", n)
		}
		req, _ := http.NewRequest("GET", g.public+"/login.html", nil)
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 { // the test upstream answers 401 to no password
			t.Errorf("GET /login.html: status %d, want the upstream's 401", resp.StatusCode)
		}
		if code := postLogin(t, g, "198.51.100.9", "/login-help.json", "application/json", `{"q":1}`); code != 401 {
			t.Errorf("POST /login-help.json: status %d, want the upstream's 401", code)
		}
	})
}

// TestLoginLookAlikeSuccess: on a service that tells "Alice" from
// "alice" (case- and accent-sensitive, as PostgreSQL's default collation
// is), whoever owns "Alice" logs into it between guesses at "alice". The
// guard counts both as one account; the look-alike's own success must
// not clear the failures spelt "alice", or its owner would get four
// guesses at "alice" per login of their own, without end.
func TestLoginLookAlikeSuccess(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		var mu sync.Mutex
		let := map[string]int{}
		passwords := map[string]string{"alice": "demo", "Alice": "mine"}
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body struct{ Username, Password string }
			json.NewDecoder(r.Body).Decode(&body)
			if pw, ok := passwords[body.Username]; !ok || pw != body.Password {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			mu.Lock()
			let[body.Username]++
			mu.Unlock()
		}))
		t.Cleanup(up.Close)
		g := start(t, loginConfig(t, up.URL), redisURL)
		ip := 0
		login := func(acct, pw string) int {
			ip++
			body, _ := json.Marshal(map[string]string{"username": acct, "password": pw})
			return postLogin(t, g, fmt.Sprintf("203.0.113.%d", ip), "/login", "application/json", string(body))
		}
		for i := 0; i < 4; i++ {
			if code := login("alice", fmt.Sprintf("guess-%d", i)); code != 401 {
				t.Fatalf("guess %d: %d", i, code)
			}
		}
		if code := login("Alice", "mine"); code != 200 {
			t.Fatalf("the look-alike's own login: %d, want 200", code)
		}
		if code := login("alice", "guess-4"); code != 401 {
			t.Fatalf("the fifth guess: %d, want 401", code)
		}
		if code := login("alice", "demo"); code != 429 {
			t.Errorf("the right password after five guesses and a look-alike's login: %d, want 429 (locked)", code)
		}
		mu.Lock()
		defer mu.Unlock()
		if let["alice"] != 0 {
			t.Fatalf("alice was logged into %d times", let["alice"])
		}
	})
}

// TestLoginOwnSuccessClears: a user's own success, spelt as their
// failures, clears them, so a user who logs in fine is never locked.
func TestLoginOwnSuccessClears(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newFoldedUpstream(t)
		g := start(t, loginConfig(t, up.URL), redisURL)
		for round := 0; round < 3; round++ {
			for i := 0; i < 4; i++ {
				if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", round*10+i), "/login", "application/json", `{"username":"carol","password":"guess"}`); code != 401 {
					t.Fatalf("round %d, guess %d: %d", round, i, code)
				}
			}
			if code := postLogin(t, g, "198.51.100.7", "/login", "application/json", `{"username":"carol","password":"demo"}`); code != 200 {
				t.Fatalf("round %d: carol's own login: %d, want 200", round, code)
			}
		}
	})
}
