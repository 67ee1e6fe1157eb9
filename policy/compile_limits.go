package policy

import (
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// limit validates one limit spec.
func (c *compiler) limit(path string, s LimitSpec) (tollgate.Limit, bool) {
	if s.Calendar != "" {
		return c.calendar(path, s)
	}
	if s.TimeZone != "" {
		c.addf(path+".time_zone", "time_zone is for calendar quotas (calendar: day or month)")
		return tollgate.Limit{}, false
	}
	a, ok := c.algorithm(path, s.Algorithm)
	if !ok {
		return tollgate.Limit{}, false
	}
	l := tollgate.Limit{Algorithm: a, Rate: s.Rate, Period: s.Period, Burst: s.Burst, MaxDelay: s.MaxDelay}
	if missing := c.missingRateOrPeriod(path, s); missing != "" {
		c.addf(path, "%s (e.g. rate: 100, period: 1m)", missing)
		return l, false
	}
	if err := l.Validate(); err != nil {
		c.addf(path, "%v", err)
		return l, false
	}
	return l, c.shapingBounds(path, l)
}

// missingRateOrPeriod says which of rate and period the limit at path
// leaves out, "" for neither (one written as 0 is the limit's to refuse).
func (c *compiler) missingRateOrPeriod(path string, s LimitSpec) string {
	switch {
	case s.Rate == 0 && s.Period == 0:
		return "a limit needs rate and period"
	case s.Rate == 0 && !c.written(path+".rate"):
		return "rate is required"
	case s.Period == 0 && !c.written(path+".period"):
		return "period is required"
	}
	return ""
}

// written reports whether the file spells out the key at path (a policy
// compiled from code, which has no lines, spells out every key).
func (c *compiler) written(path string) bool {
	_, ok := c.lines[path]
	return ok || c.lines == nil
}

// algorithm compiles a limit's algorithm, name (GCRA by default); ok is
// false for one unknown.
func (c *compiler) algorithm(path, name string) (a algo.Algorithm, ok bool) {
	if name == "" {
		return algo.GCRA, true
	}
	a, err := algo.ParseAlgorithm(name)
	if err != nil {
		c.addf(path+".algorithm", "%v", err)
		return a, false
	}
	return a, true
}

// shapingBounds reports whether a valid limit l holds requests no longer,
// and no more of them at once, than the shaping bounds allow.
func (c *compiler) shapingBounds(path string, l tollgate.Limit) bool {
	if l.MaxDelay > MaxShapingDelay {
		c.addf(path+".max_delay", "max_delay %v is longer than %v: each delayed request holds its connection while it waits", l.MaxDelay, MaxShapingDelay)
		return false
	}
	// Each waiting request holds at least one unit of the delay × rate that
	// the bucket may run ahead.
	if q := l.MaxDelay.Milliseconds() * l.Rate / l.Period.Milliseconds(); q > MaxShapingQueue {
		c.addf(path+".max_delay", "max_delay %v at %d per %v lets %d requests wait at once under one budget (at most %d): shorten max_delay or lower the rate", l.MaxDelay, l.Rate, l.Period, q, MaxShapingQueue)
		return false
	}
	return true
}

// budgetOf compiles the limit s at path, when set, into the budget whose
// header name is name and whose state is stored under id; nil when s is
// nil or not a valid limit.
func (c *compiler) budgetOf(path string, s *LimitSpec, name, id string) *Budget {
	if s == nil {
		return nil
	}
	l, ok := c.limit(path, *s)
	if !ok {
		return nil
	}
	return newBudget(name, id, l, s.Shadow)
}

// Shaping bounds. A shaping limit (leaky_bucket with max_delay) admits a
// request on condition that the gateway holds it up to max_delay, and lets
// up to max_delay × rate / period requests of one budget wait at once; each
// holds a connection, a goroutine and its buffers meanwhile.
const (
	// MaxShapingDelay bounds max_delay: as long as the default
	// upstream.timeout, and within the 30-60 s after which clients and load
	// balancers commonly give up on a response.
	MaxShapingDelay = 30 * time.Second
	// MaxShapingQueue bounds the requests one budget can hold waiting
	// (nginx's limit_req burst, which is this queue, is typically 5-100).
	MaxShapingQueue = 1000
)

// calendar validates a calendar quota: fixed windows of local days or
// months.
func (c *compiler) calendar(path string, s LimitSpec) (tollgate.Limit, bool) {
	l := tollgate.Limit{Algorithm: algo.FixedWindow, Rate: s.Rate}
	periodOK := c.calendarPeriod(path, s.Calendar, &l)
	fieldsOK := c.calendarFields(path, s)
	zone, zoneOK := c.calendarZone(path, s.TimeZone)
	l.Zone = zone
	if !periodOK || !fieldsOK || !zoneOK {
		return l, false
	}
	if err := l.Validate(); err != nil {
		c.addf(path, "%v", err)
		return l, false
	}
	return l, true
}

// calendarPeriod sets l's calendar and period from calendar: "day" or
// "month".
func (c *compiler) calendarPeriod(path, calendar string, l *tollgate.Limit) bool {
	switch calendar {
	case "day":
		l.Calendar, l.Period = algo.Daily, algo.Day
	case "month":
		l.Calendar, l.Period = algo.Monthly, algo.Month
	default:
		c.addf(path+".calendar", "want day or month, got %q", calendar)
		return false
	}
	return true
}

// calendarFields reports whether a calendar quota leaves out what only
// other limits take: an algorithm but fixed_window, a period, a burst, a
// max_delay.
func (c *compiler) calendarFields(path string, s LimitSpec) bool {
	ok := true
	if s.Algorithm != "" && s.Algorithm != "fixed_window" {
		c.addf(path+".algorithm", "a calendar quota counts fixed windows; leave the algorithm out")
		ok = false
	}
	if s.Period != 0 || s.Burst != 0 || s.MaxDelay != 0 {
		c.addf(path, "a calendar quota takes rate (and time_zone), not period, burst or max_delay")
		ok = false
	}
	return ok
}

// calendarZone returns the time zone of a calendar quota: its own, else
// the file's (nil for UTC); ok is false for a zone unknown.
func (c *compiler) calendarZone(path, own string) (z *time.Location, ok bool) {
	zone := orDefault(own, c.zone)
	if zone == "" {
		return nil, true
	}
	z, err := time.LoadLocation(zone)
	if err != nil {
		// The file's own time_zone is reported once, where it is written.
		c.rejectIf(own != "", path+".time_zone", "unknown time zone %q", zone)
		return z, false
	}
	return z, true
}
