package resilience_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// minute is a time 3 s into a minute (and into a UTC day's 3rd second).
var minute = time.UnixMilli(1_800_000_000_000 + 3_000)

// fixedClock returns a clock that reads *at.
func fixedClock(at *time.Time) func() time.Time { return func() time.Time { return *at } }

// drain sends cost-1 requests through f until one is refused (at most
// limit of them) and returns how many were admitted and the refusal.
func drain(t *testing.T, limit int, f func() (algo.Decision, error)) (int, algo.Decision) {
	t.Helper()
	for n := 0; n < limit; n++ {
		d, err := f()
		if err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		if !d.Allowed {
			return n, d
		}
	}
	t.Fatalf("%d requests admitted, none refused", limit)
	return 0, algo.Decision{}
}

// TestFallbackStartsFromLastDecision: a subject that spent 60 of 100 on
// Redis gets what remained from the local fallback, not a full budget,
// on every algorithm; and the fallback's refusal says when that resets.
func TestFallbackStartsFromLastDecision(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algo.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			now := minute
			s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Now: fixedClock(&now)})
			defer s.Close()
			req := algo.Request{Name: uniq("from-last"), Subject: "k", Limit: algo.Limit{Algorithm: alg, Rate: 100, Period: time.Minute}, Cost: 60, Now: now}
			if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != 40 {
				t.Fatalf("on Redis: %+v %v", d, err)
			}
			// Redis goes away a second later.
			now = now.Add(time.Second)
			req.Cost, req.Now = 1, now
			n, refused := drain(t, 300, func() (algo.Decision, error) { return s.Fallback(ctx, req) })
			want := 40 // what remained
			if alg == algo.GCRA || alg == algo.TokenBucket || alg == algo.LeakyBucket {
				want = 41 // and a second's refill, 100/60
			}
			if n != want {
				t.Fatalf("the fallback admitted %d after Redis admitted 60 of 100, want %d", n, want)
			}
			if alg == algo.FixedWindow && refused.RetryAfter != 56*time.Second {
				t.Fatalf("fallback refusal %+v, want RetryAfter 56s (the window's end)", refused)
			}
		})
	}
}

// TestFallbackShareOfWhatRemained: with 4 instances, each instance's
// fallback gets a quarter of what remained.
func TestFallbackShareOfWhatRemained(t *testing.T) {
	ctx := context.Background()
	now := minute
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Instances: 4, Now: fixedClock(&now)})
	defer s.Close()
	req := algo.Request{Name: uniq("share-rest"), Subject: "k", Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 100, Period: time.Minute}, Cost: 60, Now: now}
	if _, err := s.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Cost = 1
	if n, _ := drain(t, 300, func() (algo.Decision, error) { return s.Fallback(ctx, req) }); n != 10 {
		t.Fatalf("the fallback admitted %d, want 10 (a quarter of the 40 left)", n)
	}
	// A subject this instance never saw starts from its full share.
	req.Subject = "unseen"
	if n, _ := drain(t, 300, func() (algo.Decision, error) { return s.Fallback(ctx, req) }); n != 25 {
		t.Fatalf("the fallback admitted %d for an unseen subject, want its share 25", n)
	}
}

// TestFallbackOwedAfterRecovery: what the fallback admitted is charged to
// Redis by the subject's next request there, so that across the outage the
// subject gets no more than the limit: 60 on Redis, 40 locally, then
// nothing more in that window.
func TestFallbackOwedAfterRecovery(t *testing.T) {
	ctx := context.Background()
	now := minute
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Now: fixedClock(&now)})
	defer s.Close()
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 100, Period: time.Minute}
	req := algo.Request{Name: uniq("owed"), Subject: "k", Limit: l, Cost: 60, Now: now}
	if _, err := s.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	req.Cost, req.Now = 1, now
	if s.Owes(req) {
		t.Fatal("a key the fallback has admitted nothing for owes the store")
	}
	if n, _ := drain(t, 300, func() (algo.Decision, error) { return s.Fallback(ctx, req) }); n != 40 {
		t.Fatalf("fallback admitted %d, want the 40 left", n)
	}
	if !s.Owes(req) {
		t.Fatal("the key owes the store the 40 the fallback admitted, but Owes says not")
	}
	// Redis is back: it does not know about the 40.
	now = now.Add(time.Second)
	req.Now = now
	d, err := s.Allow(ctx, req)
	if err != nil || d.Allowed || d.RetryAfter != 55*time.Second {
		t.Fatalf("after the outage, Redis admitted again: %+v %v (want refused until the window ends)", d, err)
	}
	// A query reports what is left, counting what the fallback admitted.
	req.Cost = 0
	if d, err := s.Allow(ctx, req); err != nil || d.Remaining != 0 {
		t.Fatalf("query after the outage: %+v %v, want Remaining 0", d, err)
	}

	// A subject that spent 20 of its 40 locally has 20 left on Redis.
	req = algo.Request{Name: uniq("owed-part"), Subject: "k", Limit: l, Cost: 60, Now: minute}
	now = minute
	if _, err := s.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Cost = 1
	for i := 0; i < 20; i++ {
		if d, err := s.Fallback(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("fallback %d: %+v %v", i, d, err)
		}
	}
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != 19 {
		t.Fatalf("after the outage: %+v %v, want admitted with 19 left", d, err)
	}
	if n, _ := drain(t, 300, func() (algo.Decision, error) { return s.Allow(ctx, req) }); n != 19 {
		t.Fatalf("Redis admitted %d more, want 19", n)
	}
	if s.Owes(req) {
		t.Fatal("the key still owes the store after its debt was charged")
	}
}

