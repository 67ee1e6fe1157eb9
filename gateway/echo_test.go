package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/gateway"
)

// TestEchoLogin: the demo upstream's POST /login takes the password from
// a JSON body or a form, and only from the body.
func TestEchoLogin(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	for _, c := range []struct {
		contentType, query, body string
		want                     int
		reason                   string
	}{
		{"application/json", "", `{"username":"alice","password":"demo"}`, 200, "JSON, the right password"},
		{"application/json", "", `{"username":"alice","password":"nope"}`, 401, "JSON, a wrong password"},
		{"", "", `{"password":"demo"}`, 200, "JSON without a content type, as before"},
		{form, "", "username=alice&password=demo", 200, "a form, the right password: an HTML form's login"},
		{form + "; charset=utf-8", "", "username=alice&password=demo", 200, "a form with a charset"},
		{form, "", "username=alice&password=nope", 401, "a form, a wrong password"},
		{form, "", "username=alice", 401, "a form without a password"},
		{form, "", "password=%64emo", 200, "a form's escapes are decoded"},
		{form, "password=demo", "username=alice", 401, "the password in the query string, not the body"},
		{form, "", `{"password":"demo"}`, 200, "JSON labelled a form (curl -d's default) was accepted before, and still is"},
		{form, "", `{"password":"nope"}`, 401, "JSON labelled a form, a wrong password"},
		{form, "", "password=nope&x={\"password\":\"demo\"}", 401, "a form's own password decides, not JSON in it"},
		{"application/json", "", "password=demo", 401, "a form sent as JSON is not JSON's password"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/login?"+c.query, strings.NewReader(c.body))
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		rec := httptest.NewRecorder()
		gateway.Echo().ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s (%s %q): %d %s, want %d", c.reason, c.contentType, c.body, rec.Code, rec.Body.String(), c.want)
		}
	}
}

// TestEchoFormLoginThroughGateway: the quickstart's login route, whose
// guard reads the account from a JSON body or a form, passes a form
// login on to the demo upstream, which answers it by its password.
func TestEchoFormLoginThroughGateway(t *testing.T) {
	up := newEchoUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	for _, c := range []struct {
		password string
		want     int
		reason   string
	}{
		{"demo", 200, "the demo password, from an HTML form"},
		{"guess", 401, "a wrong password is a failure the guard counts"},
	} {
		req, _ := http.NewRequest("POST", g.public+"/login", strings.NewReader("username=alice&password="+c.password))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.reason, resp.StatusCode, c.want)
		}
	}
}
