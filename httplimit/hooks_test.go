package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/httplimit"
)

func get(h http.Handler, remote string, header http.Header, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

// TestWithoutPolicy: one Limit, no policy file, applies per client
// address.
func TestWithoutPolicy(t *testing.T) {
	mw, err := httplimit.Middleware(httplimit.Options{Store: fixedClockStore(t),
		Limit: tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 3, Period: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(ok)
	for i := range 4 {
		w := get(h, "192.0.2.1:1000", nil, "/anything")
		if want := map[bool]int{true: 200, false: 429}[i < 3]; w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
		if i == 0 && w.Header().Get("RateLimit") != `"default";r=2;t=50` {
			t.Fatalf("RateLimit %q", w.Header().Get("RateLimit"))
		}
	}
	if w := get(h, "192.0.2.2:1000", nil, "/anything"); w.Code != 200 {
		t.Fatalf("another address: %d", w.Code)
	}
	if _, err := httplimit.Middleware(httplimit.Options{Store: fixedClockStore(t)}); err == nil {
		t.Fatal("a middleware with neither a Policy nor a Limit was made")
	}
	if _, err := httplimit.Middleware(httplimit.Options{Store: fixedClockStore(t), Limit: tollgate.Limit{Rate: -1, Period: time.Second}}); err == nil {
		t.Fatal("a middleware with an invalid Limit was made")
	}
}

// TestHooks: the subject, the cost and the refusal's answer come from the
// caller's functions.
func TestHooks(t *testing.T) {
	var seen *engine.Verdict
	mw, err := httplimit.Middleware(httplimit.Options{Store: fixedClockStore(t),
		Limit: tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 5, Period: time.Minute},
		Subject: func(r *http.Request) (string, bool) {
			id := r.Header.Get("X-Account")
			return id, id != ""
		},
		Cost: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.URL.Query().Get("cost"), 10, 64)
			return n
		},
		Refused: func(w http.ResponseWriter, r *http.Request, v *engine.Verdict) {
			seen = v
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "slow down")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(ok)
	acct := http.Header{"X-Account": {"acme"}}
	// One account from two addresses shares one budget: 3 + 2 = 5.
	if w := get(h, "192.0.2.1:1", acct, "/?cost=3"); w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=2;t=50` {
		t.Fatalf("cost 3: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	if w := get(h, "192.0.2.2:1", acct, "/?cost=2"); w.Code != 200 {
		t.Fatalf("cost 2 from another address: %d", w.Code)
	}
	w := get(h, "192.0.2.1:1", acct, "/")
	if w.Code != http.StatusServiceUnavailable || w.Body.String() != "slow down" || seen == nil ||
		seen.Outcome != engine.Refused || seen.Reason != engine.ReasonRate || w.Header().Get("RateLimit") == "" {
		t.Fatalf("refusal: %d %q, verdict %+v", w.Code, w.Body.String(), seen)
	}
	// Without the account header, the address is the subject.
	if w := get(h, "192.0.2.1:1", nil, "/"); w.Code != 200 {
		t.Fatalf("by address: %d", w.Code)
	}
	// A cost no limit could admit is the caller's error, and charges
	// nothing.
	seen = nil
	if w := get(h, "192.0.2.3:1", nil, "/?cost=6"); w.Code != http.StatusServiceUnavailable || seen.Outcome != engine.Invalid || seen.Reason != engine.ReasonCostExceedsBurst {
		t.Fatalf("cost 6 of 5: %d, verdict %+v", w.Code, seen)
	}
	if w := get(h, "192.0.2.3:1", nil, "/?cost=5"); w.Code != 200 {
		t.Fatalf("cost 5 after a refused cost 6: %d", w.Code)
	}
}

// TestCostOverBurstWithoutHook: the default answer to a cost no limit
// could admit is 400.
func TestCostOverBurstWithoutHook(t *testing.T) {
	mw, err := httplimit.Middleware(httplimit.Options{Store: fixedClockStore(t), Limit: tollgate.PerMinute(5),
		Cost: func(r *http.Request) int64 { return 9 }})
	if err != nil {
		t.Fatal(err)
	}
	if w := get(mw(ok), "192.0.2.1:1", nil, "/"); w.Code != http.StatusBadRequest {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
}
