package tollgate_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store/memory"
	"github.com/tollgate/tollgate/store/redis"
)

// fakeClock is a Clock whose time moves only when a test moves it. With
// auto, Sleep moves it by the duration slept (one goroutine's time);
// without, sleepers wait until Next wakes them.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	auto     bool
	sleepers []*sleeper
}

type sleeper struct {
	at time.Time
	ch chan struct{}
}

// testBase is the fake clocks' start: ahead of the real clock, so that
// neither store takes the state the tests write for expired, and a
// context deadline set on the fake clock never ends for real during a
// test. It is a whole second, so windows start there.
var testBase = time.Now().Add(time.Hour).Truncate(time.Second)

func newClock(auto bool) *fakeClock { return &fakeClock{now: testBase, auto: auto} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d on, waking no one.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.auto {
		c.now = c.now.Add(d)
		c.mu.Unlock()
		return nil
	}
	s := &sleeper{at: c.now.Add(d), ch: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.mu.Unlock()
	select {
	case <-s.ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.sleepers = slices.DeleteFunc(c.sleepers, func(o *sleeper) bool { return o == s })
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Sleepers returns how many goroutines sleep.
func (c *fakeClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sleepers)
}

// Next moves the clock to the earliest sleeper's time and wakes every
// sleeper due then. It reports false if none sleeps.
func (c *fakeClock) Next() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sleepers) == 0 {
		return false
	}
	at := c.sleepers[0].at
	for _, s := range c.sleepers {
		if s.at.Before(at) {
			at = s.at
		}
	}
	c.now = at
	c.sleepers = slices.DeleteFunc(c.sleepers, func(s *sleeper) bool {
		if s.at.After(at) {
			return false
		}
		close(s.ch)
		return true
	})
	return true
}

// eventually fails t unless cond holds within 10 s of real time; it
// bounds waits for other goroutines to reach a state, and asserts no time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

// counting is a real store that counts the decisions asked of it.
type counting struct {
	tollgate.Store
	calls atomic.Int64
}

func (c *counting) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	c.calls.Add(1)
	return c.Store.Allow(ctx, req)
}

func (c *counting) TakePlace(ctx context.Context, req tollgate.Request) (tollgate.Decision, algo.Place, error) {
	c.calls.Add(1)
	return c.Store.TakePlace(ctx, req)
}

