package memory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestNoRequestWaitsForASweep holds one entry of a full store, as a
// decision in progress does, and checks that a new key, an existing
// account and the sweep itself are decided without waiting for it: a
// request that swept the shard (or the store) would wait on that entry.
func TestNoRequestWaitsForASweep(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := New(Options{Now: func() time.Time { return time.UnixMilli(now) }, SweepInterval: -1, Shards: 1, MaxKeys: 100})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Rate: 10, Period: time.Hour}
	rule := algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	if _, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct", Rule: rule, Op: algo.LockFail}); err != nil {
		t.Fatal(err)
	}
	for i := range 99 {
		if _, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "s" + strconv.Itoa(i), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	now += 1000 // some time later: nothing has expired
	k := key{alg: algo.GCRA, name: "p", subject: "s7"}
	h, sh := s.hashes(&k)
	e := s.find(sh, h, k.appendTo(nil))
	if e == nil {
		t.Fatal("s7 not found")
	}
	defer e.mu.Unlock()
	// A call that waits for the entry waits until the test ends: the
	// bound only turns that hang into a failure, and is far above what a
	// call takes on any machine (microseconds).
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s waited for an entry in use", what)
		}
	}
	within("a new key", func() {
		s.Allow(ctx, algo.Request{Name: "p", Subject: "new", Limit: l, Cost: 1})
	})
	within("an existing account", func() {
		s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct", Rule: rule, Op: algo.LockCheck})
	})
	within("the sweep", s.Sweep)
}

// TestEvictionTakesLeastSpent floods a small store with keys that have
// spent little of their limits, and checks that a subject that has spent
// more keeps its state through any amount of flooding (for each algorithm,
// exactly its limit admitted in all; an account locked at its threshold),
// and that a subject evicted because it had spent the least regains no
// more than that.
func TestEvictionTakesLeastSpent(t *testing.T) {
	now := int64(1_800_000_000_000)
	ctx := context.Background()
	newStore := func(t *testing.T) *Store {
		s := New(Options{Now: func() time.Time { return time.UnixMilli(now) }, SweepInterval: -1, Shards: 1, MaxBytes: 32 << 10})
		t.Cleanup(func() { s.Close() })
		return s
	}
	// flood adds n new subjects, each with a key that has spent cost of
	// 100 an hour and an account with one failure.
	next := 0
	flood := func(s *Store, n int, cost int64) {
		rule := algo.LockoutRule{Threshold: 100, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
		for range n {
			next++
			sub := "flood-" + strconv.Itoa(next)
			s.Allow(ctx, algo.Request{Name: "ip", Subject: sub, Limit: algo.Limit{Rate: 100, Period: time.Hour}, Cost: cost})
			s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: sub, Rule: rule, Op: algo.LockFail})
		}
	}
	present := func(s *Store, k key) bool {
		h, sh := s.hashes(&k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		e := s.findLocked(sh, h, k.appendTo(nil))
		if e != nil {
			e.mu.Unlock()
		}
		return e != nil
	}
	for _, a := range algo.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			s := newStore(t)
			req := algo.Request{Name: "victim", Subject: "v", Limit: algo.Limit{Algorithm: a, Rate: 10, Period: time.Minute}, Cost: 1}
			admitted := 0
			for range 3 {
				if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
					t.Fatalf("%+v, %v", d, err)
				}
				admitted++
			}
			flood(s, 2000, 1) // 10 times what the store holds
			if !present(s, keyOf(&req)) || s.Stats().Evictions < 1000 {
				t.Fatalf("the subject's key was evicted, or the flood evicted little: %+v", s.Stats())
			}
			for range 12 {
				if d, err := s.Allow(ctx, req); err != nil {
					t.Fatal(err)
				} else if d.Allowed {
					admitted++
				}
			}
			if admitted != 10 {
				t.Errorf("admitted %d in all, limit 10", admitted)
			}
		})
	}
	t.Run("lockout", func(t *testing.T) {
		s := newStore(t)
		rule := algo.LockoutRule{Threshold: 3, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
		req := algo.LockoutRequest{Name: "login", Subject: "victim", Rule: rule, Op: algo.LockFail}
		for range 2 {
			if r, err := s.Lockout(ctx, req); err != nil || r.Locked {
				t.Fatalf("%+v, %v", r, err)
			}
		}
		flood(s, 2000, 1)
		if r, err := s.Lockout(ctx, req); err != nil || !r.Locked {
			t.Errorf("the third failure after the flood: %+v, %v; want locked", r, err)
		}
	})
	t.Run("least spent", func(t *testing.T) {
		s := newStore(t)
		req := algo.Request{Name: "victim", Subject: "v", Limit: algo.Limit{Rate: 100, Period: time.Minute}, Cost: 3}
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		for i := 0; present(s, keyOf(&req)); i++ {
			if i == 100 {
				t.Fatal("a key that spent 3% survived keys that spent 50%")
			}
			flood(s, 50, 50)
		}
		req.Cost = 1
		admitted := 3
		for range 120 {
			if d, err := s.Allow(ctx, req); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				admitted++
			}
		}
		if admitted != 103 {
			t.Errorf("admitted %d in all, limit 100: want 100 again after the eviction, no more", admitted)
		}
	})
}

// TestSweepBatches checks that the sweep releases a shard's lock every
// sweepSlots slots at most, however large the shard.
func TestSweepBatches(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := New(Options{Now: func() time.Time { return time.UnixMilli(now) }, SweepInterval: -1, Shards: 1, MaxBytes: -1})
	defer s.Close()
	ctx := context.Background()
	for i := range 20_000 {
		s.Allow(ctx, algo.Request{Name: "p", Subject: strconv.Itoa(i), Limit: algo.Limit{Rate: 1, Period: time.Duration(1+i%2) * time.Second}, Cost: 1})
	}
	size := len(s.shards[0].tab.Load().slots)
	batches := 0
	s.sweepBatch = func(visited int) {
		batches++
		if visited > sweepSlots {
			t.Errorf("the sweep visited %d slots under one hold of the lock", visited)
		}
		if !s.shards[0].mu.TryLock() {
			t.Error("the shard is locked between batches")
		} else {
			s.shards[0].mu.Unlock()
		}
	}
	now += 1000 // half the keys expired
	s.Sweep()
	if batches < size/sweepSlots {
		t.Errorf("%d batches for %d slots", batches, size)
	}
	if st := s.Stats(); st.Keys != 10_000 {
		t.Errorf("after the sweep: %+v, want 10,000 keys", st)
	}
	now += 1000
	s.Sweep()
	s.Sweep()
	if st, n := s.Stats(), len(s.shards[0].tab.Load().slots); st.Keys != 0 || n != minSlots {
		t.Errorf("after everything expired: %+v, %d slots", st, n)
	}
}
