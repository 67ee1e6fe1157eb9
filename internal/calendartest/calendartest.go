// Package calendartest checks calendar windows against the time package:
// it lists every zone of the tz database, picks instants in them (many
// near changes of UTC offset), and computes each instant's calendar day
// or month from first principles, by sweeping the zone's wall clock.
package calendartest

import (
	"archive/zip"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // every zone, on machines without /usr/share/zoneinfo

	"github.com/tollgate/tollgate/algo"
)

// Zones returns the names of every zone in the tz database that Go ships
// (GOROOT/lib/time/zoneinfo.zip), sorted.
func Zones() ([]string, error) {
	root := runtime.GOROOT()
	if root == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return nil, fmt.Errorf("listing zones: finding GOROOT: %w", err)
		}
		root = strings.TrimSpace(string(out))
	}
	z, err := zip.OpenReader(filepath.Join(root, "lib", "time", "zoneinfo.zip"))
	if err != nil {
		return nil, fmt.Errorf("listing zones: %w", err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, "/") {
			names = append(names, f.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// First and Last bound the instants [Instants] picks: 1970 to 2100.
var (
	First = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	Last  = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
)

const dayMS = 86_400_000

// Instants returns n instants (ms) between First and Last in zone, half
// of them uniform, half within two days of one of the zone's changes of
// offset (when it has any), where calendar windows go wrong.
func Instants(rng *rand.Rand, zone *time.Location, n int) []int64 {
	out := make([]int64, 0, n)
	for len(out) < n {
		t := First + 2*dayMS + rng.Int64N(Last-First-4*dayMS)
		if len(out)%2 == 1 {
			if _, end := time.UnixMilli(t).In(zone).ZoneBounds(); !end.IsZero() && end.UnixMilli() < Last-2*dayMS {
				t = end.UnixMilli() + rng.Int64N(4*dayMS) - 2*dayMS
				if rng.IntN(4) == 0 { // exactly at, or 1 ms before, the change
					t = end.UnixMilli() - rng.Int64N(2)
				}
			}
		}
		out = append(out, t)
	}
	return out
}

// Window returns the calendar day or month of zone holding t: [start,
// end), where a window starts at the first instant whose wall clock reads
// its first midnight or later. It sweeps the zone's periods of constant
// offset forward from well before t, noting the instants at which the wall
// clock first reaches each successive midnight.
func Window(zone *time.Location, cal algo.Calendar, t int64) (start, end int64) {
	from := t - 40*dayMS
	x := from
	_, off := time.UnixMilli(x).In(zone).Zone()
	m := next(cal, wall(x, off))
	found := false
	for {
		tm := time.UnixMilli(x).In(zone)
		_, off = tm.Zone()
		_, pe := tm.ZoneBounds()
		pieceEnd := int64(1) << 62
		if !pe.IsZero() {
			pieceEnd = pe.UnixMilli()
			if pieceEnd <= x {
				// On 31 December of a leap year (UTC), Go's rule-based
				// zones report a period that has already ended; it runs
				// on to the new year.
				pieceEnd = time.Date(time.UnixMilli(x).UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			}
		}
		for {
			c := max(x, m-int64(off)*1000)
			if c >= pieceEnd {
				break
			}
			if c > t {
				if !found {
					panic(fmt.Sprintf("calendartest: no window start found before %d in %v", t, zone))
				}
				return start, c
			}
			start, found = c, true
			m = next(cal, m)
		}
		x = pieceEnd
	}
}

// wall returns the wall clock reading of instant x under offset off (s),
// in ms as if it were UTC.
func wall(x int64, off int) int64 { return x + int64(off)*1000 }

// next returns the first midnight (a wall clock reading) after the wall
// clock reading w that begins a calendar window.
func next(cal algo.Calendar, w int64) int64 {
	d := time.UnixMilli(w).UTC()
	if cal == algo.Monthly {
		return time.Date(d.Year(), d.Month()+1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	}
	return time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, time.UTC).UnixMilli()
}

// CheckWallClock checks [start, end), computed for instant t, against
// what the time package says of the zone's wall clock at both bounds:
// each bound reads a midnight that begins a window (the first of a month
// for Monthly), or is a change of offset at which the clocks jumped past
// one; and 1 ms before it the wall clock read an earlier date.
func CheckWallClock(zone *time.Location, cal algo.Calendar, t, start, end int64) error {
	if start > t || t >= end {
		return fmt.Errorf("window [%d, %d) does not hold %d", start, end, t)
	}
	for _, b := range []int64{start, end} {
		lt := time.UnixMilli(b).In(zone)
		before := time.UnixMilli(b - 1).In(zone)
		y, m, d := lt.Date()
		midnight := lt.Hour() == 0 && lt.Minute() == 0 && lt.Second() == 0 && lt.Nanosecond() == 0
		zs, _ := lt.ZoneBounds()
		jumped := zs.UnixMilli() == b
		switch {
		case !midnight && !jumped:
			return fmt.Errorf("bound %d reads %v: neither a midnight nor a change of offset", b, lt)
		case cal == algo.Monthly && d != 1 && !jumped:
			return fmt.Errorf("monthly bound %d reads %v, not the first of a month", b, lt)
		}
		by, bm, bd := before.Date()
		if !(by < y || by == y && (bm < m || bm == m && bd < d)) {
			return fmt.Errorf("bound %d reads %v, but 1 ms earlier the wall clock read %v, no earlier date", b, lt, before)
		}
		if cal == algo.Monthly && by == y && bm == m {
			return fmt.Errorf("monthly bound %d reads %v, but 1 ms earlier it was the same month (%v)", b, lt, before)
		}
	}
	return nil
}

// Each calls check for every zone of the tz database, both calendars and
// n instants of each (see [Instants]), with a calendar quota of 1.
func Each(t testing.TB, rng *rand.Rand, n int, check func(name string, zone *time.Location, l algo.Limit, at int64)) {
	t.Helper()
	zones, err := Zones()
	if err != nil {
		t.Fatal(err)
	}
	if len(zones) < 300 {
		t.Fatalf("only %d zones found", len(zones))
	}
	for _, name := range zones {
		zone, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("loading %s: %v", name, err)
		}
		for _, l := range []algo.Limit{
			{Algorithm: algo.FixedWindow, Rate: 1, Period: algo.Day, Calendar: algo.Daily, Zone: zone},
			{Algorithm: algo.FixedWindow, Rate: 1, Period: algo.Month, Calendar: algo.Monthly, Zone: zone},
		} {
			for _, at := range Instants(rng, zone, n) {
				check(name, zone, l, at)
			}
		}
	}
}