// eachStore runs f on a fresh in-memory store and on a Redis store of a
// real redis-server (instances opens another client of the same server,
// as another instance would).
func eachStore(t *testing.T, f func(t *testing.T, s tollgate.Store, instance func() tollgate.Store)) {
	t.Run("memory", func(t *testing.T) {
		s := memory.New(memory.Options{})
		t.Cleanup(func() { s.Close() })
		f(t, s, func() tollgate.Store { return s })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		open := func() tollgate.Store {
			s, err := redis.New(srv.NewClient(t), redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		f(t, open(), open)
	})
}

func newLimiter(t *testing.T, s tollgate.Store, l tollgate.Limit, c tollgate.Clock) *tollgate.Limiter {
	t.Helper()
	lim, err := tollgate.NewLimiter(s, l, tollgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lim.WithClock(c)
}

// query reports the subject's state at now without charging.
func query(t *testing.T, l *tollgate.Limiter, subject string, now time.Time) tollgate.Decision {
	t.Helper()
	d, err := l.AllowAt(context.Background(), subject, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Wait admits at exactly the limit's pace: each waiter at the first
// instant the algorithm admits it, with one store call per attempt.
func TestWaitPace(t *testing.T) {
	gcra := func(burst int64) []time.Duration { // 5/s: burst at once, then every 200 ms
		var at []time.Duration
		for k := int64(0); k < 12; k++ {
			at = append(at, ms(max(0, k-burst+1)*200))
		}
		return at
	}
	windows := func() []time.Duration { // 3/s in whole seconds
		var at []time.Duration
		for k := int64(0); k < 12; k++ {
			at = append(at, ms(k/3*1000))
		}
		return at
	}
	cases := []struct {
		limit tollgate.Limit
		want  []time.Duration
		calls int64 // store calls for the 12 waits
	}{
		{tollgate.Limit{Rate: 5, Period: time.Second, Burst: 2}, gcra(2), 12 + 10},
		{tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 5, Period: time.Second, Burst: 3}, gcra(3), 12 + 9},
		{tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 5, Period: time.Second, Burst: 1}, gcra(1), 12 + 11},
		// A shaping limit queues in the store: one call each, the store's
		// Delay slept.
		{tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 5, Period: time.Second, Burst: 1, MaxDelay: 5 * time.Second}, gcra(1), 12},
		{tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 3, Period: time.Second}, windows(), 12 + 3},
		{tollgate.Limit{Algorithm: tollgate.SlidingWindowLog, Rate: 3, Period: time.Second}, windows(), 12 + 3},
	}
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		for _, tc := range cases {
			t.Run(tc.limit.String(), func(t *testing.T) {
				cs := &counting{Store: s}
				c := newClock(true)
				l := newLimiter(t, cs, tc.limit, c)
				var got []time.Duration
				for range tc.want {
					if err := l.Wait(context.Background(), "pace", 1); err != nil {
						t.Fatal(err)
					}
					got = append(got, c.Now().Sub(testBase))
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("admitted at %v, want %v", got, tc.want)
				}
				if n := cs.calls.Load(); n != tc.calls {
					t.Errorf("%d store calls, want %d", n, tc.calls)
				}
				if n := tollgate.Lines(l); n != 0 {
					t.Errorf("%d lines left", n)
				}
			})
		}
	})
}

// A deadline before the earliest admission returns at once and charges
// nothing; a deadline at it is met.
func TestWaitDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		t.Run("gcra", func(t *testing.T) {
			c := newClock(true)
			l := newLimiter(t, s, tollgate.PerSecond(1), c)
			if err := l.Wait(context.Background(), "d", 1); err != nil {
				t.Fatal(err)
			}
			before := query(t, l, "d", testBase)
			ctx, cancel := context.WithDeadline(context.Background(), testBase.Add(999*time.Millisecond))
			defer cancel()
			err := l.Wait(ctx, "d", 1)
			if !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
				t.Fatalf("err = %v, want ErrWouldExceedDeadline", err)
			}
			if !c.Now().Equal(testBase) {
				t.Errorf("waited until %v before failing", c.Now().Sub(testBase))
			}
			if after := query(t, l, "d", testBase); after != before {
				t.Errorf("state changed by the failed wait: %+v, was %+v", after, before)
			}
			ctx, cancel = context.WithDeadline(context.Background(), testBase.Add(time.Second))
			defer cancel()
			if err := l.Wait(ctx, "d", 1); err != nil {
				t.Fatalf("deadline at the earliest admission: %v", err)
			}
			if got := c.Now().Sub(testBase); got != time.Second {
				t.Errorf("admitted at %v, want 1s", got)
			}
		})
		t.Run("shaping", func(t *testing.T) {
			// 5/s, one at once, up to 1s in the queue: three taken now
			// leave the next one's turn 600 ms away.
			shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 5, Period: time.Second, Burst: 1, MaxDelay: time.Second}
			c := newClock(true)
			l := newLimiter(t, s, shaper, c)
			for i := range 3 {
				r, err := l.Reserve(context.Background(), "q", 1)
				if err != nil || !r.OK() || r.Delay() != ms(int64(i)*200) {
					t.Fatalf("reservation %d: %+v, %v", i, r.Decision(), err)
				}
			}
			before := query(t, l, "q", testBase)
			ctx, cancel := context.WithDeadline(context.Background(), testBase.Add(599*time.Millisecond))
			defer cancel()
			if err := l.Wait(ctx, "q", 1); !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
				t.Fatalf("err = %v, want ErrWouldExceedDeadline", err)
			}
			if after := query(t, l, "q", testBase); after != before || !c.Now().Equal(testBase) {
				t.Errorf("the failed wait charged or waited: %+v, was %+v; clock %v", after, before, c.Now().Sub(testBase))
			}
			ctx, cancel = context.WithDeadline(context.Background(), testBase.Add(600*time.Millisecond))
			defer cancel()
			if err := l.Wait(ctx, "q", 1); err != nil {
				t.Fatalf("deadline at its turn: %v", err)
			}
			if got := c.Now().Sub(testBase); got != 600*time.Millisecond {
				t.Errorf("its turn came at %v, want 600ms", got)
			}
			// Five more places fill the queue (1 s ahead): the next cost
			// is admitted once it drains by 200 ms and then waits the
			// whole MaxDelay, 1.2 s from now.
			for range 5 {
				if r, err := l.Reserve(context.Background(), "q", 1); err != nil || !r.OK() {
					t.Fatalf("place: %+v, %v", r.Decision(), err)
				}
			}
			now := c.Now()
			before = query(t, l, "q", now)
			ctx, cancel = context.WithDeadline(context.Background(), now.Add(1199*time.Millisecond))
			defer cancel()
			if err := l.Wait(ctx, "q", 1); !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
				t.Fatalf("full queue: err = %v, want ErrWouldExceedDeadline", err)
			}
			if after := query(t, l, "q", now); after != before || !c.Now().Equal(now) {
				t.Errorf("the failed wait charged or waited: %+v, was %+v", after, before)
			}
			ctx, cancel = context.WithDeadline(context.Background(), now.Add(1200*time.Millisecond))
			defer cancel()
			if err := l.Wait(ctx, "q", 1); err != nil {
				t.Fatalf("full queue, deadline at its turn: %v", err)
			}
			if got := c.Now().Sub(now); got != 1200*time.Millisecond {
				t.Errorf("its turn came %v later, want 1.2s", got)
			}
		})
	})
}

