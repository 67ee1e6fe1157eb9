package gateway_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sendRaw sends a request with exactly the header lines given (names
// spelt as given, repeated lines kept) and returns the status.
func sendRaw(t *testing.T, url string, header [][2]string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for _, kv := range header {
		req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (u *upstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last.Clone()
}

// TestForwardedIdentityFromUntrustedPeers: a client that is not a trusted
// proxy cannot hand the upstream an identity: headers the gateway believes
// only from trusted proxies (the user header, the forwarding headers, and
// any spelling of them) are removed, and X-Forwarded-For and X-Real-IP
// name the client the gateway charged.
func TestForwardedIdentityFromUntrustedPeers(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newUpstream(t)
		g := start(t, config(t, up.URL, "[]"), redisURL)
		code := sendRaw(t, g.public+"/api/items", [][2]string{
			{"X-User-Id", "admin"}, {"X_User_ID", "admin"}, {"x-user-id", "admin"},
			{"X-Real-Ip", "10.0.0.1"}, {"X-Forwarded-For", "10.0.0.2"}, {"Forwarded", "for=10.0.0.3"},
			{"X-Client-Ip", "10.0.0.4"}, {"True-Client-Ip", "10.0.0.5"}, {"X_Forwarded_For", "10.0.0.6"},
		})
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		h := up.lastHeader()
		for name := range h {
			n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			if n == "x-user-id" || n == "forwarded" || n == "x-client-ip" || n == "true-client-ip" {
				t.Errorf("the upstream got %s: %q from an untrusted peer", name, h[name])
			}
		}
		if got := h.Values("X-Real-Ip"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("X-Real-IP %q, want the peer 127.0.0.1", got)
		}
		if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("X-Forwarded-For %q, want the peer 127.0.0.1 alone", got)
		}
		if got := h.Values("X_Forwarded_For"); len(got) != 0 {
			t.Errorf("X_Forwarded_For %q reached the upstream", got)
		}
	})
}

// TestForwardedIdentityFromTrustedProxy: from a trusted proxy the user
// header passes, and the forwarding chain starts at the client the gateway
// charged: entries further left, which the client wrote, are dropped.
func TestForwardedIdentityFromTrustedProxy(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[127.0.0.0/8, 10.0.0.0/8]"), "")
	if code := sendRaw(t, g.public+"/api/items", [][2]string{
		{"X-User-Id", "alice"}, {"X-Forwarded-For", "6.6.6.6, 203.0.113.5, 10.1.1.1"}, {"X-Real-Ip", "6.6.6.6"},
	}); code != 200 {
		t.Fatalf("status %d", code)
	}
	h := up.lastHeader()
	if got := h.Get("X-User-Id"); got != "alice" {
		t.Errorf("X-User-ID %q, want alice from the trusted proxy", got)
	}
	if got := h.Get("X-Real-Ip"); got != "203.0.113.5" {
		t.Errorf("X-Real-IP %q, want the client 203.0.113.5", got)
	}
	if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "203.0.113.5, 10.1.1.1, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want 203.0.113.5, 10.1.1.1, 127.0.0.1", got)
	}
}