// TestCalendarFallbackClosedByDefault: a daily quota used up on Redis is
// not granted again by the fallback, before or after a restart of the
// instance: by default a calendar quota fails closed (ErrUnavailable).
func TestCalendarFallbackClosedByDefault(t *testing.T) {
	ctx := context.Background()
	now := minute
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 30, Period: algo.Day, Calendar: algo.Daily}
	req := algo.Request{Name: uniq("daily"), Subject: "k", Limit: l, Cost: 30, Now: now}
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Now: fixedClock(&now)})
	defer s.Close()
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("on Redis: %+v %v", d, err)
	}
	req.Cost = 1
	for _, st := range []*resilience.Store{s, resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Now: fixedClock(&now)})} {
		d, err := st.Fallback(ctx, req)
		if !errors.Is(err, resilience.ErrUnavailable) || d.Allowed {
			t.Fatalf("calendar quota in fallback: %+v %v, want ErrUnavailable", d, err)
		}
		ds, err := st.FallbackAll(ctx, []algo.Request{
			{Name: uniq("minute"), Subject: "k", Limit: algo.Limit{Rate: 10, Period: time.Minute}, Cost: 1, Now: now}, req})
		if !errors.Is(err, resilience.ErrUnavailable) || ds != nil {
			t.Fatalf("group with a calendar quota in fallback: %+v %v, want ErrUnavailable", ds, err)
		}
	}
}

// TestFallbackOnOOM: Redis out of memory refuses the writes of admissions;
// that is unavailability (not an invalid request), and the fallback then
// starts from the last decision, as for any outage.
func TestFallbackOnOOM(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.NewClient(t)
	ctx := context.Background()
	now := minute
	st, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := resilience.New(st, memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Now: fixedClock(&now)})
	defer s.Close()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 100, Period: time.Minute}
	req := algo.Request{Name: "oom", Subject: "k", Limit: l, Cost: 60, Now: now}
	if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("on Redis: %+v %v", d, err)
	}
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	defer c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "0").Build())
	req.Cost = 1
	_, err = s.Allow(ctx, req)
	if !errors.Is(err, resilience.ErrUnavailable) || algo.IsInvalid(err) {
		t.Fatalf("Redis out of memory: %v, want ErrUnavailable", err)
	}
	t.Logf("Redis out of memory: %v", err)
	_, err = s.AllowAll(ctx, []algo.Request{req, {Name: "oom-2", Subject: "k", Limit: l, Cost: 1, Now: now}})
	if !errors.Is(err, resilience.ErrUnavailable) || algo.IsInvalid(err) {
		t.Fatalf("Redis out of memory, group: %v, want ErrUnavailable", err)
	}
	if n, _ := drain(t, 300, func() (algo.Decision, error) { return s.Fallback(ctx, req) }); n != 40 {
		t.Fatalf("the fallback admitted %d with Redis out of memory, want the 40 left", n)
	}
}