// A wait canceled while it waits for the budget returns ctx.Err() and
// charges nothing; the next waiter moves up.
func TestWaitCanceled(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		c := newClock(false)
		l := newLimiter(t, s, tollgate.PerSecond(1), c)
		if err := l.Wait(context.Background(), "c", 1); err != nil {
			t.Fatal(err)
		}
		before := query(t, l, "c", testBase)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- l.Wait(ctx, "c", 1) }()
		eventually(t, "the waiter sleeps", func() bool { return c.Sleepers() == 1 })
		second := make(chan error, 1)
		go func() { second <- l.Wait(context.Background(), "c", 1) }()
		eventually(t, "the second waiter is in line", func() bool { return tollgate.Parked(l) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if after := query(t, l, "c", testBase); after != before {
			t.Errorf("the canceled wait charged: %+v, was %+v", after, before)
		}
		// The second waiter asks in turn and is admitted at 1 s.
		eventually(t, "the second waiter sleeps", func() bool { return c.Sleepers() == 1 })
		c.Next()
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if got := c.Now().Sub(testBase); got != time.Second {
			t.Errorf("second waiter admitted at %v, want 1s", got)
		}
		if tollgate.Lines(l) != 0 {
			t.Error("a line is left")
		}
	})
}

// A shaping limit charges a waiter's place in its queue when it takes it:
// canceled while it waits for its turn, the place stays spent (neither
// store can give back a charge), as Wait documents.
func TestWaitCanceledInShapingQueue(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 5, Period: time.Second, Burst: 1, MaxDelay: time.Second}
		c := newClock(false)
		l := newLimiter(t, s, shaper, c)
		if err := l.Wait(context.Background(), "s", 1); err != nil { // at once
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- l.Wait(ctx, "s", 1) }()
		eventually(t, "the waiter sleeps until its turn", func() bool { return c.Sleepers() == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		r, err := l.Reserve(context.Background(), "s", 1)
		if err != nil || r.Delay() != 200*time.Millisecond {
			t.Fatalf("next place %v (%v), want 200ms: the canceled place, the last in the queue, is given back", r.Delay(), err)
		}
		// A waiter canceled with another place behind its own leaves it
		// spent.
		ctx, cancel = context.WithCancel(context.Background())
		go func() { errc <- l.Wait(ctx, "s", 1) }()
		eventually(t, "the waiter sleeps until its turn", func() bool { return c.Sleepers() == 1 })
		if r, err := l.Reserve(context.Background(), "s", 1); err != nil || r.Delay() != 600*time.Millisecond {
			t.Fatalf("place behind the waiter's: %v (%v), want 600ms", r.Delay(), err)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if r, err := l.Reserve(context.Background(), "s", 1); err != nil || r.Delay() != 800*time.Millisecond {
			t.Fatalf("next place %v (%v), want 800ms: the canceled place had one behind it and stays spent", r.Delay(), err)
		}
	})
}

