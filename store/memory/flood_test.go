package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// floodStores are small stores, bounded by key count and by bytes, that
// a flood fills many times over.
func floodStores() map[string]memory.Options {
	return map[string]memory.Options{
		"max_keys":  {SweepInterval: -1, Shards: 4, MaxKeys: 200},
		"one_shard": {SweepInterval: -1, Shards: 1, MaxKeys: 200},
		"max_bytes": {SweepInterval: -1, Shards: 4, MaxBytes: 96 << 10},
		"64_shards": {SweepInterval: -1, MaxBytes: 512 << 10},
	}
}

// onFloodStores runs f on a new store of each of floodStores' shapes,
// on a clock f may move.
func onFloodStores(t *testing.T, f func(t *testing.T, s *memory.Store, clk *clock)) {
	for name, opts := range floodStores() {
		t.Run(name, func(t *testing.T) {
			clk := &clock{now: time.UnixMilli(1_800_000_000_000)}
			opts.Now = clk.Now
			s := memory.New(opts)
			defer s.Close()
			f(t, s, clk)
		})
	}
}

// attackers numbers the flood's subjects: each is new.
var attackers atomic.Int64

// flood creates the keys of n new subjects of an attacker, each charged
// once, as a login flood from many addresses does: per-IP budgets,
// per-account lockout state (an attacker-chosen account), and a tenant's
// per-user plan. Errors are ignored: the attacker does not care.
func flood(s *memory.Store, n int) {
	ctx := context.Background()
	l := algo.Limit{Rate: 100, Period: time.Hour}
	rule := algo.LockoutRule{Threshold: 100, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	for range n {
		sub := "attacker-" + strconv.FormatInt(attackers.Add(1), 10)
		s.Allow(ctx, algo.Request{Name: "ip", Subject: sub, Limit: l, Cost: 1})
		s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: sub, Rule: rule, Op: algo.LockFail})
		s.AllowAll(ctx, []algo.Request{
			{Name: "plan:a", Subject: sub, Tag: "tenant", Limit: l, Cost: 1},
			{Name: "plan:b", Subject: sub, Tag: "tenant", Limit: l, Cost: 1},
		})
	}
}

// TestFloodNewSubjectsLimited fills the store with an attacker's keys and
// checks that a new subject is still limited: exactly its limit admitted,
// never an error (which a fail_open route would let through unlimited).
func TestFloodNewSubjectsLimited(t *testing.T) {
	onFloodStores(t, func(t *testing.T, s *memory.Store, clk *clock) {
		ctx := context.Background()
		flood(s, 2000)
		if st := s.Stats(); st.Evictions == 0 {
			t.Fatalf("after the flood: %+v; want keys evicted", st)
		}
		for _, a := range algo.Algorithms() {
			l := algo.Limit{Algorithm: a, Rate: 5, Period: time.Minute}
			admitted := 0
			for range 9 {
				d, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "new-" + a.String(), Limit: l, Cost: 1})
				if err != nil {
					t.Fatalf("%v: a new subject in a full store: %v", a, err)
				}
				if d.Allowed {
					admitted++
				}
				flood(s, 20) // the flood goes on
			}
			if admitted != 5 {
				t.Errorf("%v: a new subject in a full store was admitted %d times, want 5", a, admitted)
			}
		}
		// A new group: all or nothing, each limit exactly.
		admitted := 0
		for range 9 {
			ds, err := s.AllowAll(ctx, []algo.Request{
				{Name: "plan:x", Subject: "new-user", Tag: "new-tenant", Limit: algo.Limit{Rate: 4, Period: time.Minute}, Cost: 1},
				{Name: "plan:y", Subject: "new-user", Tag: "new-tenant", Limit: algo.Limit{Rate: 6, Period: time.Minute}, Cost: 1},
				{Name: "tenant", Subject: "new-tenant", Tag: "new-tenant", Limit: algo.Limit{Rate: 7, Period: time.Minute}, Cost: 1},
			})
			if err != nil {
				t.Fatalf("a new group in a full store: %v", err)
			}
			if ds[0].Allowed && ds[1].Allowed && ds[2].Allowed {
				admitted++
			}
			flood(s, 20)
		}
		if admitted != 4 {
			t.Errorf("a new group in a full store was admitted %d times, want 4", admitted)
		}
		// A new account is locked after its threshold, and stays locked.
		rule := algo.LockoutRule{Threshold: 3, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
		for i := range 3 {
			if _, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "victim", Rule: rule, Op: algo.LockFail}); err != nil {
				t.Fatalf("failure %d of a new account in a full store: %v", i, err)
			}
		}
		flood(s, 2000)
		if r, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "victim", Rule: rule, Op: algo.LockCheck}); err != nil || !r.Locked {
			t.Errorf("an account that failed 3 times in a full store: %+v, %v; want locked", r, err)
		}
		// A new subject's concurrency is limited.
		for i := range 3 {
			ok, err := s.Acquire(ctx, algo.LeaseRequest{Name: "conc", Subject: "new", ID: strconv.Itoa(i), Limit: 2, TTL: time.Minute})
			if err != nil || ok != (i < 2) {
				t.Errorf("lease %d of a new subject in a full store: %v, %v", i, ok, err)
			}
			flood(s, 20)
		}
	})
}

