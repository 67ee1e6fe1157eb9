package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/calendartest"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestCalendarTTLOnRedisClock: a calendar quota decided on Redis' own
// clock gives its key a lifetime that ends exactly at the zone's next
// midnight (first of the month), as the time package computes it, not
// 24 hours (31 days) on.
func TestCalendarTTLOnRedisClock(t *testing.T) {
	c := srv.NewClient(t)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"Europe/Paris", "Australia/Lord_Howe", "America/Santiago", "Asia/Kathmandu", "Pacific/Chatham", "America/St_Johns"} {
		zone, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, cal := range []algo.Calendar{algo.Daily, algo.Monthly} {
			l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 5, Period: algo.Day, Calendar: cal, Zone: zone}
			if cal == algo.Monthly {
				l.Period = algo.Month
			}
			p := unique("cal-ttl")
			before := time.Now().UnixMilli()
			d, err := s.Allow(ctx, algo.Request{Name: p, Subject: "s", Limit: l, Cost: 1})
			after := time.Now().UnixMilli()
			if err != nil || !d.Allowed {
				t.Fatalf("%s %s: %+v, %v", name, cal, d, err)
			}
			_, end := calendartest.Window(zone, cal, before)
			if _, end2 := calendartest.Window(zone, cal, after); end2 != end {
				continue // a window ended during the call
			}
			ttl, err := c.Do(ctx, c.B().Pttl().Key(rstore.Key(p, "s", algo.FixedWindow)).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			// The key expires at end on Redis' clock, which is this
			// process's clock here; PTTL is read a little later.
			if lo, hi := end-time.Now().UnixMilli()-2, end-before+2; ttl < lo || ttl > hi {
				t.Errorf("%s %s: PTTL %d ms, want %d..%d (to %v)", name, cal, ttl, lo, hi, time.UnixMilli(end).In(zone))
			}
			if r := d.ResetAfter.Milliseconds(); r < end-after || r > end-before {
				t.Errorf("%s %s: ResetAfter %v, want %d..%d ms", name, cal, d.ResetAfter, end-after, end-before)
			}
		}
	}
}

// TestCalendarClockSkew: the script finds Redis' time among the calendar
// windows the caller computed around its own clock; when Redis' clock is
// outside all three (the clocks differ by a day or more), the request
// fails with an error that says so, and nothing is written.
func TestCalendarClockSkew(t *testing.T) {
	c := srv.NewClient(t)
	src, err := rstore.DecideScript()
	if err != nil {
		t.Fatal(err)
	}
	script := rueidis.NewLuaScript(src)
	ctx := context.Background()
	zone, _ := time.LoadLocation("Europe/Paris")
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 5, Period: algo.Day, Calendar: algo.Daily, Zone: zone}
	for _, skew := range []time.Duration{-3 * 24 * time.Hour, 3 * 24 * time.Hour} {
		p := unique("cal-skew")
		key := rstore.Key(p, "s", algo.FixedWindow)
		// Bounds computed for a caller whose clock is skew away from
		// Redis'; "" asks the script to use Redis' TIME.
		req := algo.Request{Limit: l, Cost: 1, Now: time.Now().Add(skew)}
		res := script.Exec(ctx, c, []string{key}, []string{"", "0", rstore.Pack(req)})
		_, errs, err := rstore.Outcomes(res, l, 1)
		if err != nil {
			t.Fatalf("skew %v: %v", skew, err)
		}
		if err := errs[0]; err == nil || !strings.Contains(err.Error(), "calendar window") {
			t.Errorf("skew %v: %v, want a calendar window error", skew, err)
		}
		if n, _ := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64(); n != 0 {
			t.Errorf("skew %v: the key was written", skew)
		}
	}
	// A skew within a window either way is decided.
	for _, skew := range []time.Duration{-20 * time.Hour, 20 * time.Hour} {
		req := algo.Request{Limit: l, Cost: 1, Now: time.Now().Add(skew)}
		key := rstore.Key(unique("cal-skew"), "s", algo.FixedWindow)
		res := script.Exec(ctx, c, []string{key}, []string{"", "0", rstore.Pack(req)})
		ds, errs, err := rstore.Outcomes(res, l, 1)
		if err != nil || errs[0] != nil || !ds[0].Allowed {
			t.Errorf("skew %v: %+v, %v %v, want allowed", skew, ds, errs, err)
		}
	}
}