// Costs that can never be admitted fail at once, without a store call.
func TestWaitInvalidCost(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	cs := &counting{Store: s}
	l := newLimiter(t, cs, tollgate.Limit{Rate: 10, Period: time.Second, Burst: 3}, newClock(true))
	if err := l.Wait(context.Background(), "x", 4); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Errorf("cost 4 of burst 3: err = %v", err)
	}
	if err := l.Wait(context.Background(), "x", -1); !errors.Is(err, tollgate.ErrNegativeCost) {
		t.Errorf("cost -1: err = %v", err)
	}
	if _, err := l.Reserve(context.Background(), "x", 4); !errors.Is(err, tollgate.ErrCostExceedsBurst) {
		t.Errorf("reserve cost 4 of burst 3: err = %v", err)
	}
	if err := l.Wait(context.Background(), "x", 0); err != nil {
		t.Errorf("cost 0: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, "x", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: err = %v", err)
	}
	if n := cs.calls.Load(); n != 0 {
		t.Errorf("%d store calls", n)
	}
}

// Reserve charges what it admits; a refusal charges nothing and says
// when to retry; Cancel gives back nothing, and says so for a place
// still ahead in a shaping queue.
func TestReserve(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		t.Run("gcra", func(t *testing.T) {
			c := newClock(true)
			l := newLimiter(t, s, tollgate.Limit{Rate: 2, Period: time.Second}, c)
			for i := range 2 {
				r, err := l.Reserve(context.Background(), "r", 1)
				if err != nil || !r.OK() || r.Delay() != 0 {
					t.Fatalf("reservation %d: %+v, %v", i, r.Decision(), err)
				}
				if err := r.Cancel(); err != nil {
					t.Errorf("cancel of a reservation for now: %v", err)
				}
			}
			// The canceled reservations stay spent: their time had come.
			before := query(t, l, "r", testBase)
			if before.Remaining != 0 {
				t.Errorf("remaining %d after two reservations, want 0", before.Remaining)
			}
			r, err := l.Reserve(context.Background(), "r", 1)
			if err != nil || r.OK() || r.Delay() != tollgate.InfDuration || r.RetryAfter() != 500*time.Millisecond {
				t.Fatalf("refused reservation: ok %v delay %v retry %v, %v", r.OK(), r.Delay(), r.RetryAfter(), err)
			}
			if err := r.Cancel(); err != nil {
				t.Errorf("cancel of a refused reservation: %v", err)
			}
			if after := query(t, l, "r", testBase); after != before {
				t.Errorf("the refusal charged: %+v, was %+v", after, before)
			}
		})
		t.Run("shaping", func(t *testing.T) {
			shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 5, Period: time.Second, Burst: 1, MaxDelay: time.Second}
			c := newClock(true)
			l := newLimiter(t, s, shaper, c)
			if _, err := l.Reserve(context.Background(), "q", 1); err != nil {
				t.Fatal(err)
			}
			r, err := l.Reserve(context.Background(), "q", 1)
			if err != nil || !r.OK() || r.Delay() != 200*time.Millisecond {
				t.Fatalf("second place: %+v, %v", r.Decision(), err)
			}
			if got := r.DelayFrom(testBase.Add(150 * time.Millisecond)); got != 50*time.Millisecond {
				t.Errorf("DelayFrom 150ms = %v, want 50ms", got)
			}
			if err := r.CancelAt(testBase.Add(200 * time.Millisecond)); err != nil {
				t.Errorf("cancel once its turn has come: %v", err)
			}
			// The last place in the queue is given back: the queue is as
			// it was before it.
			before := query(t, l, "q", testBase)
			r3, err := l.Reserve(context.Background(), "q", 1)
			if err != nil || !r3.OK() || r3.Delay() != 400*time.Millisecond {
				t.Fatalf("third place: %+v, %v", r3.Decision(), err)
			}
			if err := r3.Cancel(); err != nil {
				t.Errorf("cancel of the last place: %v", err)
			}
			if after := query(t, l, "q", testBase); after != before {
				t.Errorf("after the give back: %+v, was %+v", after, before)
			}
			// One with a place behind it stays spent, and says so.
			r3, _ = l.Reserve(context.Background(), "q", 1)
			if _, err := l.Reserve(context.Background(), "q", 1); err != nil {
				t.Fatal(err)
			}
			before = query(t, l, "q", testBase)
			if err := r3.Cancel(); !errors.Is(err, tollgate.ErrCannotGiveBack) {
				t.Errorf("cancel of a place with another behind it: err = %v, want ErrCannotGiveBack", err)
			}
			if after := query(t, l, "q", testBase); after != before {
				t.Errorf("the refused cancel changed the state: %+v, was %+v", after, before)
			}
			// Five places fill the queue; the sixth is refused until the
			// first has drained.
			for range 2 {
				if r, err := l.Reserve(context.Background(), "q", 1); err != nil || !r.OK() {
					t.Fatalf("place: %+v, %v", r.Decision(), err)
				}
			}
			r, err = l.Reserve(context.Background(), "q", 1)
			if err != nil || r.OK() || r.RetryAfter() != 200*time.Millisecond {
				t.Errorf("full queue: ok %v retry %v, %v", r.OK(), r.RetryAfter(), err)
			}
		})
	})
}