// TestFloodKeepsHeldState checks that a refusal, a lock and a lease
// survive any amount of flooding, their state intact.
func TestFloodKeepsHeldState(t *testing.T) {
	onFloodStores(t, func(t *testing.T, s *memory.Store, clk *clock) {
		ctx := context.Background()
		l := algo.Limit{Rate: 3, Period: time.Hour}
		rule := algo.LockoutRule{Threshold: 3, Lock: time.Hour, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
		lease := algo.LeaseRequest{Name: "conc", Subject: "holder", ID: "held", Limit: 1, TTL: time.Hour}
		var refused algo.Decision
		for i := range 4 {
			if i > 0 {
				clk.Add(time.Second)
			}
			refused, _ = s.Allow(ctx, algo.Request{Name: "p", Subject: "refused", Limit: l, Cost: 1})
		}
		if refused.Allowed {
			t.Fatal("the fourth request was admitted")
		}
		for range 3 {
			s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "locked", Rule: rule, Op: algo.LockFail})
		}
		locked, _ := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "locked", Rule: rule, Op: algo.LockCheck})
		if !locked.Locked {
			t.Fatal("not locked")
		}
		if ok, err := s.Acquire(ctx, lease); !ok || err != nil {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		for range 5 {
			flood(s, 1000)
		}
		if st := s.Stats(); st.Evictions == 0 {
			t.Fatalf("after the flood: %+v; want keys evicted", st)
		}
		if d, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "refused", Limit: l, Cost: 1}); err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter != refused.RetryAfter {
			t.Errorf("the refused subject after the flood: %+v, %v; want refused as before (%+v)", d, err, refused)
		}
		if r, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "locked", Rule: rule, Op: algo.LockCheck}); err != nil || r != locked {
			t.Errorf("the locked account after the flood: %+v, %v; want %+v", r, err, locked)
		}
		other := lease
		other.ID = "other"
		if ok, err := s.Acquire(ctx, other); ok || err != nil {
			t.Errorf("a second lease after the flood: %v, %v; want refused", ok, err)
		}
		if err := s.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Acquire(ctx, other); !ok || err != nil {
			t.Errorf("a lease after the release: %v, %v", ok, err)
		}
	})
}

