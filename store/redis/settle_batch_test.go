package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// settleLimits are the limits the coalescing tests settle on: every
// algorithm that can settle, with periods so long that the test's own
// time moves no budget.
var settleLimits = []algo.Limit{
	{Algorithm: algo.GCRA, Rate: 1000, Period: 30 * 24 * time.Hour},
	{Algorithm: algo.TokenBucket, Rate: 1000, Period: 30 * 24 * time.Hour},
	{Algorithm: algo.FixedWindow, Rate: 1000, Period: 30 * 24 * time.Hour},
	{Algorithm: algo.SlidingWindowCounter, Rate: 1000, Period: 30 * 24 * time.Hour},
}

// TestCoalescedSettles makes 64 concurrent callers settle on Redis' clock,
// a refund each, on a few hot keys and some of their own, and every fourth
// settle repeats an ID another caller settles too: with batching far fewer
// script calls than settles reach Redis (with MaxBatch 1, one each); each
// ID is applied exactly once; and every key ends as the same settles made
// one after another leave its twin.
func TestCoalescedSettles(t *testing.T) {
	for _, maxBatch := range []int{0, 1} {
		t.Run("MaxBatch="+strconv.Itoa(maxBatch), func(t *testing.T) {
			server := redistest.Start(t)
			c := server.NewClient(t)
			s, err := rstore.New(c, rstore.Options{MaxBatch: maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			const callers, perCaller = 64, 20
			pa, pb := unique("settle-coalesce"), unique("settle-sequential")
			// settlementOf returns settle i of caller g under name p: its
			// ID, and a refund of a reservation of 3 on a hot key (odd i)
			// or on a key of its own.
			settlementOf := func(p string, g, i int) algo.Settlement {
				id := fmt.Sprintf("%s-%d-%d", p, g, i)
				if i%4 == 1 {
					g %= 3 // the same settlement as the callers g±3, g±6, ...
					id = fmt.Sprintf("%s-shared-%d-%d", p, g, i)
				}
				l := settleLimits[(g+i)%len(settleLimits)]
				req := algo.Request{Name: p, Subject: "hot-" + strconv.Itoa(g%3), Limit: l, Cost: 3}
				if i%2 == 0 {
					req.Subject = fmt.Sprintf("cold-%d-%d", g, i)
				}
				return algo.Settlement{ID: id, TTL: time.Hour, Items: []algo.SettleItem{{Request: req, Actual: int64((g + i) % 3)}}}
			}
			// Reserve every settle's estimate first, on both key sets, and
			// load the scripts (NOSCRIPT retries would count).
			for _, p := range []string{pa, pb} {
				for g := range callers {
					for i := range perCaller {
						if _, err := s.Allow(ctx, settlementOf(p, g, i).Items[0].Request); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if _, err := s.SettleAll(ctx, algo.Settlement{ID: "warm", TTL: time.Hour, Items: []algo.SettleItem{{Request: algo.Request{Name: pa, Subject: "warm", Limit: settleLimits[0], Cost: 1}}}}); err != nil {
				t.Fatal(err)
			}
			before := scriptCalls(t, c)
			applied := map[string]*atomic.Int64{}
			for g := range callers {
				for i := range perCaller {
					applied[settlementOf(pa, g, i).ID] = new(atomic.Int64)
				}
			}
			var settles atomic.Int64
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range perCaller {
						st := settlementOf(pa, g, i)
						out, err := s.SettleAll(ctx, st)
						if err != nil {
							t.Error(err)
							return
						}
						settles.Add(1)
						if out.Outcome == algo.SettleApplied {
							applied[st.ID].Add(1)
						} else if out.Outcome != algo.SettleRepeated {
							t.Errorf("%s: %v", st.ID, out.Outcome)
						}
					}
				})
			}
			wg.Wait()
			calls := scriptCalls(t, c) - before
			n := settles.Load()
			t.Logf("%d settles in %d script calls: %.3f calls per settle", n, calls, float64(calls)/float64(n))
			for id, a := range applied {
				if a.Load() != 1 {
					t.Errorf("%s applied %d times, want once", id, a.Load())
				}
			}
			switch {
			case n != callers*perCaller:
				t.Fatalf("%d settles, want %d", n, callers*perCaller)
			case maxBatch == 1 && calls != n:
				t.Fatalf("MaxBatch 1: %d script calls for %d settles, want one each", calls, n)
			case maxBatch != 1 && calls*3 > n:
				t.Fatalf("%d script calls for %d settles: not coalesced (want at most a third)", calls, n)
			}
			// The same settles one after another, on the twin keys.
			for g := range callers {
				for i := range perCaller {
					if _, err := s.SettleAll(ctx, settlementOf(pb, g, i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for g := range callers {
				for i := range perCaller {
					ra, rb := settlementOf(pa, g, i).Items[0].Request, settlementOf(pb, g, i).Items[0].Request
					ra.Cost, rb.Cost = 0, 0
					da, errA := s.Allow(ctx, ra)
					db, errB := s.Allow(ctx, rb)
					if errA != nil || errB != nil || da.Remaining != db.Remaining || da.Debt != db.Debt {
						t.Fatalf("%s: coalesced %+v %v, one by one %+v %v", rstore.KeyFor(ra), da, errA, db, errB)
					}
				}
			}
			if s.Busy() != 0 {
				t.Fatalf("%d calls still counted as running after the callers returned", s.Busy())
			}
		})
	}
}

// TestSettleBatchMatchesOneByOne sends batches of settles, several on one
// key and some repeating an ID of the batch, refunds and debts, as one
// call of settle_many, and requires each answer to equal what the same
// settles made one after another answer on a twin key set; a settlement
// on a key of another type fails alone, writing nothing.
func TestSettleBatchMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := srv.NewClient(t)
	for _, l := range settleLimits {
		pa, pb, tag := unique("sb-batch"), unique("sb-single"), unique("t")
		var batches [2][]algo.Settlement
		for b, p := range []string{pa, pb} {
			for _, step := range []struct {
				reason   string
				id, name string
				actual   int64
			}{
				{"a refund", "r1", "x", 1},
				{"a debt on the same key", "r2", "x", 9},
				{"the first again: repeated", "r1", "x", 0},
				{"another key", "r3", "y", 0},
				{"the wrong type: fails alone", "r4", "bad", 0},
				{"after the failure, on the first key", "r5", "x", 2},
			} {
				req := algo.Request{Name: p + "-" + step.name, Subject: "u", Tag: tag + "-" + strconv.Itoa(b), Limit: l, Cost: 3}
				if step.name == "bad" {
					k := rstore.KeyFor(req)
					c.Do(ctx, c.B().Lpush().Key(k).Element("x").Build())
					c.Do(ctx, c.B().Pexpire().Key(k).Milliseconds(60_000).Build())
				} else if _, err := s.AllowAll(ctx, []algo.Request{req}); err != nil {
					t.Fatal(err)
				}
				batches[b] = append(batches[b], algo.Settlement{ID: step.id, TTL: time.Hour, Items: []algo.SettleItem{{Request: req, Actual: step.actual}}})
			}
		}
		got, errs := s.SettleBatch(ctx, batches[0])
		for i, st := range batches[1] {
			want, wantErr := s.SettleAll(ctx, st)
			if (errs[i] == nil) != (wantErr == nil) || (wantErr != nil && !strings.Contains(errs[i].Error(), "WRONGTYPE")) {
				t.Fatalf("%v settle %d: batch %v, alone %v", l.Algorithm, i, errs[i], wantErr)
			}
			if wantErr != nil {
				if p := pttl(t, c, rstore.SettledKey(tag+"-0", st.ID)); p != -2 {
					t.Errorf("%v settle %d failed, yet its marker was written", l.Algorithm, i)
				}
				continue
			}
			if got[i].Outcome != want.Outcome || len(got[i].Decisions) != 1 || got[i].Decisions[0].Remaining != want.Decisions[0].Remaining ||
				got[i].Decisions[0].Debt != want.Decisions[0].Debt {
				t.Errorf("%v settle %d: batch %+v, alone %+v", l.Algorithm, i, got[i], want)
			}
		}
	}
}
