package redis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

var (
	fuzzOnce  sync.Once
	fuzzStore *rstore.Store
	fuzzErr   error
	fuzzSeq   atomic.Int64
)

// fuzzRedis returns the Redis store the fuzz targets share, made once.
func fuzzRedis(t *testing.T) *rstore.Store {
	fuzzOnce.Do(func() {
		c, err := srv.Client()
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzStore, fuzzErr = rstore.New(c, rstore.Options{})
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzStore
}

var newYork, _ = time.LoadLocation("America/New_York")

var fuzzPeriods = []time.Duration{time.Millisecond, 7 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute, time.Hour}

// FuzzDifferential decodes a random limit and timeline of (time step, cost)
// and requires the memory store and the Redis store to give identical
// decisions, settles and errors at every step. The seed corpus runs in go test.
//
// Layout: data[0] algorithm, data[1] rate, data[2] period, data[3] burst
// and start offset; then pairs (step, cost). A step with the high bit set
// advances (step&0x7f)×period/16, 0xff steps the clock back half a period,
// anything else advances step ms.
func FuzzDifferential(f *testing.F) {
	for a := range byte(6) {
		f.Add([]byte{a, 4, 3, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 100, 1, 0x90, 3, 0xff, 1, 0, 2})
		f.Add([]byte{a, 9, 2, 5, 10, 3, 10, 3, 10, 3, 10, 3, 0x81, 9, 0x81, 5, 0, 0, 0x88, 9, 0x90, 11})
		f.Add([]byte{a, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 2, 0xff, 1, 2, 1})
		f.Add([]byte{a, 15, 5, 19, 0x82, 7, 0x82, 7, 0x82, 7, 0xff, 7, 0xff, 7, 0x8f, 16, 0x8f, 1})
		f.Add([]byte{a, 9, 0x83, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0x81, 1, 0xff, 1, 0, 1})
		f.Add([]byte{a, 3, 0x40, 7, 0x8f, 2, 0x8f, 2, 0x8f, 2, 0x8f, 2, 0xff, 1, 0x8f, 3, 0x8f, 1})
		f.Add([]byte{a, 3, 0x60, 7, 0x8f, 2, 0x8f, 2, 0x8f, 2, 0x8f, 2, 0xff, 1, 0x8f, 3, 0x8f, 1})
		// Settles (a cost byte of 0x60 set): refunds, debts, a repeated id,
		// a stepped-back clock.
		f.Add([]byte{a, 9, 3, 10, 0, 5, 0x10, 0x65, 0, 3, 0x11, 0x7f, 0x81, 0x6a, 0xff, 2, 0x20, 0x64, 0x21, 0x66, 0x82, 1})
		f.Add([]byte{a, 4, 0x44, 3, 0, 3, 0x30, 0x78, 0x90, 0x61, 0x31, 0x6c, 0, 1, 0x88, 2, 0xff, 0x63})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		fuzzStore := fuzzRedis(t)
		a := algo.Algorithm(data[0] % 6)
		period := fuzzPeriods[int(data[2])%len(fuzzPeriods)]
		l := algo.Limit{Algorithm: a, Rate: 1 + int64(data[1]%16), Period: period}
		if a <= algo.LeakyBucket {
			l.Burst = int64(data[3] % 20)
		}
		if a == algo.LeakyBucket && data[2]&0x80 != 0 {
			l.MaxDelay = period * time.Duration(1+data[2]%4) // shaping
		}
		if a == algo.FixedWindow && data[2]&0x40 != 0 { // calendar windows across DST
			l.Calendar, l.Period, l.Zone = algo.Daily, algo.Day, newYork
			if data[2]&0x20 != 0 {
				l.Calendar, l.Period = algo.Monthly, algo.Month
			}
			period = l.Period
		}
		mem := memory.New(memory.Options{SweepInterval: -1})
		defer mem.Close()
		policy := fmt.Sprintf("fuzz-%d", fuzzSeq.Add(1))
		now := time.UnixMilli(1_800_000_000_000 + int64(data[3])*37)
		ctx := context.Background()
		pms := period.Milliseconds()
		lastID, lastAt := "", time.Time{} // the last settle's reservation id, and when it was first settled
		for i := 4; i+1 < len(data) && i < 4+2*300; i += 2 {
			switch step := int64(data[i]); {
			case step == 0xff:
				now = now.Add(-time.Duration(pms/2) * time.Millisecond)
			case step&0x80 != 0:
				now = now.Add(time.Duration((step&0x7f)*pms/16) * time.Millisecond)
			default:
				now = now.Add(time.Duration(step) * time.Millisecond)
			}
			cost := int64(data[i+1]) % (l.Capacity() + 2)
			req := algo.Request{Name: policy, Subject: "f", Limit: l, Cost: cost, Now: now}
			if l.MaxDelay > 0 {
				// A queue threshold of 0 to 4 quarters of the max delay,
				// in whole milliseconds.
				req.Within = time.Duration(l.MaxDelay.Milliseconds()*int64(data[i+1]>>5%5)/4) * time.Millisecond
			}
			var dm, dr algo.Decision
			var em, er error
			if l.MaxDelay > 0 && data[i+1]&0x18 == 0x10 && cost > 0 && cost <= l.Capacity() {
				// Take a place, and give it back at once when the next
				// byte says so: the places and outcomes must agree.
				var pm, pr algo.Place
				dm, pm, em = mem.TakePlace(ctx, req)
				dr, pr, er = fuzzStore.TakePlace(ctx, req)
				if pm != pr {
					t.Fatalf("%v step %d: places differ: memory %+v, redis %+v", l, (i-4)/2, pm, pr)
				}
				if em == nil && er == nil && pm != (algo.Place{}) && i+2 < len(data) && data[i+2]&1 == 1 {
					gm, e1 := mem.GiveBack(ctx, req, pm)
					gr, e2 := fuzzStore.GiveBack(ctx, req, pr)
					if gm != gr || (e1 == nil) != (e2 == nil) {
						t.Fatalf("%v step %d: give back: memory %v %v, redis %v %v", l, (i-4)/2, gm, e1, gr, e2)
					}
				}
			} else if l.MaxDelay > 0 && data[i+1]&0x18 == 0x18 {
				// A push back of 1 to 8 drain times of one unit.
				d := time.Duration(1+int64(data[i+1]>>5))*period/time.Duration(l.Rate) + time.Millisecond
				dm, em = mem.PushBack(ctx, req, d)
				dr, er = fuzzStore.PushBack(ctx, req, d)
			} else if l.CanSettle() && data[i+1]&0x60 == 0x60 {
				// Settle a reservation of cost made 0 to 3 quarters of a
				// period ago at an actual cost of 0 to 3 capacities; now
				// and then the previous settle's id again, within its TTL
				// (Redis keeps a marker by its own clock, not the
				// explicit one, so only a retry within it is the same on both).
				if data[i]&1 == 0 || lastID == "" || now.Sub(lastAt) >= time.Hour {
					lastID, lastAt = fmt.Sprintf("%s-%d", policy, i), now
				}
				req.Cost = min(cost, l.Capacity())
				st := algo.Settlement{ID: lastID, Age: time.Duration(int64(data[i+1]>>3&3)*pms/4) * time.Millisecond, TTL: algo.MaxSettleTTL,
					Items: []algo.SettleItem{{Request: req, Actual: int64(data[i]) % (3*l.Capacity() + 1)}}}
				sm, e1 := mem.SettleAll(ctx, st)
				sr, e2 := fuzzStore.SettleAll(ctx, st)
				if (e1 == nil) != (e2 == nil) || sm.Outcome != sr.Outcome || fmt.Sprint(sm.Decisions) != fmt.Sprint(sr.Decisions) {
					t.Fatalf("%v step %d (t=%d, settle %+v):\nmemory %+v %v\n redis %+v %v", l, (i-4)/2, now.UnixMilli(), st, sm, e1, sr, e2)
				}
				continue
			} else {
				dm, em = mem.Allow(ctx, req)
				dr, er = fuzzStore.Allow(ctx, req)
			}
			if (em == nil) != (er == nil) {
				t.Fatalf("%v step %d (cost %d): memory err %v, redis err %v", l, i, cost, em, er)
			}
			if dm != dr {
				t.Fatalf("%v step %d (t=%d cost %d):\nmemory %+v\n redis %+v", l, (i-4)/2, now.UnixMilli(), cost, dm, dr)
			}
		}
	})
}