// TestCalendarFallbackShare: with CalendarShare, a calendar quota gets the
// instance's share of what the store last said remained, and fails closed
// for a key the instance has not seen the store decide.
func TestCalendarFallbackShare(t *testing.T) {
	ctx := context.Background()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		limit     algo.Limit
		instances int
		spent     int64
		want      int
		retry     time.Duration // of the refusal once it is all spent
	}{
		{"day used up", algo.Limit{Algorithm: algo.FixedWindow, Rate: 30, Period: algo.Day, Calendar: algo.Daily}, 1, 30, 0, 16*time.Hour - 3*time.Second},
		{"day, 10 of 30", algo.Limit{Algorithm: algo.FixedWindow, Rate: 30, Period: algo.Day, Calendar: algo.Daily}, 1, 10, 20, 16*time.Hour - 3*time.Second},
		{"day, 10 of 30, 2 instances", algo.Limit{Algorithm: algo.FixedWindow, Rate: 30, Period: algo.Day, Calendar: algo.Daily}, 2, 10, 10, 16*time.Hour - 3*time.Second},
		// 2027-01-15 09:00:03 in Paris; February starts 16 days, 15 h later.
		{"month, Paris", algo.Limit{Algorithm: algo.FixedWindow, Rate: 1000, Period: algo.Month, Calendar: algo.Monthly, Zone: paris}, 4, 600, 100, 16*24*time.Hour + 15*time.Hour - 3*time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := minute
			opts := resilience.Options{Timeout: testenv.StoreTimeout, Instances: c.instances, CalendarFallback: resilience.CalendarShare, Now: fixedClock(&now)}
			s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), opts)
			defer s.Close()
			req := algo.Request{Name: uniq("cal-share"), Subject: "k", Limit: c.limit, Cost: c.spent, Now: now}
			if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("on Redis: %+v %v", d, err)
			}
			req.Cost = 1
			n, refused := drain(t, 1000, func() (algo.Decision, error) { return s.Fallback(ctx, req) })
			if n != c.want || refused.RetryAfter != c.retry {
				t.Fatalf("fallback admitted %d, refusal %+v; want %d, then RetryAfter %v", n, refused, c.want, c.retry)
			}
			// After a restart, this instance knows nothing of the key.
			s2 := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), opts)
			defer s2.Close()
			if d, err := s2.Fallback(ctx, req); !errors.Is(err, resilience.ErrUnavailable) || d.Allowed {
				t.Fatalf("unknown key: %+v %v, want ErrUnavailable", d, err)
			}
		})
	}
}

func TestParseCalendarFallback(t *testing.T) {
	for in, want := range map[string]resilience.CalendarFallback{"": resilience.CalendarClosed, "closed": resilience.CalendarClosed, "share": resilience.CalendarShare} {
		if got, err := resilience.ParseCalendarFallback(in); err != nil || got != want || (in != "" && got.String() != in) {
			t.Errorf("ParseCalendarFallback(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := resilience.ParseCalendarFallback("open"); err == nil {
		t.Error("ParseCalendarFallback(open) succeeded")
	}
}

// TestFallbackDebtConcurrent: after the fallback admitted all that was
// left, 50 requests at once find Redis with room for them, but the debt
// has none: the one that carries it is refused, and the others, which
// wait for it rather than pass without it, are refused too.
func TestFallbackDebtConcurrent(t *testing.T) {
	ctx := context.Background()
	now := minute
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Now: fixedClock(&now)})
	defer s.Close()
	req := algo.Request{Name: uniq("debt-at-once"), Subject: "k", Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 100, Period: time.Minute}, Cost: 60, Now: now}
	if _, err := s.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Cost = 1
	if n, _ := drain(t, 300, func() (algo.Decision, error) { return s.Fallback(ctx, req) }); n != 40 {
		t.Fatalf("fallback admitted %d, want 40", n)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Allow(ctx, req)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 0 {
		t.Fatalf("%d of 50 requests at once admitted after the fallback spent what was left", admitted.Load())
	}
}

// TestFallbackDebtGroup: a group's requests carry their keys' debts, all
// or nothing.
func TestFallbackDebtGroup(t *testing.T) {
	ctx := context.Background()
	now := minute
	s := resilience.New(redisStore(t, srv.Addr), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout, Now: fixedClock(&now)})
	defer s.Close()
	pm, ph := uniq("debt-min"), uniq("debt-hour")
	group := func(cost int64) []algo.Request {
		return []algo.Request{
			{Name: pm, Subject: "k", Limit: algo.Limit{Algorithm: algo.FixedWindow, Rate: 100, Period: time.Minute}, Cost: cost, Now: now},
			{Name: ph, Subject: "k", Limit: algo.Limit{Algorithm: algo.FixedWindow, Rate: 1000, Period: time.Hour}, Cost: cost, Now: now},
		}
	}
	if _, err := s.AllowAll(ctx, group(60)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		if ds, err := s.FallbackAll(ctx, group(1)); err != nil || !ds[0].Allowed || !ds[1].Allowed {
			t.Fatalf("fallback %d: %+v %v", i, ds, err)
		}
	}
	ds, err := s.AllowAll(ctx, group(1))
	if err != nil || !ds[0].Allowed || ds[0].Remaining != 9 || ds[1].Remaining != 909 {
		t.Fatalf("after the outage: %+v %v, want admitted with 9 and 909 left", ds, err)
	}
	ds, err = s.AllowAll(ctx, group(10))
	if err != nil || ds[0].Allowed || ds[1].Remaining != 909 {
		t.Fatalf("10 more: %+v %v, want refused by the minute, nothing charged", ds, err)
	}
}
