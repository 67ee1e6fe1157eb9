package httplimit_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/fixture"
)

// TestDailyQuotaResetsAtLocalMidnight: the quickstart's Free plan allows
// 1,000 requests a day beside its 100 a minute; the day ends at midnight in
// the file's zone (Asia/Ho_Chi_Minh, UTC+7), not at UTC midnight.
func TestDailyQuotaResetsAtLocalMidnight(t *testing.T) {
	hcm, err := time.LoadLocation("Asia/Ho_Chi_Minh")
	if err != nil {
		t.Fatal(err)
	}
	c := fixture.ClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, hcm))
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[]")...), fixture.MemoryStore(t, c.Now), c.Now)
	for round := 0; round < 10; round++ {
		if n, _ := admitUntilRefused(t, h, "/api/items", 100, "X-API-Key", fixture.FreeKey); n != 100 {
			t.Fatalf("round %d: admitted %d of 100", round, n)
		}
		c.Add(61 * time.Second) // past the per-minute limit, same day
	}
	rec := send(h, "GET", "/api/items", "", "", "X-API-Key", fixture.FreeKey)
	untilMidnight := time.Date(2026, 12, 2, 0, 0, 0, 0, hcm).Sub(c.Now())
	wantT := strconv.FormatInt(int64((untilMidnight+time.Second-1)/time.Second), 10)
	if rec.Code != 429 || rec.Header().Get("RateLimit") != `"free.day";r=0;t=`+wantT || rec.Header().Get("Retry-After") != wantT {
		t.Fatalf("1,001st request of the day: %d, RateLimit %q, Retry-After %q (want t=%s)",
			rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"), wantT)
	}
	// 17:00 UTC is midnight in Ho Chi Minh City: the quota is back.
	c.Set(time.Date(2026, 12, 1, 16, 59, 59, 0, time.UTC))
	if code := send(h, "GET", "/api/items", "", "", "X-API-Key", fixture.FreeKey).Code; code != 429 {
		t.Fatalf("one second before local midnight: %d", code)
	}
	c.Set(time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC))
	rec = send(h, "GET", "/api/items", "", "", "X-API-Key", fixture.FreeKey)
	if rec.Code != 200 || !strings.Contains(rec.Header().Get("RateLimit-Policy"), `"free.day";q=1000;w=86400`) {
		t.Fatalf("at local midnight: %d %v", rec.Code, rec.Header())
	}
	if h.hits.Load() != 1001 {
		t.Fatalf("the service saw %d, want 1,001", h.hits.Load())
	}
}

// loginAs sends a JSON login of user and password from client address
// from and returns the status, the headers and the body.
func loginAs(h http.Handler, from, user, password string) (int, http.Header, string) {
	rec := send(h, "POST", "/login", from, fmt.Sprintf(`{"username":%q,"password":%q}`, user, password))
	return rec.Code, rec.Header(), rec.Body.String()
}

// TestLoginGuard: 5 wrong passwords lock the account; the 6th attempt is
// refused without reaching the service, from another client IP and with
// the right password; the lock doubles on the next offence; once it ends
// the right password works. A user who logs in fine is never locked.
func TestLoginGuard(t *testing.T) {
	c := fixture.ClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[127.0.0.1/32]")...), fixture.MemoryStore(t, c.Now), c.Now)
	for i := 0; i < 5; i++ {
		if i > 0 {
			c.Add(time.Second)
		}
		if code, _, body := loginAs(h, "203.0.113.1", "Alice", "guess"); code != 401 {
			t.Fatalf("wrong password %d: %d %s", i+1, code, body)
		}
	}
	// Locked at the 5th failure (t+4s) for a minute.
	c.Add(time.Second)
	code, hdr, body := loginAs(h, "198.51.100.9", "alice", "demo")
	if code != 429 || hdr.Get("Retry-After") != "59" || !strings.Contains(body, httplimit.ProblemLoginLocked) {
		t.Fatalf("6th attempt, other IP, right password: %d Retry-After %q %s", code, hdr.Get("Retry-After"), body)
	}
	if h.hits.Load() != 5 {
		t.Fatalf("the service saw %d attempts, want 5", h.hits.Load())
	}
	// The lock ends at t+64s; five more failures lock it for twice as long.
	c.Add(59 * time.Second)
	for i := 0; i < 5; i++ {
		loginAs(h, "203.0.113.1", "alice", "guess")
	}
	if code, hdr, _ := loginAs(h, "203.0.113.1", "alice", "demo"); code != 429 || hdr.Get("Retry-After") != "120" {
		t.Fatalf("second offence: %d Retry-After %q, want a 2-minute lock", code, hdr.Get("Retry-After"))
	}
	c.Add(2 * time.Minute)
	if code, _, body := loginAs(h, "203.0.113.1", "alice", "demo"); code != 200 {
		t.Fatalf("after the lock, the right password: %d %s", code, body)
	}
	// Good logins never count.
	for i := 0; i < 30; i++ {
		if code, _, body := loginAs(h, "203.0.113.7", "bob", "demo"); code != 200 {
			t.Fatalf("bob's login %d: %d %s", i, code, body)
		}
		c.Add(7 * time.Second) // under the route's 10 a minute
	}
}

// TestLoginIPSpray: one IP trying 50 accounts, one guess each, is stopped
// by the per-IP failure limit (20 per 10 minutes), not by account locks.
func TestLoginIPSpray(t *testing.T) {
	c := fixture.ClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := newService(t, fixture.Quickstart(t, fixture.Trusting("[127.0.0.1/32]")...), fixture.MemoryStore(t, c.Now), c.Now)
	stoppedAt := -1
	for i := 0; i < 50; i++ {
		code, _, body := loginAs(h, "203.0.113.66", fmt.Sprintf("user%d", i), "guess")
		if code == 429 {
			if !strings.Contains(body, httplimit.ProblemTooManyFailed) {
				t.Fatalf("attempt %d: refused for another reason: %s", i, body)
			}
			if stoppedAt < 0 {
				stoppedAt = i
			}
		} else if code != 401 || stoppedAt >= 0 {
			t.Fatalf("attempt %d: %d after being stopped at %d", i, code, stoppedAt)
		}
		c.Add(7 * time.Second) // under the route's 10 a minute
	}
	if stoppedAt != 20 || h.hits.Load() != 20 {
		t.Fatalf("stopped at attempt %d, the service saw %d; want both 20", stoppedAt, h.hits.Load())
	}
	// Another address is not affected.
	if code, _, _ := loginAs(h, "203.0.113.67", "user1", "demo"); code != 200 {
		t.Fatalf("another IP: %d", code)
	}
}
