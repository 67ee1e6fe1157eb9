package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/calendartest"
	"github.com/tollgate/tollgate/internal/testenv"
)

// CalendarSamples is how many instants [RunCalendar] tries per zone and
// calendar (half of them near a change of UTC offset).
const CalendarSamples = 4

// RunCalendar checks calendar quotas in every zone of the tz database, at
// instants from 1970 to 2100: a daily and a monthly quota of 1, spent at
// the instant, resets exactly at the next local midnight (first of the
// month) computed from the zone's rules, as the time package sweeps them;
// ResetAfter and RetryAfter say so, and the window's last millisecond is
// still refused. The instants differ from run to run; a failure logs
// their seed, and TOLLGATE_TEST_SEED set to it draws them again.
func RunCalendar(t *testing.T, s tollgate.Store) {
	ctx := context.Background()
	p := policy(t)
	rng := testenv.Rand(t)
	n := 0
	calendartest.Each(t, rng, CalendarSamples, func(name string, zone *time.Location, l algo.Limit, at int64) {
		n++
		subject := fmt.Sprintf("cal-%d", n)
		cal := l.Calendar
		_, end := calendartest.Window(zone, cal, at)
		ask := func(ms int64) algo.Decision {
			d, err := s.Allow(ctx, algo.Request{Name: p, Subject: subject, Limit: l, Cost: 1, Now: time.UnixMilli(ms)})
			if err != nil {
				t.Fatalf("%s %s at %v: %v", name, cal, time.UnixMilli(ms).In(zone), err)
			}
			return d
		}
		local := func(ms int64) string { return time.UnixMilli(ms).In(zone).Format("2006-01-02 15:04:05.000 -07:00") }
		if d := ask(at); !meets(d, nil, allowed, resetAfter(ms(end-at))) {
			t.Fatalf("%s %s: first request at %s: %+v, want allowed, ResetAfter %v (window ends %s)", name, cal, local(at), d, ms(end-at), local(end))
		}
		if d := ask(end - 1); !meets(d, nil, refused, retryAfter(time.Millisecond)) {
			t.Fatalf("%s %s: spent at %s, at %s: %+v, want refused, RetryAfter 1ms", name, cal, local(at), local(end-1), d)
		}
		if d := ask(end); !d.Allowed {
			t.Fatalf("%s %s: spent at %s, refused at the window's end %s: %+v", name, cal, local(at), local(end), d)
		}
	})
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
