package algo

import (
	"sync"
	"sync/atomic"
	"time"
)

// Calendar windows.
//
// A calendar day D in a zone is the interval [start(D), start(D+1)), where
// start(D) is the first instant at which the zone's wall clock reads D
// 00:00 or later; a calendar month likewise from the first of the month.
// Both ends follow the zone's own rules, so a day of a change to or from
// daylight saving time lasts 23 or 25 hours (23.5 or 24.5 on Lord Howe), a
// day whose midnight the clocks skip starts when they land after it, and a
// day a zone skips altogether (Samoa's 30 December 2011) is empty. The
// window holding an instant t is the last one that has started by t, which
// is t's local date except where the clocks are set back across midnight:
// there the new day, once begun, goes on through the repeated hour.
//
// The Redis scripts cannot read time zones: the caller computes the
// window bounds around its own clock ([Limit.CalendarBounds]) and passes
// them with the request.

// maxOffsetMS bounds the distance between a zone's wall clock and UTC,
// with room to spare: offsets since 1970 lie within -12h and +14h, and
// the largest single change (Samoa's, in 2011) was a day.
const maxOffsetMS = 30 * 3_600_000

// calendarStart returns start(X) for the local midnight u (the wall clock
// reading, in milliseconds since the epoch as if it were UTC): the first
// instant whose wall clock reads u or later. The wall clock is t + offset
// within each of the zone's periods of constant offset, so the first such
// instant in a period [ps, pe) of offset off is max(ps, u - off) when that
// is before pe; the first period that has one holds the answer. Instants
// before u - maxOffsetMS read earlier than u everywhere.
func calendarStart(zone *time.Location, u int64) int64 {
	t := u - maxOffsetMS
	for {
		tm := time.UnixMilli(t).In(zone)
		_, off := tm.Zone()
		c := max(t, u-int64(off)*1000)
		_, end := tm.ZoneBounds()
		if end.IsZero() {
			return c
		}
		e := end.UnixMilli()
		if e <= t {
			e = nextUTCYear(t)
		}
		if c < e {
			return c
		}
		t = e
	}
}

// nextUTCYear returns the first instant of the UTC year after t's. Past a
// zone's last listed change, where Go computes periods from the zone's
// rule year by year, ZoneBounds reports on 31 December of a leap year (UTC)
// a period that ended at that day's start (Go 1.26): the period really
// runs on to the new year, where Go starts the next year's periods.
func nextUTCYear(t int64) int64 {
	return time.Date(time.UnixMilli(t).UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
}

// localDay returns the day number (days since 1970-01-01) of t's wall
// clock in zone.
func localDay(zone *time.Location, t int64) int64 {
	_, off := time.UnixMilli(t).In(zone).Zone()
	return floorDiv(t+int64(off)*1000, dayMS)
}

// nextMidnight returns the local day number of the start of the calendar
// window after the one starting on local day d: d+1, or the first of the
// next month.
func nextMidnight(cal Calendar, d int64) int64 {
	if cal == Daily {
		return d + 1
	}
	y, m, _ := civil(d)
	if m == 12 {
		return daysFromCivil(y+1, 1, 1)
	}
	return daysFromCivil(y, m+1, 1)
}

// windowFirstDay returns the local day number of the first day of the
// calendar window holding local day d: d, or the first of its month.
func windowFirstDay(cal Calendar, d int64) int64 {
	if cal == Daily {
		return d
	}
	y, m, _ := civil(d)
	return daysFromCivil(y, m, 1)
}

// calendarWindow returns the bounds of the calendar window holding nowMS.
func calendarWindow(cal Calendar, zone *time.Location, nowMS int64) (start, end int64) {
	if zone == nil {
		zone = time.UTC
	}
	d := windowFirstDay(cal, localDay(zone, nowMS))
	start = calendarStart(zone, d*dayMS)
	for {
		n := nextMidnight(cal, d)
		end = calendarStart(zone, n*dayMS)
		if end > nowMS {
			return start, end
		}
		d, start = n, end
	}
}

// calBounds are four consecutive calendar window bounds: the windows
// [b[0], b[1]), [b[1], b[2]) and [b[2], b[3]).
type calBounds [4]int64

// calKey identifies a zone's calendar for the bounds cache.
type calKey struct {
	zone *time.Location
	cal  Calendar
}

// calCache remembers, per zone and calendar, the bounds last computed, so
// that a decision computes them anew only once a day (or month), not on
// every request. It is keyed by the *time.Location, exact even for two
// zones of one name, and is emptied when it grows past calCacheMax
// entries (policy reloads load zones anew).
var (
	calCache    sync.Map // calKey → *atomic.Pointer[calBounds]
	calCacheLen atomic.Int64
)

const calCacheMax = 1024

// calendarBounds returns the bounds of the window holding nowMS (b[1] <=
// nowMS < b[2]) and of the windows before and after it.
func calendarBounds(cal Calendar, zone *time.Location, nowMS int64) calBounds {
	if zone == nil {
		zone = time.UTC
	}
	k := calKey{zone, cal}
	v, ok := calCache.Load(k)
	if ok {
		if b := v.(*atomic.Pointer[calBounds]).Load(); b != nil && b[1] <= nowMS && nowMS < b[2] {
			return *b
		}
	}
	var b calBounds
	b[1], b[2] = calendarWindow(cal, zone, nowMS)
	b[0], _ = calendarWindow(cal, zone, b[1]-1)
	_, b[3] = calendarWindow(cal, zone, b[2])
	if !ok {
		if calCacheLen.Add(1) > calCacheMax {
			calCache.Clear()
			calCacheLen.Store(1)
		}
		v, _ = calCache.LoadOrStore(k, new(atomic.Pointer[calBounds]))
	}
	v.(*atomic.Pointer[calBounds]).Store(&b)
	return b
}

// CalendarBounds returns, for a calendar limit, the bounds of the calendar
// windows before, holding and after nowMS (milliseconds since the epoch):
// b[0] <= b[1] <= nowMS < b[2] <= b[3], each window [b[i], b[i+1]). Stores
// whose clock is elsewhere (Redis' TIME) pass them to it: any time within
// [b[0], b[3]) then finds its window, so clocks a day (or month) apart
// still agree. It returns zeros for a limit without a calendar.
func (l Limit) CalendarBounds(nowMS int64) [4]int64 {
	if l.Calendar == NoCalendar {
		return [4]int64{}
	}
	return calendarBounds(l.Calendar, l.Zone, nowMS)
}

const dayMS = 86_400_000

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date, for dates from 1970 on (H. Hinnant's algorithm, on non-negative
// integers so the Lua mirror is exact).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := m + 9
	if m > 2 {
		mp = m - 3
	}
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civil returns the date of a day since 1970-01-01 (days >= 0).
func civil(days int64) (y, m, d int64) {
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}