// TestOverflow fills a store with keys that all hold refusals, which it
// may not evict, and checks that new subjects are decided in overflow
// slots, limited, and that once room is made a subject starts from its
// slot's state: it regains nothing it spent there.
func TestOverflow(t *testing.T) {
	clk := &clock{now: time.UnixMilli(1_800_000_000_000)}
	s := memory.New(memory.Options{Now: clk.Now, SweepInterval: -1, Shards: 2, MaxKeys: 100})
	defer s.Close()
	ctx := context.Background()
	pin := algo.Limit{Rate: 1, Period: 10 * time.Second}
	for i := range 100 {
		if d, err := s.Allow(ctx, algo.Request{Name: "pin", Subject: strconv.Itoa(i), Limit: pin, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	l := algo.Limit{Rate: 5, Period: time.Hour}
	req := algo.Request{Name: "p", Subject: "new", Limit: l, Cost: 1}
	for i := range 3 {
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != int64(4-i) {
			t.Fatalf("request %d in overflow: %+v, %v", i, d, err)
		}
	}
	if st := s.Stats(); st.Overflows != 3 || st.Keys != 100 || st.Evictions != 0 {
		t.Fatalf("stats = %+v, want 3 overflows and no eviction", st)
	}
	group := func() []algo.Request {
		return []algo.Request{
			{Name: "plan:a", Subject: "user", Tag: "tenant", Limit: algo.Limit{Rate: 3, Period: time.Hour}, Cost: 1},
			{Name: "tenant", Subject: "tenant", Tag: "tenant", Limit: algo.Limit{Rate: 4, Period: time.Hour}, Cost: 1},
		}
	}
	admitted := 0
	for range 5 {
		ds, err := s.AllowAll(ctx, group())
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed && ds[1].Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("a new group in overflow admitted %d times, want 3", admitted)
	}
	rule := algo.LockoutRule{Threshold: 3, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	for range 3 {
		s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct", Rule: rule, Op: algo.LockFail})
	}
	if r, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct", Rule: rule, Op: algo.LockCheck}); err != nil || !r.Locked {
		t.Errorf("an account with 3 failures in overflow: %+v, %v; want locked", r, err)
	}
	lease := func(id string) algo.LeaseRequest {
		return algo.LeaseRequest{Name: "conc", Subject: "new", ID: id, Limit: 2, TTL: time.Hour}
	}
	for i, want := range []bool{true, true, false} {
		if ok, err := s.Acquire(ctx, lease(strconv.Itoa(i))); err != nil || ok != want {
			t.Errorf("lease %d in overflow: %v, %v", i, ok, err)
		}
	}
	if err := s.Release(ctx, lease("0")); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Acquire(ctx, lease("3")); err != nil || !ok {
		t.Errorf("a lease after a release in overflow: %v, %v", ok, err)
	}
	// Held attempts in overflow: a budget of 2 holds 2; a success in a
	// slot does not clear the failures accounts sharing it counted.
	ipf := algo.Request{Name: "ipf", Subject: "new", Limit: algo.Limit{Rate: 2, Period: time.Hour}, Cost: 1}
	for i, want := range []bool{true, true, false} {
		if d, err := s.Reserve(ctx, ipf, algo.Hold{ID: strconv.Itoa(i), TTL: time.Minute}); err != nil || d.Allowed != want {
			t.Errorf("reservation %d in overflow: %+v, %v", i, d, err)
		}
	}
	for range 2 {
		s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct2", Rule: rule, Op: algo.LockFail})
	}
	s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct2", Rule: rule, Op: algo.LockSucceed})
	if r, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct2", Rule: rule, Op: algo.LockCheck}); err != nil || r.Failures < 2 && !r.Locked {
		t.Errorf("after a success in overflow: %+v, %v; want the slot's failures kept", r, err)
	}

	// The pinned keys expire: room for the new keys, which start from
	// their slots' states.
	clk.Add(11 * time.Second)
	for i, want := range []bool{true, true, false} {
		if d, err := s.Allow(ctx, req); err != nil || d.Allowed != want {
			t.Fatalf("request %d after room was made: %+v, %v", 3+i, d, err)
		}
	}
	if ds, err := s.AllowAll(ctx, group()); err != nil || ds[0].Allowed {
		t.Errorf("the group after room was made: %+v, %v; want refused", ds, err)
	}
	if r, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: "acct", Rule: rule, Op: algo.LockFail}); err != nil || !r.Locked {
		t.Errorf("the account after room was made: %+v, %v; want locked", r, err)
	}
	if ok, err := s.Acquire(ctx, lease("4")); err != nil || ok {
		t.Errorf("a third lease after room was made: %v, %v; want refused", ok, err)
	}
	if st := s.Stats(); st.Keys == 0 || st.Overflows < 9 {
		t.Errorf("stats = %+v", st)
	}
}
