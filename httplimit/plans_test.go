package httplimit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/fixture"
)

// TestFreeKeyGetsExactly100: the quickstart's free key is admitted 100
// times a minute, and the 101st is a 429 problem with Retry-After, the
// RateLimit headers of both its limits and the legacy ones; a refusal
// never reaches the service.
func TestFreeKeyGetsExactly100(t *testing.T) {
	c := fixture.StillClock()
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	n, rec := admitUntilRefused(t, h, "/api/items", 200, "Authorization", "Bearer "+fixture.FreeKey)
	if n != 100 {
		t.Fatalf("admitted %d, want 100", n)
	}
	if hits := h.hits.Load(); hits != 100 {
		t.Fatalf("the service saw %d requests, want exactly 100", hits)
	}
	fixture.CheckFreeRefusal(t, rec.Code, rec.Header(), rec.Body.Bytes())
	// The service is never called for a refusal.
	send(h, "GET", "/api/items", "", "", "X-API-Key", fixture.FreeKey)
	if hits := h.hits.Load(); hits != 100 {
		t.Fatalf("the service saw %d requests after refusals, want 100", hits)
	}
}

// TestProKeyGets1000: the quickstart's pro key is admitted 1,000 times a
// minute.
func TestProKeyGets1000(t *testing.T) {
	c := fixture.StillClock()
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	if n, _ := admitUntilRefused(t, h, "/api/items", 1100, "X-API-Key", fixture.ProKey); n != 1000 {
		t.Fatalf("admitted %d, want 1000", n)
	}
	if h.hits.Load() != 1000 {
		t.Fatalf("the service saw %d", h.hits.Load())
	}
}

// TestExportCosts10: an export (cost 10) spends ten of the free plan's
// 100 a minute, the budget every other route spends too.
func TestExportCosts10(t *testing.T) {
	c := fixture.StillClock()
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	if n, _ := admitUntilRefused(t, h, "/api/export", 20, "X-API-Key", fixture.FreeKey); n != 10 {
		t.Fatalf("admitted %d exports, want 10 (cost 10 of 100)", n)
	}
	// The export spent the same plan budget as every other route.
	if rec := send(h, "GET", "/api/items", "", "", "X-API-Key", fixture.FreeKey); rec.Code != 429 {
		t.Fatalf("a read after 10 exports: %d, want 429", rec.Code)
	}
	rec := send(h, "GET", "/api/export", "", "", "X-API-Key", fixture.FreeKey)
	if got := rec.Header().Get("RateLimit"); !strings.HasPrefix(got, `"free.minute";r=0;`) {
		t.Errorf("RateLimit = %q", got)
	}
}

// TestInvalidKeysAreLimitedPerIP: unknown keys are a 401 problem, 10 a
// minute per client address; then every keyed request of the address is
// a 429, a right key's too, and none reaches the service.
func TestInvalidKeysAreLimitedPerIP(t *testing.T) {
	c := fixture.StillClock() // a fixed window of a minute
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	for i := 0; i < 10; i++ {
		rec := send(h, "GET", "/api/items", "", "", "X-API-Key", fmt.Sprintf("guess-%d", i))
		if rec.Code != 401 || !strings.Contains(rec.Body.String(), httplimit.ProblemInvalidKey) {
			t.Fatalf("guess %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := send(h, "GET", "/api/items", "", "", "X-API-Key", "guess-11")
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("11th invalid key: %d", rec.Code)
	}
	// Once over the budget, even a right key from that IP learns nothing.
	if rec := send(h, "GET", "/api/items", "", "", "X-API-Key", fixture.FreeKey); rec.Code != 429 {
		t.Fatalf("valid key from a penalised IP: %d, want 429", rec.Code)
	}
	if h.hits.Load() != 0 {
		t.Fatalf("the service saw %d requests", h.hits.Load())
	}
}

// TestForwardedForUntrustedIsIgnored: from a peer that is no trusted
// proxy, X-Forwarded-For is not believed: spoofed addresses do not buy a
// fresh budget of the anonymous plan (20 a minute per client address).
func TestForwardedForUntrustedIsIgnored(t *testing.T) {
	c := fixture.StillClock()
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	admitted := 0
	for i := 0; i < 30; i++ {
		if send(h, "GET", "/api/items", fmt.Sprintf("198.51.100.%d", i), "").Code == 200 {
			admitted++
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d with spoofed X-Forwarded-For from an untrusted peer, want 20", admitted)
	}
}

// TestForwardedForTrustedProxy: from a trusted proxy, the client is the
// first address from the right of X-Forwarded-For that is not trusted,
// whatever the client wrote to its left: each has its own 20.
func TestForwardedForTrustedProxy(t *testing.T) {
	c := fixture.StillClock()
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[127.0.0.0/8]")...), fixture.MemoryStore(t, c.Now), c.Now)
	for _, client := range []string{"203.0.113.5", "203.0.113.6"} {
		// The leftmost entry is attacker-controlled; the walk from the right
		// stops at the first untrusted address, the real client.
		if n, _ := admitUntilRefused(t, h, "/api/items", 30, "X-Forwarded-For", "6.6.6.6, "+client); n != 20 {
			t.Fatalf("client %s admitted %d, want its own 20", client, n)
		}
	}
}

// TestUserHeaderOnlyFromTrustedProxy: the user header is believed only
// from a trusted proxy: from another peer the anonymous plan's 20 apply,
// from a trusted one the user plan's (free: 100).
func TestUserHeaderOnlyFromTrustedProxy(t *testing.T) {
	c := fixture.StillClock()
	untrusted := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	if n, _ := admitUntilRefused(t, untrusted, "/api/items", 30, "X-User-ID", "mallory"); n != 20 {
		t.Fatalf("untrusted user header: admitted %d, want 20", n)
	}
	trusted := newService(t, fixture.Quickstart(t, fixture.Trusting("[127.0.0.1/32]")...), fixture.MemoryStore(t, c.Now), c.Now)
	if n, _ := admitUntilRefused(t, trusted, "/api/items", 130, "X-User-ID", "alice"); n != 100 {
		t.Fatalf("trusted user header: admitted %d, want the free plan's 100", n)
	}
}
