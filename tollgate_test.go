package tollgate_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

func TestConstructors(t *testing.T) {
	cases := []struct {
		l      tollgate.Limit
		rate   int64
		period time.Duration
	}{
		{tollgate.PerSecond(5), 5, time.Second},
		{tollgate.PerMinute(100), 100, time.Minute},
		{tollgate.PerHour(1000), 1000, time.Hour},
		{tollgate.PerDay(10000), 10000, 24 * time.Hour},
	}
	for _, c := range cases {
		if c.l.Rate != c.rate || c.l.Period != c.period || c.l.Algorithm != tollgate.GCRA || c.l.Capacity() != c.rate {
			t.Errorf("%+v: want %d per %v, GCRA, capacity %d", c.l, c.rate, c.period, c.rate)
		}
		if err := c.l.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestNewLimiter(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	if _, err := tollgate.NewLimiter(nil, tollgate.PerSecond(1), tollgate.Options{}); err == nil {
		t.Error("nil store accepted")
	}
	_, err := tollgate.NewLimiter(s, tollgate.Limit{Rate: -1, Period: time.Second}, tollgate.Options{})
	if !errors.Is(err, tollgate.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "creating limiter:") {
		t.Errorf("invalid limit: err = %v", err)
	}
	l, err := tollgate.NewLimiter(s, tollgate.PerMinute(100), tollgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Name() != "gcra_100_60000ms_100" || l.Limit() != tollgate.PerMinute(100) {
		t.Errorf("policy %q, limit %v", l.Name(), l.Limit())
	}
	if _, err := l.Allow(context.Background(), "x", 101); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Errorf("cost 101 of 100: err = %v", err)
	}
	d, err := l.Allow(context.Background(), "x", 1)
	if err != nil || !d.Allowed || d.Quota != 100 || d.Remaining != 99 {
		t.Errorf("first request: %+v, %v", d, err)
	}
}

// TestDefaultPolicyNamesTheLimit: limiters with the default policy name
// share a store's state exactly when their limits enforce alike: a daily
// quota in Paris and one in New York are two budgets, a burst of zero and
// a burst equal to the rate one.
func TestDefaultPolicyNamesTheLimit(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	paris, _ := time.LoadLocation("Europe/Paris")
	newYork, _ := time.LoadLocation("America/New_York")
	quota := func(zone *time.Location) tollgate.Limit {
		return tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 2, Period: 24 * time.Hour, Calendar: algo.Daily, Zone: zone}
	}
	shaper := func(delay time.Duration) tollgate.Limit {
		return tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 2, Period: time.Second, Burst: 2, MaxDelay: delay}
	}
	cases := []struct {
		a, b tollgate.Limit
		same bool
	}{
		{quota(paris), quota(newYork), false},
		{quota(nil), quota(time.UTC), true},
		{quota(paris), quota(paris), true},
		{shaper(0), shaper(time.Second), false},
		{shaper(time.Second), shaper(2 * time.Second), false},
		{tollgate.PerMinute(100), tollgate.Limit{Rate: 100, Period: time.Minute, Burst: 100}, true},
		{tollgate.PerMinute(100), tollgate.Limit{Rate: 100, Period: time.Minute, Burst: 99}, false},
	}
	for l, want := range map[tollgate.Limit]string{
		quota(paris):            "fixed_window_2_86400000ms_2_day_Europe/Paris",
		shaper(time.Second):     "leaky_bucket_2_1000ms_2_delay1000ms",
		tollgate.PerMinute(100): "gcra_100_60000ms_100",
	} {
		if got := tollgate.LimitName(l); got != want {
			t.Errorf("LimitName(%v) = %q, want %q", l, got, want)
		}
	}
	if n := reflect.TypeFor[tollgate.Limit]().NumField(); n != 7 {
		t.Fatalf("tollgate.Limit has %d fields; LimitName names 7", n)
	}
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range cases {
		la, err := tollgate.NewLimiter(s, c.a, tollgate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lb, err := tollgate.NewLimiter(s, c.b, tollgate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if (la.Name() == lb.Name()) != c.same {
			t.Errorf("%v and %v: policies %q and %q, want the same: %v", c.a, c.b, la.Name(), lb.Name(), c.same)
		}
		sub := fmt.Sprintf("s%d", i)
		if d, err := la.AllowAt(context.Background(), sub, c.a.Capacity(), now); err != nil || !d.Allowed {
			t.Fatalf("%v: %+v, %v", c.a, d, err)
		}
		d, err := lb.AllowAt(context.Background(), sub, 1, now)
		if fresh := d.Allowed && d.Delay == 0; err != nil || fresh == c.same {
			t.Errorf("%v after %v spent everything: %+v, %v (want its own budget: %v)", c.b, c.a, d, err, !c.same)
		}
	}
}
