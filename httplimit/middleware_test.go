package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

const pol = `version: t1
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free: {algorithm: fixed_window, rate: 3, period: 1m}
routes:
  - {name: read, path: /, upstream: builtin:echo}
  - {name: pay, method: POST, path: /pay, upstream: builtin:echo, on_store_failure: fail_closed}
`

// fixedClockStore is a memory store on a fixed clock, so fixed windows
// cannot roll over during a test.
func fixedClockStore(t *testing.T) tollgate.Store {
	now := time.Date(2026, 11, 29, 12, 0, 10, 0, time.UTC)
	s := memory.New(memory.Options{Now: func() time.Time { return now }})
	t.Cleanup(func() { s.Close() })
	return s
}

func handler(t *testing.T, store tollgate.Store, legacy bool) (http.Handler, *atomic.Int64) {
	t.Helper()
	p, err := policy.Parse([]byte(pol), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p.LegacyHeaders = legacy
	mw, err := httplimit.Middleware(httplimit.Options{Policy: p, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		info, ok := httplimit.FromContext(r.Context())
		if !ok || info.Subject.Kind != "ip" || strings.Contains(info.Subject.ID, "192.0.2") {
			t.Errorf("handler info: %+v", info)
		}
		w.Write([]byte("app"))
	})), &calls
}

func do(h http.Handler, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestMiddlewareOnItsOwn(t *testing.T) {
	h, calls := handler(t, fixedClockStore(t), false)
	for i := 0; i < 3; i++ {
		rec := do(h, "GET", "/anything")
		if rec.Code != 200 || rec.Body.String() != "app" {
			t.Fatalf("request %d: %d %q", i, rec.Code, rec.Body)
		}
		if got, want := rec.Header().Get("RateLimit"), `"free";r=`+string(rune('2'-i))+`;t=50`; got != want {
			t.Errorf("request %d: RateLimit = %q, want %q", i, got, want)
		}
	}
	rec := do(h, "GET", "/anything")
	if rec.Code != 429 || calls.Load() != 3 {
		t.Fatalf("4th: %d, handler called %d times", rec.Code, calls.Load())
	}
	if rec.Header().Get("Retry-After") != "50" || rec.Header().Get("RateLimit") != `"free";r=0;t=50` ||
		rec.Header().Get("RateLimit-Policy") != `"free";q=3;w=60` {
		t.Errorf("refusal headers: %v", rec.Header())
	}
	if rec.Header().Get("X-RateLimit-Limit") != "" {
		t.Error("legacy headers sent without the option")
	}
	var p httplimit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != 429 || p.RetryAfter != 50 {
		t.Errorf("problem %q: %+v %v", rec.Body, p, err)
	}
}

func TestLegacyHeaders(t *testing.T) {
	h, _ := handler(t, fixedClockStore(t), true)
	rec := do(h, "GET", "/")
	if rec.Header().Get("X-RateLimit-Limit") != "3" || rec.Header().Get("X-RateLimit-Remaining") != "2" || rec.Header().Get("X-RateLimit-Reset") != "50" {
		t.Errorf("legacy headers: %v", rec.Header())
	}
}

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv, "rl:*")) }

// TestStoreFailure uses a real Redis store whose server has been stopped:
// ordinary routes fail open, fail_closed routes answer 503.
func TestStoreFailure(t *testing.T) {
	s := fixture.DeadRedisStore(t)
	h, calls := handler(t, s, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if rec.Code != 200 || calls.Load() != 1 {
		t.Fatalf("fail_open route: %d, handler calls %d", rec.Code, calls.Load())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/pay", nil).WithContext(ctx))
	if rec.Code != 503 || calls.Load() != 1 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("fail_closed route: %d, handler calls %d", rec.Code, calls.Load())
	}
}

func TestMiddlewareNeedsPolicyAndStore(t *testing.T) {
	if _, err := httplimit.Middleware(httplimit.Options{}); err == nil {
		t.Fatal("accepted empty options")
	}
}

// TestMiddlewarePathReadings: in front of a handler that routes on the
// path as written (chi, Express-style routers resolve no dot segments and
// keep %2F within a segment), /files/../x and /files%2F..%2Fx were
// charged as / (cost 1) while the handler served them as /files/ (cost 3). A path whose
// readings match different routes is now a 400 that costs nothing; with
// CleanPathForwarded (a handler that forwards Info.Path, as the gateway
// does) it is decided as cleaned.
func TestMiddlewarePathReadings(t *testing.T) {
	p, err := policy.Parse([]byte(`version: t1
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free: {algorithm: fixed_window, rate: 10, period: 1m}
routes:
  - {name: read, path: /, upstream: builtin:echo}
  - {name: files, path: /files/, upstream: builtin:echo, cost: 3}
  - {name: user, path: "/users/{id}", upstream: builtin:echo, cost: 3}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, clean := range []bool{false, true} {
		var files atomic.Int64
		mw, err := httplimit.Middleware(httplimit.Options{Policy: p, Store: fixedClockStore(t), CleanPathForwarded: clean})
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A router that reads the path as written.
			if strings.HasPrefix(r.URL.EscapedPath(), "/files/") {
				files.Add(1)
			}
		}))
		for _, path := range []string{"/files/../x", "/files/%2e%2e/x", "/files%2F..%2Fx", "/users/a%2Fb"} {
			rec := do(h, "GET", path)
			switch {
			case !clean && (rec.Code != 400 || rec.Header().Get("RateLimit") != ""):
				t.Errorf("%s: %d %q, want 400 charging nothing", path, rec.Code, rec.Header().Get("RateLimit"))
			case clean && rec.Code != 200:
				t.Errorf("CleanPathForwarded, %s: %d, want 200 (decided as cleaned)", path, rec.Code)
			}
		}
		if files.Load() > 0 && !clean {
			t.Errorf("the handler served %d file requests the middleware charged as /", files.Load())
		}
		// Paths whose readings agree are decided as before.
		if rec := do(h, "GET", "/files/a/./b"); !clean && rec.Code != 200 {
			t.Errorf("/files/a/./b: %d, want 200", rec.Code)
		}
	}
}
