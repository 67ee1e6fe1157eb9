package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// fullStore returns a store of 100 keys filled with keys that hold a
// refusal for 10 s, so that new keys go to overflow slots until then.
func fullStore(t *testing.T) (*memory.Store, *clock) {
	t.Helper()
	clk := &clock{now: time.UnixMilli(1_800_000_000_000)}
	s := memory.New(memory.Options{Now: clk.Now, SweepInterval: -1, Shards: 2, MaxKeys: 100})
	t.Cleanup(func() { s.Close() })
	pin := algo.Limit{Rate: 1, Period: 10 * time.Second}
	for i := range 100 {
		if d, err := s.Allow(context.Background(), algo.Request{Name: "pin", Subject: strconv.Itoa(i), Limit: pin, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	return s, clk
}

// TestHoldInSlotStillCounts: an attempt held in a subject's overflow slot
// while the store was full still counts once the subject has an entry of
// its own: otherwise each hold left in the slot is one attempt more than
// the limit allows.
func TestHoldInSlotStillCounts(t *testing.T) {
	s, clk := fullStore(t)
	ctx := context.Background()
	ipf := algo.Request{Name: "ipf", Subject: "a", Limit: algo.Limit{Rate: 2, Period: time.Hour}, Cost: 1}
	if d, err := s.Reserve(ctx, ipf, algo.Hold{ID: "h1", TTL: time.Hour}); err != nil || !d.Allowed {
		t.Fatalf("a reservation in the slot: %+v, %v", d, err)
	}
	clk.Add(11 * time.Second) // room again
	if d, err := s.Allow(ctx, ipf); err != nil || !d.Allowed {
		t.Fatalf("a charge, the store with room: %+v, %v", d, err)
	}
	if d, err := s.Reserve(ctx, ipf, algo.Hold{ID: "h2", TTL: time.Hour}); err != nil || d.Allowed {
		t.Fatalf("a third attempt (one charged, one held in the slot) against a limit of 2: %+v, %v; want refused", d, err)
	}
}

// TestSettledHoldLeavesSlot: a hold settled once its subject has room of
// its own leaves the slot it was held in (it would otherwise count against
// every subject sharing the slot until it expired), and a settle that
// leaves nothing to keep adds no key.
func TestSettledHoldLeavesSlot(t *testing.T) {
	s, clk := fullStore(t)
	ctx := context.Background()
	rule := algo.LockoutRule{Threshold: 2, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	op := func(o algo.LockOp, id string) algo.LockoutResult {
		t.Helper()
		res, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct", Rule: rule, Op: o, Hold: algo.Hold{ID: id, TTL: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := op(algo.LockReserve, "a1"); !res.Reserved {
		t.Fatalf("a reservation in the slot: %+v", res)
	}
	clk.Add(11 * time.Second)
	s.Sweep() // the pinned keys go
	keys := s.Stats().Keys
	op(algo.LockSucceed, "a1")
	if got := s.Stats().Keys; got != keys {
		t.Errorf("a success that leaves nothing to keep added %d keys", got-keys)
	}
	for _, id := range []string{"a2", "a3"} {
		if res := op(algo.LockReserve, id); !res.Reserved {
			t.Fatalf("reservation %s after a1 was settled: %+v; want both places free", id, res)
		}
	}
}

// TestHoldsKeepTheBound: holds piling up on one key (a limit with room for
// thousands) stay within the store's byte bound: once the key cannot grow
// and nothing may be evicted, further holds are refused.
func TestHoldsKeepTheBound(t *testing.T) {
	s := memory.New(memory.Options{SweepInterval: -1, Shards: 1, MaxBytes: 16 << 10})
	defer s.Close()
	ctx := context.Background()
	req := algo.Request{Name: "big", Subject: "s", Limit: algo.Limit{Rate: 100_000, Period: time.Hour}, Cost: 1}
	refused := 0
	for i := range 1500 {
		d, err := s.Reserve(ctx, req, algo.Hold{ID: "h" + strconv.Itoa(i), TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			refused++
		}
	}
	if st := s.Stats(); st.Bytes > st.MaxBytes || refused == 0 {
		t.Fatalf("1,500 holds on one key: %+v, %d refused; want the bound kept", st, refused)
	}
}

// TestEvictSettledLogWithoutEntries: a sliding log's key whose only use
// was a hold, settled without a charge, lives on with no log until the
// hold would have ended; making room for new keys weighs it as having
// spent nothing: it panicked on the missing log (found by TestAccounting's
// random workloads, under a seed other than the one they were fixed to).
func TestEvictSettledLogWithoutEntries(t *testing.T) {
	ctx := context.Background()
	clk := &clock{now: time.UnixMilli(1_800_000_000_000)}
	s := memory.New(memory.Options{Now: clk.Now, SweepInterval: -1, Shards: 1, MaxKeys: 2})
	defer s.Close()
	req := algo.Request{Name: "ipf", Subject: "a", Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 3, Period: time.Second}, Cost: 1, Now: clk.Now()}
	h := algo.Hold{ID: "h", TTL: time.Minute}
	if d, err := s.Reserve(ctx, req, h); err != nil || !d.Allowed {
		t.Fatalf("Reserve: %+v, %v", d, err)
	}
	if _, err := s.Settle(ctx, req, h, false); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	for i := range 3 { // the third needs room
		l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 1, Period: time.Hour}
		if _, err := s.Allow(ctx, algo.Request{Name: "new", Subject: strconv.Itoa(i), Limit: l, Cost: 1, Now: clk.Now()}); err != nil {
			t.Fatalf("new key %d: %v", i, err)
		}
	}
	if st := s.Stats(); st.Keys != 2 {
		t.Errorf("%+v, want the 2 keys the store holds", st)
	}
}
