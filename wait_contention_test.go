package tollgate_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// Many waiters of one subject on several instances sharing the store all
// get through, never above the limit, and with unit costs at exactly its
// pace; each instance admits its own in the order they came.
func TestWaitContention(t *testing.T) {
	const instances, perInstance = 3, 12
	limit := tollgate.Limit{Rate: 10, Period: time.Second, Burst: 4} // 100 ms a unit
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed_costs=%v", mixed), func(t *testing.T) {
			eachStore(t, func(t *testing.T, _ tollgate.Store, instance func() tollgate.Store) {
				c := newClock(false)
				type admission struct {
					at       time.Duration
					cost     int64
					instance int
					seq      int
				}
				var mu sync.Mutex
				var admitted []admission
				var outstanding atomic.Int64 // waiters started and not done
				var lims []*tollgate.Limiter
				// quiet reports whether every waiter sleeps, waits in
				// line or is done, twice alike: only then may the clock
				// move, as nothing else can happen until it does.
				snapshot := func() [3]int64 {
					parked := 0
					for _, l := range lims {
						parked += tollgate.Parked(l)
					}
					return [3]int64{int64(c.Sleepers()), int64(parked), outstanding.Load()}
				}
				quiet := func() bool {
					s := snapshot()
					return s[0]+s[1] == s[2] && snapshot() == s
				}
				errc := make(chan error, instances*perInstance)
				total := int64(0)
				for i := range instances {
					l := newLimiter(t, instance(), limit, c)
					lims = append(lims, l)
					for k := range perInstance {
						cost := int64(1)
						if mixed {
							cost = int64(1 + (i+k)%4)
						}
						total += cost
						outstanding.Add(1)
						go func() {
							err := l.Wait(context.Background(), "crowd", cost)
							if err == nil {
								mu.Lock()
								admitted = append(admitted, admission{c.Now().Sub(testBase), cost, i, k})
								mu.Unlock()
							}
							errc <- err
							outstanding.Add(-1)
						}()
						// Let it join its line before the next comes.
						eventually(t, "the waiter joins", quiet)
					}
				}
				deadline := time.Now().Add(time.Minute)
				for outstanding.Load() > 0 {
					if time.Now().After(deadline) {
						t.Fatal("waiters still waiting after a minute of real time")
					}
					if !quiet() {
						runtime.Gosched()
						time.Sleep(20 * time.Microsecond)
						continue
					}
					c.Next()
				}
				for range instances * perInstance {
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
				}
				// Never above the limit: a GCRA of 10/s, burst 4, admits
				// costs in [t1, t2] only up to 4 + 10 × (t2 - t1) s.
				sort.SliceStable(admitted, func(a, b int) bool { return admitted[a].at < admitted[b].at })
				for a := range admitted {
					sum := int64(0)
					for b := a; b < len(admitted); b++ {
						sum += admitted[b].cost
						if allowed := 4 + int64(admitted[b].at-admitted[a].at)/int64(100*time.Millisecond); sum > allowed {
							t.Fatalf("%d admitted from %v to %v, the limit allows %d", sum, admitted[a].at, admitted[b].at, allowed)
						}
					}
				}
				// Each instance in its own order.
				for i := range instances {
					last := -1
					for _, a := range admitted {
						if a.instance == i {
							if a.seq < last {
								t.Errorf("instance %d admitted waiter %d after %d", i, a.seq, last)
							}
							last = a.seq
						}
					}
				}
				end := admitted[len(admitted)-1].at
				if !mixed && end != time.Duration(total-4)*100*time.Millisecond {
					t.Errorf("the last of %d admitted at %v, want %v: not at the limit's pace", total, end, time.Duration(total-4)*100*time.Millisecond)
				}
				t.Logf("%d waiters, cost %d, through by %v", len(admitted), total, end)
			})
		})
	}
}

// interleaving is a real store on which another instance charges the
// same request right after each query (cost 0): the moment between a
// shaping Wait's query and its charge.
type interleaving struct {
	tollgate.Store
	other int
}

func (s *interleaving) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	d, err := s.Store.Allow(ctx, req)
	if err == nil && req.Cost == 0 {
		s.other++
		o := req
		o.Cost = 1
		if _, err := s.Store.Allow(ctx, o); err != nil {
			return d, err
		}
	}
	return d, err
}

// If others lengthen a shaping queue between Wait's query and its charge
// so that its turn comes after the deadline, Wait returns the error at
// once and gives its place back, still the last in the queue.
func TestWaitShapingQueueGrowsMeanwhile(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		shaper := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 5, Period: time.Second, Burst: 1, MaxDelay: time.Second}
		c := newClock(true)
		is := &interleaving{Store: s}
		l := newLimiter(t, is, shaper, c)
		for range 2 { // turns at 0 and 200 ms; the next at 400 ms
			if r, err := l.Reserve(context.Background(), "g", 1); err != nil || !r.OK() {
				t.Fatalf("place: %+v, %v", r.Decision(), err)
			}
		}
		ctx, cancel := context.WithDeadline(context.Background(), testBase.Add(400*time.Millisecond))
		defer cancel()
		err := l.Wait(ctx, "g", 1)
		if !errors.Is(err, tollgate.ErrWouldExceedDeadline) || is.other != 1 || !c.Now().Equal(testBase) {
			t.Fatalf("err = %v after %d interleaved charges and %v, want ErrWouldExceedDeadline at once after 1", err, is.other, c.Now().Sub(testBase))
		}
		// Three places left: the interleaved one at 400 ms; Wait's, at
		// 600, was given back.
		if q := query(t, l, "g", testBase); q.ResetAfter != 600*time.Millisecond {
			t.Errorf("queue drains in %v, want 600ms: Wait's place given back", q.ResetAfter)
		}
	})
}

// charging is a real store that counts the charges it admits.
type charging struct {
	tollgate.Store
	admitted atomic.Int64
}

func (c *charging) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	d, err := c.Store.Allow(ctx, req)
	if err == nil && d.Allowed && req.Cost > 0 {
		c.admitted.Add(1)
	}
	return d, err
}

// On the real clock (the store's, and real timers), a wait is admitted
// once the budget has room, and a canceled one returns ctx.Err(). The
// waits admitted are bounded by 10 ms limits; no duration is asserted.
// That each wait charged the store is counted: a query after them would
// find the budget back if it came 10 ms late, as on a loaded machine.
func TestWaitRealClock(t *testing.T) {
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		cs := &charging{Store: s}
		l, err := tollgate.NewLimiter(cs, tollgate.Limit{Rate: 1, Period: 10 * time.Millisecond}, tollgate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 3 {
			if err := l.Wait(ctx, "real", 1); err != nil {
				t.Fatalf("wait %d: %v", i, err)
			}
		}
		if n := cs.admitted.Load(); n != 3 {
			t.Errorf("3 waits admitted: the store admitted %d charges, want 3", n)
		}
		slow, err := tollgate.NewLimiter(s, tollgate.PerMinute(1), tollgate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := slow.Allow(ctx, "real", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		canceled, cancel2 := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- slow.Wait(canceled, "real", 1) }()
		eventually(t, "the waiter is in line", func() bool { return tollgate.Lines(slow) == 1 })
		cancel2()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("canceled wait: %v", err)
		}
		if tollgate.Lines(slow) != 0 {
			t.Error("the canceled waiter stays in line")
		}
	})
}