// Waiters of one subject on one Limiter are admitted in the order they
// came; one whose deadline comes before the first waiter's next attempt
// is refused at once; a canceled waiter leaves its place to the next.
func TestWaitLineOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		c := newClock(false)
		cs := &counting{Store: s}
		l := newLimiter(t, cs, tollgate.PerSecond(1), c)
		if err := l.Wait(context.Background(), "o", 1); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		done := make(map[string]chan error)
		ctxB, cancelB := context.WithCancel(context.Background())
		start := func(name string, ctx context.Context, parked int) {
			ch := make(chan error, 1)
			done[name] = ch
			go func() {
				err := l.Wait(ctx, "o", 1)
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				ch <- err
			}()
			if parked < 0 {
				eventually(t, name+" sleeps", func() bool { return c.Sleepers() == 1 })
			} else {
				eventually(t, name+" is in line", func() bool { return tollgate.Parked(l) == parked })
			}
		}
		start("a", context.Background(), -1)
		start("b", ctxB, 1)
		start("c", context.Background(), 2)
		start("d", context.Background(), 3)
		// a asks next at 1 s: a deadline before that cannot be met.
		ctx, cancel := context.WithDeadline(context.Background(), testBase.Add(999*time.Millisecond))
		defer cancel()
		calls := cs.calls.Load()
		late := make(chan error, 1)
		go func() { late <- l.Wait(ctx, "o", 1) }()
		select {
		case err := <-late:
			if !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
				t.Errorf("deadline before the line moves: err = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter whose deadline comes before the line moves waits in it")
		}
		if cs.calls.Load() != calls {
			t.Error("the refused newcomer asked the store")
		}
		cancelB()
		if err := <-done["b"]; !errors.Is(err, context.Canceled) {
			t.Fatalf("b: %v", err)
		}
		for i, name := range []string{"a", "c", "d"} {
			eventually(t, name+" sleeps", func() bool { return c.Sleepers() == 1 })
			c.Next()
			if err := <-done[name]; err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got, want := c.Now().Sub(testBase), time.Duration(i+1)*time.Second; got != want {
				t.Errorf("%s admitted at %v, want %v", name, got, want)
			}
		}
		if !slices.Equal(order, []string{"b", "a", "c", "d"}) {
			t.Errorf("finished in order %v", order)
		}
		// a asks once more, at its retry; c and d once as they reach the
		// head and once at their retry: no polling.
		if got := cs.calls.Load() - calls; got != 5 {
			t.Errorf("%d store calls for three waits, want 5", got)
		}
	})
}

