package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Echo is the built-in demo upstream (builtin:echo). It answers every
// request with a JSON description of it, and POST /login with 200 when the
// body's password (a JSON object's field, or a form's) is "demo" and 401
// otherwise. A ?sleep=D query (at most 10s) makes it answer slowly, to
// try concurrency limits.
func Echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !echoSleep(r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost && r.URL.Path == "/login" {
			echoLogin(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"method":  r.Method,
			"path":    r.URL.Path,
			"query":   r.URL.RawQuery,
			"headers": echoHeaders(r.Header),
		})
	})
}

// echoSleep waits for what r's ?sleep=D query asks (at most 10s), and
// reports false if the client went away first.
func echoSleep(r *http.Request) bool {
	d, err := time.ParseDuration(r.URL.Query().Get("sleep"))
	if err != nil || d <= 0 {
		return true
	}
	t := time.NewTimer(min(d, 10*time.Second))
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		t.Stop()
		return false
	}
}

// echoLogin answers POST /login: 200 when the body's password is
// "demo", 401 otherwise.
func echoLogin(w http.ResponseWriter, r *http.Request) {
	if echoPassword(r) != "demo" {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"ok":false,"error":"wrong username or password"}` + "\n"))
		return
	}
	w.Write([]byte(`{"ok":true}` + "\n"))
}

// echoPassword returns the password of a login request's body (its
// first 64 KiB): the form field password of an
// application/x-www-form-urlencoded body that has one, else the JSON
// object's field password (whatever the content type, as curl -d labels
// JSON a form). The query string is not read.
func echoPassword(r *http.Request) string {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		if form, _ := url.ParseQuery(string(body)); form.Has("password") {
			return form.Get("password")
		}
	}
	var login struct {
		Password string `json:"password"`
	}
	json.NewDecoder(bytes.NewReader(body)).Decode(&login)
	return login.Password
}

// echoHeaders returns the request headers Echo describes, each with its
// values joined: all but the credentials, which it never echoes.
func echoHeaders(h http.Header) map[string]string {
	headers := map[string]string{}
	for k, v := range h {
		switch k {
		case "Authorization", "X-Api-Key", "Cookie":
			continue // never echo credentials
		}
		headers[k] = strings.Join(v, ", ")
	}
	return headers
}