// TestTwoCredentials: the key charged is the key forwarded. Two different
// keys in one request are a 401; a Connection header cannot strip a
// credential or identity header the gateway decided on; a credential
// header spelt with underscores (which CGI-style servers read as the
// same header) never reaches the upstream.
func TestTwoCredentials(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newUpstream(t)
		g := start(t, config(t, up.URL, "[127.0.0.1/32]"), redisURL)
		for _, c := range []struct {
			name   string
			header [][2]string
		}{
			{"Bearer and X-API-Key differ", [][2]string{{"Authorization", "Bearer " + freeKey}, {"X-Api-Key", proKey}}},
			{"and Connection strips the Bearer", [][2]string{{"Authorization", "Bearer " + freeKey}, {"X-Api-Key", proKey}, {"Connection", "Authorization"}}},
			{"a Basic line before the Bearer", [][2]string{{"Authorization", "Basic YWxpY2U6cHc="}, {"Authorization", "Bearer " + proKey}}},
		} {
			before := up.hits.Load()
			if code := sendRaw(t, g.public+"/api/items", c.header); code != 401 {
				t.Errorf("%s: status %d, want 401", c.name, code)
			}
			if up.hits.Load() != before {
				t.Errorf("%s: reached the upstream", c.name)
			}
		}
		for _, c := range []struct {
			name   string
			header [][2]string
			want   map[string]string // headers the upstream must see ("" for none)
		}{
			{"the same key twice", [][2]string{{"Authorization", "Bearer " + proKey}, {"X-Api-Key", proKey}},
				map[string]string{"Authorization": "Bearer " + proKey, "X-Api-Key": proKey}},
			{"Connection names the Bearer", [][2]string{{"Authorization", "Bearer " + proKey}, {"Connection", "Authorization"}},
				map[string]string{"Authorization": "Bearer " + proKey}},
			{"Connection names the key", [][2]string{{"X-Api-Key", proKey}, {"Connection", "x-api-key, keep-alive"}},
				map[string]string{"X-Api-Key": proKey}},
			{"Connection names the user", [][2]string{{"X-User-Id", "alice"}, {"Connection", "X-User-ID"}},
				map[string]string{"X-User-Id": "alice"}},
			{"an underscore spelling of the key", [][2]string{{"X-Api-Key", proKey}, {"X_API_KEY", freeKey}},
				map[string]string{"X-Api-Key": proKey, textproto.CanonicalMIMEHeaderKey("X_API_KEY"): ""}},
		} {
			if code := sendRaw(t, g.public+"/api/items", c.header); code != 200 {
				t.Errorf("%s: status %d, want 200", c.name, code)
				continue
			}
			h := up.lastHeader()
			for name, want := range c.want {
				if got := strings.Join(h[name], ","); got != want {
					t.Errorf("%s: the upstream got %s %q, want %q", c.name, name, got, want)
				}
			}
		}
	})
}

// startForwardedNginx runs nginx as a reverse proxy in front of the
// gateway at tollgate (host:port) that names the client in Forwarded
// only, as nginx's own guide to RFC 7239 has it, passing on whatever
// X-Forwarded-For the client sent. It returns nginx's address.
func startForwardedNginx(t *testing.T, tollgate string) string {
	t.Helper()
	bin := proxyBinary(t, "nginx", "nginx")
	dir := t.TempDir()
	addr := freeAddr(t)
	conf := `daemon off;
worker_processes 1;
pid nginx.pid;
error_log error.log notice;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
    server {
        listen ` + addr + `;
        location / {
            proxy_set_header Forwarded "for=$remote_addr";
            proxy_pass http://` + tollgate + `;
        }
    }
}
`
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, exec.Command(bin, "-p", dir, "-c", path), addr, filepath.Join(dir, "error.log"))
	return addr
}

// TestForwardedProxyWithClientXFF: behind a trusted proxy that names the
// client in Forwarded, a client that writes its own X-Forwarded-For was
// charged as the address it wrote (a new one each time: every request
// passed), or with an empty one as the proxy itself (someone else's
// budget). Now an X-Forwarded-For that tells another story than the
// proxy's Forwarded is a 400, an empty one adds nothing, anonymous
// requests stay within the anonymous plan's 20 a minute for the client
// nginx saw, and the upstream never hears of the addresses made up.
func TestForwardedProxyWithClientXFF(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[127.0.0.1/32]"), "")
	ng := "http://" + startForwardedNginx(t, strings.TrimPrefix(g.public, "http://"))
	// The honest client, charged as 127.0.0.2 (nginx's $remote_addr).
	if resp, body := proxyGet(t, ng+"/api/items"); resp.StatusCode != 200 {
		t.Fatalf("an honest request: status %d: %s", resp.StatusCode, body)
	}
	if got := up.lastHeader().Get("X-Real-Ip"); got != "127.0.0.2" {
		t.Fatalf("X-Real-IP %q, want the client nginx saw, 127.0.0.2", got)
	}
	passed := 1
	for i := range 60 {
		xff := fmt.Sprintf("198.51.100.%d", i+1)
		if i%3 == 2 {
			xff = "" // an empty line: the chain ends at the proxy itself
		}
		resp, _ := proxyGet(t, ng+"/api/items", "X-Forwarded-For", xff)
		if xff != "" && resp.StatusCode != 400 {
			// The gateway cannot tell which header nginx wrote.
			t.Errorf("X-Forwarded-For %s beside nginx's Forwarded: status %d, want 400", xff, resp.StatusCode)
		}
		if resp.StatusCode == 200 {
			passed++
			if h := up.lastHeader(); strings.Contains(h.Get("X-Forwarded-For"), "198.51.100.") || h.Get("X-Real-Ip") != "127.0.0.2" {
				t.Errorf("request %d: the upstream heard X-Forwarded-For %q, X-Real-IP %q", i, h.Get("X-Forwarded-For"), h.Get("X-Real-Ip"))
			}
		}
	}
	if passed > 20 {
		t.Errorf("%d requests reached the upstream, want at most the anonymous plan's 20 a minute", passed)
	}
}