// A request's queue threshold (WaitOptions.Within) keeps a lower class out
// of a queue that still takes the default class up to MaxDelay; Wait
// with a threshold waits while the queue is longer, and gives up at once
// when the deadline comes before the queue could let it in.
func TestWaitWithin(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: time.Second}
		c := newClock(true)
		l := newLimiter(t, s, shaper, c)
		ctx := context.Background()
		for i := range 6 { // turns 0 to 500 ms
			if r, err := l.Reserve(ctx, "p", 1); err != nil || !r.OK() || r.Delay() != ms(int64(100*i)) {
				t.Fatalf("place %d: %+v, %v", i, r.Decision(), err)
			}
		}
		batch := tollgate.WaitOptions{Within: 300 * time.Millisecond}
		r, err := l.ReserveWith(ctx, "p", 1, batch)
		if err != nil || r.OK() || r.RetryAfter() != 300*time.Millisecond {
			t.Fatalf("batch behind 600 ms of queue: ok %v retry %v, %v; want refused for 300ms", r.OK(), r.RetryAfter(), err)
		}
		dctx, cancel := context.WithDeadline(ctx, testBase.Add(500*time.Millisecond))
		defer cancel()
		if err := l.WaitWith(dctx, "p", 1, batch); !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
			t.Errorf("batch wait with a deadline 500 ms away: err = %v, want ErrWouldExceedDeadline", err)
		}
		if r, err := l.Reserve(ctx, "p", 1); err != nil || !r.OK() || r.Delay() != 600*time.Millisecond {
			t.Fatalf("default class behind the same queue: %+v, %v; want a place 600ms away", r.Decision(), err)
		}
		// With the clock moving as it sleeps, a batch wait sleeps until the
		// queue is short enough (700 ms of it: 400 ms), takes its place
		// 300 ms from then and sleeps until it.
		start := c.Now()
		if err := l.WaitWith(ctx, "p", 1, batch); err != nil {
			t.Fatal(err)
		}
		if got := c.Now().Sub(start); got != 700*time.Millisecond {
			t.Errorf("batch waited %v, want 700ms", got)
		}
		for _, bad := range []time.Duration{2 * time.Second, -time.Millisecond, time.Microsecond} {
			if err := l.WaitWith(ctx, "p", 1, tollgate.WaitOptions{Within: bad}); !errors.Is(err, algo.ErrInvalidRequest) {
				t.Errorf("Within %v: err = %v, want ErrInvalidRequest", bad, err)
			}
		}
		gl := newLimiter(t, s, tollgate.Limit{Rate: 10, Period: time.Second}, c)
		if _, err := gl.ReserveWith(ctx, "p", 1, batch); !errors.Is(err, algo.ErrInvalidRequest) {
			t.Errorf("Within on a limit that does not shape: err = %v, want ErrInvalidRequest", err)
		}
	})
}

