package tollgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
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
	if l.Policy() != "gcra_100_60000ms_100" || l.Limit() != tollgate.PerMinute(100) {
		t.Errorf("policy %q, limit %v", l.Policy(), l.Limit())
	}
	if _, err := l.Allow(context.Background(), "x", 101); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Errorf("cost 101 of 100: err = %v", err)
	}
	d, err := l.Allow(context.Background(), "x", 1)
	if err != nil || !d.Allowed || d.Limit != 100 || d.Remaining != 99 {
		t.Errorf("first request: %+v, %v", d, err)
	}
}