// TestQueryAccessToken: RFC 6750 lets a resource server take a bearer
// token from the access_token query parameter too (browsers' EventSource
// and WebSocket cannot set headers). A key whose minute was used up in
// its header went on being served from the query, charged as an
// anonymous address instead of the key. Now the query's token is the
// request's credential like the header's: charged to the key, and one
// that differs from the header's, or is given twice, is a 401.
func TestQueryAccessToken(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	for i := range 100 {
		if resp := get(t, g.public+"/api/items", "X-API-Key", freeKey); resp.StatusCode != 200 {
			t.Fatalf("request %d with the key in its header: %d", i, resp.StatusCode)
		}
	}
	before := up.hits.Load()
	for i := range 5 {
		resp := get(t, g.public+"/api/items?access_token="+freeKey)
		if resp.StatusCode != 429 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"free.minute";r=0;`) {
			t.Errorf("request %d with the used-up key in access_token: %d, RateLimit %q; want 429 on the key's minute",
				i, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	for _, c := range []struct {
		query  string
		header []string
	}{
		{"?access_token=" + proKey, []string{"X-API-Key", freeKey}},
		{"?access_token=" + proKey, []string{"Authorization", "Bearer " + freeKey}},
		{"?access_token=" + proKey + "&access_token=" + freeKey, nil},
		{"?access_token=", nil},
	} {
		if resp := get(t, g.public+"/api/items"+c.query, c.header...); resp.StatusCode != 401 {
			t.Errorf("%s %v: %d, want 401", c.query, c.header, resp.StatusCode)
		}
	}
	if n := up.hits.Load() - before; n != 0 {
		t.Errorf("%d requests reached the upstream with the key's minute used up", n)
	}
	// The same key in both places is one credential.
	if resp := get(t, g.public+"/api/items?access_token="+proKey, "X-API-Key", proKey); resp.StatusCode != 200 ||
		!strings.HasPrefix(resp.Header.Get("RateLimit"), `"pro";`) {
		t.Errorf("the pro key in both places: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

// TestBasicAuthKey: APIs in the manner of Stripe and Mailgun take the API
// key as a Basic credential's user name or password. A key whose minute
// was used up went on being served with the key in Basic, charged as an
// anonymous address. Now a Basic credential that holds a configured key
// is charged to it, and one that holds another key than the request's
// Bearer or X-API-Key is a 401; Basic credentials that hold no key (a
// service's own users) are left alone, as before.
func TestBasicAuthKey(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for i := range 100 {
		if resp := get(t, g.public+"/api/items", "X-API-Key", freeKey); resp.StatusCode != 200 {
			t.Fatalf("request %d with the key in its header: %d", i, resp.StatusCode)
		}
	}
	before := up.hits.Load()
	for _, auth := range []string{basic(freeKey, ""), basic("api", freeKey), basic(freeKey, "x")} {
		resp := get(t, g.public+"/api/items", "Authorization", auth)
		if resp.StatusCode != 429 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"free.minute";r=0;`) {
			t.Errorf("the used-up key in %s: %d, RateLimit %q; want 429 on the key's minute", auth, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	for _, h := range [][]string{
		{"Authorization", basic(proKey, ""), "X-API-Key", freeKey},
		{"Authorization", basic(proKey, freeKey)},
	} {
		if resp := get(t, g.public+"/api/items", h...); resp.StatusCode != 401 {
			t.Errorf("%v: %d, want 401", h, resp.StatusCode)
		}
	}
	if n := up.hits.Load() - before; n != 0 {
		t.Errorf("%d requests reached the upstream with the key's minute used up", n)
	}
	// A service's own Basic users: anonymous, as before.
	if resp := get(t, g.public+"/api/items", "Authorization", basic("alice", "secret")); resp.StatusCode != 200 ||
		!strings.HasPrefix(resp.Header.Get("RateLimit"), `"anonymous";`) {
		t.Errorf("Basic alice: %d, RateLimit %q; want 200 anonymous", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if resp := get(t, g.public+"/api/items", "Authorization", basic(proKey, proKey)); resp.StatusCode != 200 ||
		!strings.HasPrefix(resp.Header.Get("RateLimit"), `"pro";`) {
		t.Errorf("Basic with the pro key: %d, RateLimit %q; want 200 on pro", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

// TestCredentialSpellings: a credential that a common framework reads,
// in any spelling the gateway did not, was charged per address to the
// anonymous plan and forwarded as it came: with the Free key used up,
// `?access.token=KEY` (PHP reads it as access_token), `?access+token=`,
// `?access_token[]=` and a form body `access_token=KEY` (RFC 6750
// section 2.2, which r.FormValue reads) were 100 × 200 from 5 addresses;
// so were `Authorization: Token KEY` (Rails, Django REST framework),
// "Basic x, Bearer KEY" (Laravel), ?api_token= (Laravel), ?bearer_token=
// (Doorkeeper), an access_token cookie (PHP's $_REQUEST, ASP.NET), a POST
// form without a type (Rack) and multipart bodies that PHP splits
// otherwise than Go.
// Now each is charged to that key (429) or refused (400, 401, 413, 415),
// and none reaches the upstream.
func TestCredentialSpellings(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newUpstream(t)
		g := start(t, catchAllConfig(t, up.URL), redisURL)
		for i := range 100 {
			if resp := get(t, g.public+"/api/items", "X-API-Key", freeKey); resp.StatusCode != 200 {
				t.Fatalf("request %d with the key in its header: %d", i, resp.StatusCode)
			}
		}
		multipart := func(name string) (string, string) {
			return "multipart/form-data; boundary=XyZ", "--XyZ\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + freeKey + "\r\n--XyZ--\r\n"
		}
		type attempt struct{ method, target, ctype, body string }
		var attempts []attempt
		for _, q := range []string{"access_token", "access.token", "access+token", "access%20token", "access_token[]", "access_token[0]",
			"[access_token]", "access[token", "ACCESS_TOKEN", "access_token%00x", "+access_token"} {
			attempts = append(attempts, attempt{"GET", "/api/items?" + q + "=" + freeKey, "", ""})
		}
		for _, f := range []string{"access_token", "access.token", "access_token[]", "Access_Token"} {
			attempts = append(attempts,
				attempt{"POST", "/api/items", "application/x-www-form-urlencoded", "a=1&" + f + "=" + freeKey},
				attempt{"PUT", "/api/items", "application/x-www-form-urlencoded; charset=utf-8", f + "=" + freeKey})
			ct, body := multipart(f)
			attempts = append(attempts, attempt{"POST", "/api/items", ct, body})
		}
		for _, body := range []string{`{"access_token":"` + freeKey + `"}`, `{"ACCESS_TOKEN":"` + freeKey + `","x":1}`,
			`{"access_token":["` + freeKey + `"]}`, `{"\u0061ccess_token":"` + freeKey + `"}`} {
			attempts = append(attempts, attempt{"POST", "/api/items", "application/json", body}, attempt{"PATCH", "/", "application/vnd.api+json", body})
		}
		// Rack reads a POST without a type as a form; PHP's multipart
		// parser takes the first "boundary" in the type, and reads '\\'
		// and '\'' in a part's Content-Disposition otherwise than Go.
		attempts = append(attempts,
			attempt{"POST", "/api/items", "", "access_token=" + freeKey},
			attempt{"POST", "/api/items", "multipart/form-data; xboundary=AAA; boundary=BBB",
				"--BBB\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--BBB--\r\n--AAA\r\nContent-Disposition: form-data; name=\"access_token\"\r\n\r\n" + freeKey + "\r\n--AAA--\r\n"},
			attempt{"POST", "/api/items", "multipart/form-data; boundary=XyZ",
				"--XyZ\r\nContent-Disposition: form-data; name=\"x\"; a=\"\\\\\"; b=\"; name=access_token; c=\"\r\n\r\n" + freeKey + "\r\n--XyZ--\r\n"},
			attempt{"POST", "/api/items", "multipart/form-data; boundary=XyZ",
				"--XyZ\r\nContent-Disposition: form-data; name='access_token'\r\n\r\n" + freeKey + "\r\n--XyZ--\r\n"},
			// Other frameworks' fields (Laravel's api_token, Doorkeeper's
			// bearer_token), classic ASP.NET's %u escapes.
			attempt{"GET", "/api/items?api_token=" + freeKey, "", ""},
			attempt{"GET", "/api/items?bearer_token=" + freeKey, "", ""},
			attempt{"POST", "/api/items", "application/x-www-form-urlencoded", "api_token=" + freeKey},
			attempt{"GET", "/api/items?%u0061ccess_token=" + freeKey, "", ""})
		// Headers: Rails and Django REST framework read the Token scheme
		// as Bearer; Laravel takes the last "Bearer " anywhere; PHP's
		// $_REQUEST and ASP.NET's Request[] read cookies.
		headed := map[int][2]string{}
		for _, h := range [][2]string{
			{"Authorization", `Token token="` + freeKey + `", nonce="1"`},
			{"Authorization", "Basic Zm9v, Bearer " + freeKey},
			{"Authorization", "xBearer " + freeKey},
			{"Cookie", "a=1; access_token=" + freeKey},
		} {
			attempts = append(attempts, attempt{"GET", "/api/items", "", ""})
			headed[len(attempts)-1] = h
		}
		// Bodies the gateway cannot read as every framework would.
		attempts = append(attempts,
			attempt{"POST", "/api/items", "application/x-www-form-urlencoded; charset=utf-16", "access_token=" + freeKey},
			attempt{"POST", "/api/items", "application/json", `{"access_token":"` + freeKey + `"`},
			attempt{"POST", "/api/items", "multipart/form-data", "--XyZ\r\n"})
		before := up.hits.Load()
		for i, a := range attempts {
			req, _ := http.NewRequest(a.method, g.public+a.target, strings.NewReader(a.body))
			if a.body == "" {
				req.Body, req.ContentLength = nil, 0
			}
			if a.ctype != "" {
				req.Header.Set("Content-Type", a.ctype)
			}
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i%5+1))
			if h, ok := headed[i]; ok {
				req.Header.Set(h[0], h[1])
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case 429:
				if !strings.HasPrefix(resp.Header.Get("RateLimit"), `"free.minute";r=0;`) {
					t.Errorf("%s %s %q: 429 but RateLimit %q: not charged to the key", a.method, a.target, a.body, resp.Header.Get("RateLimit"))
				}
			case 400, 401, 413, 415:
			default:
				t.Errorf("%s %s (%s) %q: %d, want 429 on the key's minute or a refusal", a.method, a.target, a.ctype, a.body, resp.StatusCode)
			}
		}
		if n := up.hits.Load() - before; n != 0 {
			t.Errorf("%d requests with the used-up key spelt otherwise reached the upstream", n)
		}
		// The body still reaches the upstream whole once admitted.
		req, _ := http.NewRequest("POST", g.public+"/api/items", strings.NewReader(`{"access_token":"`+proKey+`","n":1}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"pro";`) {
			t.Errorf("the pro key in a JSON body: %d, RateLimit %q; want 200 charged to it", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	})
}
