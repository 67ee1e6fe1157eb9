package gateway_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestDailyQuotaResetsAtLocalMidnight: the quickstart's Free plan allows
// 1,000 requests a day beside its 100 a minute; the day ends at midnight in
// the file's zone (Asia/Ho_Chi_Minh, UTC+7), not at UTC midnight.
func TestDailyQuotaResetsAtLocalMidnight(t *testing.T) {
	hcm, err := time.LoadLocation("Asia/Ho_Chi_Minh")
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	clock := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, hcm)}
	g := startClock(t, config(t, up.URL, "[]"), "", clock.Now)
	for round := 0; round < 10; round++ {
		if n, _, _ := admitUntilRefused(t, g.public+"/api/items", 100, "X-API-Key", freeKey); n != 100 {
			t.Fatalf("round %d: admitted %d of 100", round, n)
		}
		clock.Add(61 * time.Second) // past the per-minute limit, same day
	}
	resp := get(t, g.public+"/api/items", "X-API-Key", freeKey)
	untilMidnight := time.Date(2026, 12, 2, 0, 0, 0, 0, hcm).Sub(clock.Now())
	wantT := strconv.FormatInt(int64((untilMidnight+time.Second-1)/time.Second), 10)
	if resp.StatusCode != 429 || resp.Header.Get("RateLimit") != `"free.day";r=0;t=`+wantT || resp.Header.Get("Retry-After") != wantT {
		t.Fatalf("1,001st request of the day: %d, RateLimit %q, Retry-After %q (want t=%s)",
			resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"), wantT)
	}
	// 17:00 UTC is midnight in Ho Chi Minh City: the quota is back.
	clock.Set(time.Date(2026, 12, 1, 16, 59, 59, 0, time.UTC))
	if code := get(t, g.public+"/api/items", "X-API-Key", freeKey).StatusCode; code != 429 {
		t.Fatalf("one second before local midnight: %d", code)
	}
	clock.Set(time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC))
	resp = get(t, g.public+"/api/items", "X-API-Key", freeKey)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"free.day";q=1000;w=86400`) {
		t.Fatalf("at local midnight: %d %v", resp.StatusCode, resp.Header)
	}
	if up.hits.Load() != 1001 {
		t.Fatalf("upstream saw %d, want 1,001", up.hits.Load())
	}
}
