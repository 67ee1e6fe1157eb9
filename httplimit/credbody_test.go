package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
)

// TestCredentialBody: a form, JSON or multipart body is read for the
// access_token it may hold and reaches the handler whole; one that cannot
// be read as every framework reads it is refused before anything is
// charged, and other bodies are not read at all.
func TestCredentialBody(t *testing.T) {
	p, err := policy.Parse([]byte(strings.Replace(pol, "anonymous_plan: free}", "anonymous_plan: free, max_body: 1KiB}", 1)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(httplimit.Options{Policy: p, Store: fixedClockStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	}))
	big := strings.Repeat("x", 2<<10)
	for _, c := range []struct {
		ctype, encoding, body string
		status                int
		why                   string
	}{
		{"application/json", "", `{"n":1}`, 200, "read, no credential, forwarded whole"},
		{"application/x-www-form-urlencoded", "", "a=1&b=" + strings.Repeat("y", 900), 200, "under the limit"},
		{"application/octet-stream", "", big, 200, "an upload is not read: no limit"},
		{"application/json", "", `{"access_token":"nope"}`, 401, "an unknown key in the body"},
		{"application/json", "", `{"access_token":7}`, 401, "a token no key could be"},
		{"application/json", "", `{"n":` + big + `}`, 413, "over identity.max_body"},
		{"application/json", "gzip", `{"n":1}`, 415, "compressed: its fields cannot be read"},
		{"application/json", "", `{"n":1`, 400, "does not parse as its type says"},
		{"application/json, text/plain", "", `{"n":1}`, 400, "a Content-Type naming two types: servers take either"},
	} {
		got = ""
		req := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ctype)
		if c.encoding != "" {
			req.Header.Set("Content-Encoding", c.encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: %d, want %d: %s", c.why, rec.Code, c.status, rec.Body)
		}
		if c.status == 200 && got != c.body {
			t.Errorf("%s: the handler read %d bytes, want the %d sent", c.why, len(got), len(c.body))
		}
		if c.status != 200 && c.status != 401 && rec.Header().Get("RateLimit") != "" {
			t.Errorf("%s: refused and charged (RateLimit %q)", c.why, rec.Header().Get("RateLimit"))
		}
	}
	req := httptest.NewRequest("POST", "/", strings.NewReader(`{"n":1}`))
	req.Header.Add("Content-Type", "application/json")
	req.Header.Add("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 400 {
		t.Errorf("two Content-Type lines: %d, want 400", rec.Code)
	}
}
