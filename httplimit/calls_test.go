package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
)

// This file has what the tests moved down from the gateway's share: the
// quickstart policy, both stores, a clock the tests move, and the demo
// service behind the middleware.

// service is the middleware under p over s at now, in front of the demo
// service: POST /login answers 200 when the JSON body's password is
// "demo" and 401 otherwise, as the gateway's demo upstream does, and
// anything else 200. Hits counts what reached it.
type service struct {
	http.Handler
	hits atomic.Int64
}

func newService(t *testing.T, p *policy.Policy, s tollgate.Store, now func() time.Time) *service {
	t.Helper()
	mw, err := httplimit.Middleware(httplimit.Options{Policy: p, Store: s, Now: now, CleanPathForwarded: true})
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{}
	svc.Handler = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		svc.hits.Add(1)
		if r.Method == http.MethodPost && r.URL.Path == "/login" {
			var b struct{ Password string }
			json.NewDecoder(r.Body).Decode(&b)
			if b.Password != "demo" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		io.WriteString(w, "ok")
	}))
	return svc
}

// peer is the client in the tests moved here: in most of their policies
// a trusted proxy, which names the client address in X-Forwarded-For.
const peer = "127.0.0.1:1234"

// send serves a request from peer on h: header pairs of name and value,
// a JSON body (none for ""), and from, unless "", as its X-Forwarded-For.
func send(h http.Handler, method, target, from, body string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = peer
	if body == "" {
		r.Body, r.ContentLength = http.NoBody, 0
	} else {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	if from != "" {
		r.Header.Set("X-Forwarded-For", from)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// admitUntilRefused sends GETs of target until the first 429 (at most
// max) and returns how many were admitted, and the 429 (nil for none).
func admitUntilRefused(t *testing.T, h http.Handler, target string, max int, header ...string) (int, *httptest.ResponseRecorder) {
	t.Helper()
	for i := 0; i < max; i++ {
		switch rec := send(h, http.MethodGet, target, "", "", header...); rec.Code {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			return i, rec
		default:
			t.Fatalf("request %d: status %d: %s", i, rec.Code, rec.Body)
		}
	}
	return max, nil
}
