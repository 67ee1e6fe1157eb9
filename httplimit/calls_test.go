package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// This file has what the tests moved down from the gateway's share: the
// quickstart policy, both stores, a clock the tests move, and the demo
// service behind the middleware.

// quickstart is examples/quickstart.yaml with edits applied: pairs of text
// to find (which must be there, so a changed quickstart fails loudly) and
// text to put in its place.
func quickstart(t *testing.T, edits ...string) *policy.Policy {
	t.Helper()
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("examples/quickstart.yaml no longer holds %q; update the test", edits[i])
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	p, err := policy.Parse([]byte(s), "quickstart-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The quickstart's API keys.
const (
	freeKey = "free-demo-key"
	proKey  = "pro-demo-key"
)

// trusting is the quickstart edit that sets its trusted proxies to
// trusted (a YAML list).
func trusting(trusted string) []string {
	return []string{`trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: " + trusted}
}

// clock is a clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// stillClock returns a clock at noon in the quickstart's zone (05:00
// UTC) on a fixed day, which no test window crosses unless the test moves
// it.
func stillClock() *clock { return &clock{t: time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// onStores runs f on the memory store and on a real Redis (a server of
// the test's own), both on now.
func onStores(t *testing.T, now func() time.Time, f func(t *testing.T, s tollgate.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryStore(t, now)) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := rstore.New(srv.NewClient(t), rstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f(t, s)
	})
}

// memoryStore returns a memory store on now.
func memoryStore(t *testing.T, now func() time.Time) tollgate.Store {
	s := memory.New(memory.Options{Now: now})
	t.Cleanup(func() { s.Close() })
	return s
}

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
