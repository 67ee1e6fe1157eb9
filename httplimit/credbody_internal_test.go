package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store/memory"
)

// TestHeldBodiesBounded: the bodies held for their credentials at once
// are bounded (heldBodies × the largest); past it a request whose body
// must be read is a 503, and every request gives back what it held.
func TestHeldBodiesBounded(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	f, err := New(Options{Limit: tollgate.Limit{Rate: 100, Period: 60e9}, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	f.base.opts.Policy.MaxCredentialBody = 1 << 10
	h := f.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func() int {
		req := httptest.NewRequest("POST", "/", strings.NewReader(`{"n":1}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	f.base.held.Store(heldBodies<<10 - 6) // room for 6 bytes, not 7
	if code := send(); code != http.StatusServiceUnavailable {
		t.Fatalf("with the bound reached: %d, want 503", code)
	}
	f.base.held.Store(0)
	if code := send(); code != http.StatusOK {
		t.Fatalf("under the bound: %d, want 200", code)
	}
	if n := f.base.held.Load(); n != 0 {
		t.Fatalf("%d bytes still held after the request", n)
	}
}
