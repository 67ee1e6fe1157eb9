package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// settleable are the algorithms that can settle, in FuzzSettleAlgo's order.
var settleable = []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow, algo.SlidingWindowCounter}

// algoLimit is one limit of FuzzSettleAlgo as package algo keeps it: the
// state a store would hold, which a settle that leaves it equivalent to
// none (a TTL of 0) drops, as the Redis store deletes its key.
type algoLimit struct {
	req algo.Request
	pl  algo.Prepared
	st  algo.State
}

// FuzzSettleAlgo decodes two limits of one subject and a timeline of
// decisions and settlements of both, and requires the Redis store (Allow,
// SettleAll) to answer as package algo does on an algo.State
// (Prepared.DecideInto, Prepared.Settle): the Lua against the Go, bit for
// bit. The seed corpus runs in go test.
//
// Layout: data[0] the first limit's algorithm (settleable[data[0]%4]; the
// second's is the next one), with 0x10 a calendar day for a fixed window
// and 0x20 a month; data[1] rate, data[2] period, data[3] burst and start
// offset; then triples (step, op, arg). A step of 0xff steps the clock
// back half a period, one with the high bit set advances (step&0x7f) ×
// period/16, anything else step ms. An op below 0x80 decides each limit
// at cost op % (capacity+2); else it settles both limits' reservations of
// estimate (op&0x3f) % (the least capacity+2), made (arg>>5) quarters of a
// period ago (an hour or more: expired), costing the estimate − 8 + the
// low nibble of arg (at least 0), plus (1 + the nibble) capacities if
// arg&0x10 (a debt past the burst). With op&0x40 the settlement has the
// ID of the one before (a retry).
func FuzzSettleAlgo(f *testing.F) {
	for a := range byte(4) {
		for _, cal := range []byte{0, 0x10, 0x20} {
			if cal != 0 && a != 2 {
				continue
			}
			a := a | cal
			f.Add([]byte{a, 9, 3, 4, 0, 5, 0, 0, 0x83, 0x05, 10, 0x83, 0x18, 0, 0xc3, 0x18, 0, 1, 0, 0xff, 1, 0, 0x88, 1, 0, 0x90, 1, 0})
			f.Add([]byte{a, 4, 2, 0, 0, 3, 0, 0x81, 0x84, 0x30, 0xff, 0x84, 0x21, 0, 1, 0, 0x82, 0x82, 0xf0, 0x84, 2, 0})
			f.Add([]byte{a, 15, 5, 19, 0, 15, 0, 0, 0x8f, 0x1f, 0x81, 0, 0, 0xff, 0, 0, 0x88, 1, 0, 0x90, 5, 0, 0xff, 0x87, 0x10})
			f.Add([]byte{a, 1, 4, 2, 0, 1, 0, 0x90, 0x81, 0x01, 0, 0x80, 0x14, 0, 1, 0, 0xa0, 1, 0, 0xff, 0x81, 0x1c, 0, 0, 0})
			f.Add([]byte{a, 7, 1, 9, 0, 6, 0, 0x84, 0x86, 0xe0, 0, 0x86, 0xa8, 0xff, 0x86, 0x02, 0x84, 0, 0, 0x84, 6, 0})
			f.Add([]byte{a, 12, 5, 3, 0, 3, 0, 0, 0x83, 0x1f, 0x8f, 0, 0, 0x8f, 1, 0, 0xff, 0x83, 0x60, 0x8f, 0, 0, 0x8f, 3, 0})
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		fuzzStore := fuzzRedis(t)
		ctx := context.Background()
		k := int(data[0] % 4)
		period := fuzzPeriods[int(data[2])%len(fuzzPeriods)]
		first := algo.Limit{Algorithm: settleable[k], Rate: 1 + int64(data[1]%16), Period: period}
		if first.Algorithm == algo.FixedWindow && data[0]&0x30 != 0 {
			first.Calendar, first.Period, first.Zone = algo.Daily, algo.Day, newYork
			if data[0]&0x20 != 0 {
				first.Calendar, first.Period = algo.Monthly, algo.Month
			}
			period = first.Period
		}
		second := algo.Limit{Algorithm: settleable[(k+1)%4], Rate: first.Rate, Period: period}
		policy := fmt.Sprintf("fuzz-settle-%d", fuzzSeq.Add(1))
		lims := make([]*algoLimit, 2)
		capacity := int64(1 << 62)
		for i, l := range []algo.Limit{first, second} {
			if l.Algorithm == algo.GCRA || l.Algorithm == algo.TokenBucket {
				l.Burst = int64(data[3] % 20)
			}
			pl, err := l.Prepare()
			if err != nil {
				return // a limit no store takes
			}
			lims[i] = &algoLimit{req: algo.Request{Name: fmt.Sprintf("%s-%d", policy, i), Subject: "f", Limit: l}, pl: pl}
			capacity = min(capacity, l.Capacity())
		}
		now := time.UnixMilli(1_800_000_000_000 + int64(data[3])*37)
		pms := period.Milliseconds()
		id, ids := "", 0
		applied := map[string]bool{} // the IDs settled, whose markers are set
		for i := 4; i+2 < len(data) && i < 4+3*200; i += 3 {
			switch step := int64(data[i]); {
			case step == 0xff:
				now = now.Add(-time.Duration(pms/2) * time.Millisecond)
			case step&0x80 != 0:
				now = now.Add(time.Duration((step&0x7f)*pms/16) * time.Millisecond)
			default:
				now = now.Add(time.Duration(step) * time.Millisecond)
			}
			ms := now.UnixMilli()
			op, arg := data[i+1], data[i+2]
			where := fmt.Sprintf("%v and %v, step %d (t=%d)", first, second, (i-4)/3, ms)
			if op < 0x80 {
				for _, m := range lims {
					req := m.req
					req.Cost, req.Now = int64(op)%(req.Limit.Capacity()+2), now
					var want algo.Result
					_, errA := m.pl.DecideInto(&want, &m.st, ms, req.Cost)
					got, errR := fuzzStore.Allow(ctx, req)
					if (errA == nil) != (errR == nil) || errA == nil && want.Decision() != got {
						t.Fatalf("%s, %v cost %d:\n algo %+v %v\nredis %+v %v", where, req.Limit, req.Cost, want.Decision(), errA, got, errR)
					}
				}
				continue
			}
			est := int64(op&0x3f) % (capacity + 2)
			act := max(0, est-8+int64(arg&0x0f))
			if arg&0x10 != 0 {
				act += (1 + int64(arg&0x0f)) * capacity
			}
			if op&0x40 == 0 || id == "" {
				ids++
				id = fmt.Sprintf("%s-r%d", policy, ids) // the markers of every run share group f
			}
			st := algo.Settlement{ID: id, Age: time.Duration(int64(arg>>5)*pms/4) * time.Millisecond, TTL: algo.MaxSettleTTL}
			for _, m := range lims {
				req := m.req
				req.Cost, req.Now = est, now
				st.Items = append(st.Items, algo.SettleItem{Request: req, Actual: act})
			}
			got, errR := fuzzStore.SettleAll(ctx, st)
			want := algo.Settled{Outcome: algo.SettleApplied}
			switch {
			case st.Expired():
				want.Outcome = algo.SettleExpired
			case applied[id]:
				want.Outcome = algo.SettleRepeated
			}
			states := make([]algo.State, len(lims))
			var errA error
			for j, m := range lims {
				var r algo.Result
				states[j] = m.st
				actual := act
				if want.Outcome != algo.SettleApplied {
					actual = est // changes nothing: the limit as it stands
				}
				ttl, err := m.pl.Settle(&r, &states[j], ms, ms-st.Age.Milliseconds(), est, actual)
				if err != nil {
					errA = errors.Join(errA, err)
					continue
				}
				if states[j] != m.st && ttl == 0 {
					states[j] = algo.State{} // the key deleted
				}
				want.Decisions = append(want.Decisions, r.Decision())
			}
			if errA != nil || errR != nil {
				if errA == nil || errR == nil || !algo.IsInvalid(errR) {
					t.Fatalf("%s, settling %d of %d: algo %v, redis %v", where, act, est, errA, errR)
				}
				continue
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s, settling %d of %d, age %v:\n algo %+v\nredis %+v", where, act, est, st.Age, want, got)
			}
			for j, m := range lims {
				m.st = states[j]
			}
			if want.Outcome == algo.SettleApplied {
				applied[id] = true
			}
		}
	})
}