// WaitOptions.MaxWait bounds the wait as a deadline would, but through the
// store's threshold: a turn further away is refused, not charged, and a
// place taken is slept for in full.
func TestWaitMaxWait(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: time.Second}
		c := newClock(true)
		l := newLimiter(t, s, shaper, c)
		ctx := context.Background()
		for range 6 { // turns 0 to 500 ms
			if r, err := l.Reserve(ctx, "m", 1); err != nil || !r.OK() {
				t.Fatalf("place: %+v, %v", r.Decision(), err)
			}
		}
		before := query(t, l, "m", c.Now())
		if err := l.WaitWith(ctx, "m", 1, tollgate.WaitOptions{MaxWait: 300 * time.Millisecond}); !errors.Is(err, tollgate.ErrWouldExceedDeadline) {
			t.Fatalf("max wait 300ms behind a 600 ms queue: err = %v, want ErrWouldExceedDeadline", err)
		}
		if after := query(t, l, "m", c.Now()); after != before {
			t.Fatalf("the refused wait charged: %+v, was %+v", after, before)
		}
		start := c.Now()
		if err := l.WaitWith(ctx, "m", 1, tollgate.WaitOptions{MaxWait: 600 * time.Millisecond}); err != nil {
			t.Fatalf("max wait 600ms for a turn 600 ms away: %v", err)
		}
		if got := c.Now().Sub(start); got != 600*time.Millisecond {
			t.Errorf("waited %v, want 600ms", got)
		}
		if err := l.WaitWith(ctx, "m", 1, tollgate.WaitOptions{MaxWait: -time.Second}); err == nil {
			t.Error("a negative max wait was accepted")
		}
	})
}

// stallingClock is an auto-moving fakeClock whose first Sleep wakes
// stall late, as a process stalled meanwhile would.
type stallingClock struct {
	*fakeClock
	stall time.Duration
	once  sync.Once
}

func (c *stallingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.once.Do(func() { d += c.stall })
	return c.fakeClock.Sleep(ctx, d)
}

// A shaped wait that wakes long after its turn takes a new place (with
// WaitOptions.Tolerance) instead of leaving with the turns it missed; its
// old turn stays spent, a gap.
func TestWaitRetakesMissedTurn(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: time.Second}
		c := &stallingClock{fakeClock: newClock(true), stall: 500 * time.Millisecond}
		cs := &counting{Store: s}
		l := newLimiter(t, cs, shaper, c)
		ctx := context.Background()
		for range 2 { // turns at 0 and 100 ms; the next at 200
			if r, err := l.Reserve(ctx, "st", 1); err != nil || !r.OK() {
				t.Fatal(r, err)
			}
		}
		// Meanwhile another instance takes the turns at 200 to 600 ms.
		other := newLimiter(t, s, shaper, c)
		for range 5 {
			if r, err := other.ReserveWith(ctx, "st", 1, tollgate.WaitOptions{}); err != nil || !r.OK() {
				t.Fatal(r, err)
			}
		}
		calls := cs.calls.Load()
		if err := l.WaitWith(ctx, "st", 1, tollgate.WaitOptions{Tolerance: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		// Its turn, taken at 0 behind the others, is at 700 ms; woken at
		// 1.2 s, it takes a new place, at once (the queue drained at
		// 800 ms), and acts.
		if got := c.Now().Sub(testBase); got != 1200*time.Millisecond {
			t.Errorf("acted at %v, want 1.2s", got)
		}
		if n := cs.calls.Load() - calls; n != 2 {
			t.Errorf("%d store calls, want 2 (the missed turn, then a new one)", n)
		}
		if r, err := l.Reserve(ctx, "st", 1); err != nil || r.Delay() != 100*time.Millisecond {
			t.Errorf("next place %v (%v), want 100ms: the new turn was taken at 1.2 s", r.Delay(), err)
		}
	})
}
