package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/store/memory"
)

// TestHeldBodiesBounded: the bodies held for their credentials at once
// are bounded (heldBodies × the largest, heldPerClient × it for one
// client); past it a request whose body must be read is a 503, and every
// request gives back what it held.
func TestHeldBodiesBounded(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	f, err := New(Options{Limit: tollgate.Limit{Rate: 100, Period: 60e9}, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	f.base.opts.Policy.MaxCredentialBody = 1 << 10
	h := f.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(from string) int {
		req := httptest.NewRequest("POST", "/", strings.NewReader(`{"n":1}`))
		req.RemoteAddr = from + ":1234"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	b := f.base.held
	b.total = heldBodies<<10 - 6 // room for 6 bytes, not 7
	if code := send("192.0.2.1"); code != http.StatusServiceUnavailable {
		t.Fatalf("with the bound reached: %d, want 503", code)
	}
	b.total = 0
	if code := send("192.0.2.1"); code != http.StatusOK {
		t.Fatalf("under the bound: %d, want 200", code)
	}
	if b.total != 0 || len(b.by) != 0 {
		t.Fatalf("%d bytes still held after the request (%v)", b.total, b.by)
	}
	// One client at its share (a slow sender of large bodies) is refused;
	// another is not.
	mine := identityPrefix(t, "192.0.2.1")
	b.take(mine, heldPerClient<<10-6, 1<<10)
	if code := send("192.0.2.1"); code != http.StatusServiceUnavailable {
		t.Fatalf("a client at its share: %d, want 503", code)
	}
	if code := send("198.51.100.7"); code != http.StatusOK {
		t.Fatalf("another client beside it: %d, want 200", code)
	}
	b.give(mine, heldPerClient<<10-6)
	if b.total != 0 || len(b.by) != 0 {
		t.Fatalf("%d bytes still held after the requests (%v)", b.total, b.by)
	}
}

func identityPrefix(t *testing.T, ip string) netip.Prefix {
	t.Helper()
	return identity.ClientPrefix(netip.MustParseAddr(ip))
}
