package algo_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/calendartest"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestCalendarEveryZone checks calendar days and months in every zone of
// the tz database, at instants from 1970 to 2100 (half of them within two
// days of a change of UTC offset), against windows swept from the time
// package's view of the zone: the bounds, and the durations of a daily or
// monthly quota of 1 spent at the instant.
func TestCalendarEveryZone(t *testing.T) {
	rng := testenv.Rand(t)
	calendartest.Each(t, rng, 40, func(name string, zone *time.Location, l algo.Limit, at int64) {
		cal := l.Calendar
		start, end := calendartest.Window(zone, cal, at)
		if err := calendartest.CheckWallClock(zone, cal, at, start, end); err != nil {
			t.Fatalf("%s %s at %v: reference: %v", name, cal, time.UnixMilli(at).In(zone), err)
		}
		ws, we := calendartest.Window(zone, cal, start-1)
		ns, ne := calendartest.Window(zone, cal, end)
		want := [4]int64{ws, start, end, ne}
		if b := l.CalendarBounds(at); we != start || ns != end || b != want {
			t.Fatalf("%s %s at %v: CalendarBounds = %v, want %v", name, cal, time.UnixMilli(at).In(zone), b, want)
		}
		var s algo.State
		d, ttl, err := algo.Decide(l, &s, at, 1)
		if err != nil || !d.Allowed || d.ResetAfter != end-at || ttl != end-at {
			t.Fatalf("%s %s at %v: first = %+v ttl %d err %v, want allowed, reset %d", name, cal, time.UnixMilli(at).In(zone), d, ttl, err, end-at)
		}
		for _, now := range []int64{at, end - 1} {
			if d, _, _ := algo.Decide(l, &s, now, 1); d.Allowed || d.RetryAfter != end-now {
				t.Fatalf("%s %s: spent at %v, again at %v: %+v, want refused, retry %d", name, cal,
					time.UnixMilli(at).In(zone), time.UnixMilli(now).In(zone), d, end-now)
			}
		}
		if d, _, _ := algo.Decide(l, &s, end, 1); !d.Allowed {
			t.Fatalf("%s %s: spent at %v, refused at the window's end %v", name, cal, time.UnixMilli(at).In(zone), time.UnixMilli(end).In(zone))
		}
	})
}

// TestCalendarChanges pins the windows of the examples: days of
// 23 and 25 hours, a 30-minute change, a midnight the clocks skip.
func TestCalendarChanges(t *testing.T) {
	hm := func(h, m int) time.Duration { return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute }
	cases := []struct {
		zone string
		cal  algo.Calendar
		at   string // RFC 3339, in the zone
		len  time.Duration
		end  string
	}{
		{"Europe/Paris", algo.Daily, "2027-10-31T00:00:00+02:00", hm(25, 0), "2027-11-01T00:00:00+01:00"},
		{"Europe/Paris", algo.Daily, "2027-03-28T12:00:00+02:00", hm(23, 0), "2027-03-29T00:00:00+02:00"},
		{"Europe/Paris", algo.Monthly, "2027-10-15T00:00:00+02:00", 31*24*time.Hour + time.Hour, "2027-11-01T00:00:00+01:00"},
		{"Australia/Lord_Howe", algo.Daily, "2027-04-04T10:00:00+10:30", hm(24, 30), "2027-04-05T00:00:00+10:30"},
		{"America/Santiago", algo.Daily, "2027-09-05T12:00:00-03:00", hm(23, 0), "2027-09-06T00:00:00-03:00"},
		{"America/New_York", algo.Daily, "2027-11-07T01:30:00-05:00", hm(25, 0), "2027-11-08T00:00:00-05:00"},
	}
	for _, c := range cases {
		zone, err := time.LoadLocation(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		at, _ := time.Parse(time.RFC3339, c.at)
		end, _ := time.Parse(time.RFC3339, c.end)
		l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 1, Period: algo.Day, Calendar: c.cal, Zone: zone}
		if c.cal == algo.Monthly {
			l.Period = algo.Month
		}
		b := l.CalendarBounds(at.UnixMilli())
		if got := time.Duration(b[2]-b[1]) * time.Millisecond; got != c.len || b[2] != end.UnixMilli() {
			t.Errorf("%s %s at %s: window [%v, %v) lasts %v, want %v ending %s", c.zone, c.cal, c.at,
				time.UnixMilli(b[1]).In(zone), time.UnixMilli(b[2]).In(zone), got, c.len, c.end)
		}
	}
}
