package memory

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

func newTestStore(t *testing.T, now *int64) *Store {
	s := New(Options{Now: func() time.Time { return time.UnixMilli(*now) }, SweepInterval: -1, Shards: 4})
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHashCollision checks that two keys with one hash keep apart: the
// table verifies whole keys, never merging two subjects' budgets.
func TestHashCollision(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := newTestStore(t, &now)
	sh := &s.shards[0]
	const h = 0xdead_beef_0000_0042
	sh.mu.Lock()
	s.keys.Add(2)
	a := s.insert(sh, h, []byte("key a"))
	a.st.A = 1
	a.mu.Unlock()
	b := s.insert(sh, h, []byte("key b"))
	b.st.A = 2
	b.mu.Unlock()
	sh.mu.Unlock()
	for _, tc := range []struct {
		key  string
		want int64
	}{{"key a", 1}, {"key b", 2}} {
		e := s.find(sh, h, []byte(tc.key))
		if e == nil || e.st.A != tc.want {
			t.Fatalf("find(%q) = %v", tc.key, e)
		}
		e.mu.Unlock()
	}
	if e := s.find(sh, h, []byte("key c")); e != nil {
		e.mu.Unlock()
		t.Fatal("found a key never added")
	}
}

// TestKeys decides under keys that are long, tagged, or differ only in
// their parts, and checks that each has its own budget.
func TestKeys(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := newTestStore(t, &now)
	l := algo.Limit{Rate: 1, Period: time.Hour}
	long := strings.Repeat("x", 200)
	reqs := []algo.Request{
		{Name: "p", Subject: "s"},
		{Name: "p", Subject: "s", Tag: "t"},
		{Name: "p", Subject: "t", Tag: "s"},
		{Name: "ps", Subject: ""},
		{Name: "", Subject: "ps"},
		{Name: "p", Subject: long},
		{Name: long, Subject: "s"},
		{Name: "p", Subject: "s", Tag: long},
		{Name: "p", Subject: "s" + long},
	}
	for i := range reqs {
		reqs[i].Limit, reqs[i].Cost = l, 1
		if d, err := s.Allow(context.Background(), reqs[i]); err != nil || !d.Allowed {
			t.Fatalf("%d: first request: %+v, %v", i, d, err)
		}
	}
	for i := range reqs {
		if d, err := s.Allow(context.Background(), reqs[i]); err != nil || d.Allowed {
			t.Fatalf("%d: second request: %+v, %v (budget shared with another key?)", i, d, err)
		}
	}
	if k := s.Stats().Keys; k != int64(len(reqs)) {
		t.Fatalf("keys = %d, want %d", k, len(reqs))
	}
}

// TestEntriesReused checks that keys that expire and come back reuse
// their entries without allocating, and that the slab lets go of chunks
// unused for a whole sweep interval.
func TestEntriesReused(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := algo.Limit{Rate: 1000, Period: time.Second}
	subjects := make([]string, 3*chunkSize)
	for i := range subjects {
		subjects[i] = "s" + strconv.Itoa(i)
	}
	allowAll := func() {
		for _, sub := range subjects {
			if _, err := s.Allow(ctx, algo.Request{Name: "p", Subject: sub, Limit: l, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	allowAll()
	chunks := len(s.ents.dir.Load().chunks)
	now += 10
	s.Sweep()
	if k := s.Stats().Keys; k != 0 {
		t.Fatalf("keys = %d after expiry, want 0", k)
	}
	if allocs := testing.AllocsPerRun(1, allowAll); allocs != 0 {
		t.Errorf("keys coming back allocated %v times", allocs)
	}
	if n := len(s.ents.dir.Load().chunks); n != chunks {
		t.Errorf("slab has %d chunks, want %d", n, chunks)
	}
	now += 10
	s.Sweep() // the chunks were used in this interval: kept
	if n := len(s.ents.dir.Load().chunks); n != chunks {
		t.Errorf("after one sweep the slab has %d chunks, want %d", n, chunks)
	}
	s.Sweep() // unused for a whole interval: let go
	if n := len(s.ents.dir.Load().chunks); n != 0 {
		t.Errorf("after two sweeps the slab has %d chunks, want 0", n)
	}
	allowAll()
	if k := s.Stats().Keys; k != int64(len(subjects)) {
		t.Fatalf("keys = %d, want %d", k, len(subjects))
	}
}

// TestManyPolicies checks that many policies and limits, without handles,
// are decided correctly and without allocating.
func TestManyPolicies(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	const n = 256
	reqs := make([]algo.Request, n)
	for i := range reqs {
		reqs[i] = algo.Request{Name: "policy-" + strconv.Itoa(i), Subject: "s", Limit: algo.Limit{Rate: int64(i + 1), Period: time.Hour}, Cost: 1}
	}
	run := func() {
		for i := range reqs {
			if _, err := s.Allow(ctx, reqs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	run()
	if allocs := testing.AllocsPerRun(1, run); allocs != 0 {
		t.Errorf("deciding under %d policies allocated %v times", n, allocs)
	}
	for i := range reqs { // three requests each so far
		d, err := s.Allow(ctx, reqs[i])
		if err != nil || d.Quota != int64(i+1) || d.Remaining != max(0, int64(i+1)-4) || d.Allowed != (i+1 >= 4) {
			t.Fatalf("policy %d, fourth request: %+v, %v", i, d, err)
		}
	}
}

// TestAllowAllFullStore decides a group in a full store while it holds
// the entries of the group, one of them expired and not charged: the new
// key of the group is decided in its overflow slot, and the store stays
// consistent.
func TestAllowAllFullStore(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := New(Options{Now: func() time.Time { return time.UnixMilli(now) }, SweepInterval: -1, Shards: 1, MaxKeys: 2})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Rate: 10, Period: time.Second}
	req := func(policy string, cost int64) algo.Request {
		return algo.Request{Name: policy, Subject: "s", Tag: "g", Limit: l, Cost: cost}
	}
	if _, err := s.AllowAll(ctx, []algo.Request{req("p1", 1), req("p2", 1)}); err != nil {
		t.Fatal(err)
	}
	now += 1000 // both expired
	ds, err := s.AllowAll(ctx, []algo.Request{req("p1", 1), req("p2", 0), req("p3", 1)})
	if err != nil || len(ds) != 3 || !ds[0].Allowed || !ds[1].Allowed || !ds[2].Allowed {
		t.Fatalf("AllowAll = %+v, %v", ds, err)
	}
	if st := s.Stats(); st.Keys != 2 || st.Overflows != 1 {
		t.Fatalf("stats = %+v, want 2 keys, 1 overflow", st)
	}
	for _, p := range []string{"p1", "p2", "p3"} {
		d, err := s.Allow(ctx, req(p, 0))
		want := int64(10)
		if p != "p2" {
			want = 9
		}
		if err != nil || d.Remaining != want {
			t.Fatalf("%s: %+v, %v; want %d remaining", p, d, err, want)
		}
	}
	s.Sweep() // p2 expired: room for p3
	if ds, err := s.AllowAll(ctx, []algo.Request{req("p3", 1)}); err != nil || !ds[0].Allowed || ds[0].Remaining != 8 {
		t.Fatalf("p3 after the sweep: %+v, %v; want its slot's state, charged", ds, err)
	}
	if st := s.Stats(); st.Keys != 2 || st.Overflows != 1 {
		t.Fatalf("stats = %+v, want 2 keys, 1 overflow", st)
	}
}

// TestGhosts checks that a swept key stays gone until a request is
// charged for it, whichever way it comes back, and that the sweep after
// the next deletes the ghosts left.
func TestGhosts(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := newTestStore(t, &now)
	ctx := context.Background()
	l := algo.Limit{Rate: 2, Period: time.Second}
	rule := algo.LockoutRule{Threshold: 2, Lock: time.Second, MaxLock: time.Minute, Window: time.Second, Memory: time.Second}
	lease := algo.LeaseRequest{Name: "l", Subject: "s", ID: "a", Limit: 1, TTL: time.Second}
	fill := func() {
		if _, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "s", Limit: l, Cost: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lockout(ctx, algo.LockoutRequest{Name: "g", Subject: "s", Rule: rule, Op: algo.LockFail}); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Acquire(ctx, lease); err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
	}
	fill()
	if k := s.Stats().Keys; k != 3 {
		t.Fatalf("keys = %d, want 3", k)
	}
	now += 60_000
	s.Sweep()
	if st := s.Stats(); st.Keys != 0 || st.Expired != 3 {
		t.Fatalf("after the sweep: %+v, want no keys, 3 expired", st)
	}
	// Queries find nothing and add nothing.
	if d, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "s", Limit: l}); err != nil || d.Remaining != 2 {
		t.Fatalf("query of a swept key: %+v, %v", d, err)
	}
	if r, err := s.Lockout(ctx, algo.LockoutRequest{Name: "g", Subject: "s", Rule: rule, Op: algo.LockCheck}); err != nil || r.Locked {
		t.Fatalf("check of a swept account: %+v, %v", r, err)
	}
	if k := s.Stats().Keys; k != 0 {
		t.Fatalf("keys = %d after queries, want 0", k)
	}
	// A release of a lease not held is no query: the store cannot tell it
	// from the release of a lease whose acquire is still to come, so it
	// keeps the id (a key) for the lease's TTL, and that acquire takes
	// nothing.
	late := algo.LeaseRequest{Name: "l2", Subject: "s", ID: "late", Limit: 1, TTL: time.Second}
	if err := s.Release(ctx, late); err != nil {
		t.Fatal(err)
	}
	if k := s.Stats().Keys; k != 1 {
		t.Fatalf("keys = %d after a release of a lease not held, want 1", k)
	}
	if ok, err := s.Acquire(ctx, late); err != nil || ok {
		t.Fatalf("acquire after its release = %v, %v, want refused", ok, err)
	}
	now += 1000
	s.Sweep()
	if k := s.Stats().Keys; k != 0 {
		t.Fatalf("keys = %d once the released id's TTL passed, want 0", k)
	}
	// Charged requests bring the keys back, fresh.
	fill()
	if k := s.Stats().Keys; k != 3 {
		t.Fatalf("keys = %d, want 3", k)
	}
	if d, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "s", Limit: l}); err != nil || d.Remaining != 0 {
		t.Fatalf("query after the key came back: %+v, %v", d, err)
	}
	if ok, err := s.Acquire(ctx, algo.LeaseRequest{Name: "l", Subject: "s", ID: "b", Limit: 1, TTL: time.Second}); err != nil || ok {
		t.Fatalf("second lease = %v, %v, want refused", ok, err)
	}
	// Two sweeps without the keys: the ghosts are deleted.
	now += 60_000
	s.Sweep()
	s.Sweep()
	live := 0
	for i := range s.shards {
		live += s.shards[i].live
	}
	if live != 0 {
		t.Fatalf("%d entries left in the tables, want 0", live)
	}
}

// TestSweepRace decides while the clock moves and sweeps run, so that keys
// expire, turn into ghosts and come back under contention, and checks that
// no key ever admits more than its limit and the key count stays exact.
func TestSweepRace(t *testing.T) {
	var now atomic.Int64
	now.Store(1_800_000_000_000)
	start := now.Load()
	s := New(Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }, SweepInterval: -1, Shards: 2})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Rate: 1, Period: 10 * time.Millisecond}
	const keys = 8
	var allowed [keys]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keys
				d, err := s.Allow(ctx, algo.Request{Name: "p", Subject: strconv.Itoa(k), Limit: l, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	for range 300 {
		time.Sleep(100 * time.Microsecond) // let the deciders run
		now.Add(3)
		s.Sweep()
		if k := s.Stats().Keys; k < 0 || k > keys {
			t.Fatalf("keys = %d", k)
		}
	}
	close(stop)
	wg.Wait()
	elapsed := now.Load() - start
	for k := range keys {
		if n := allowed[k].Load(); n > elapsed/10+1 {
			t.Errorf("key %d admitted %d in %d ms, limit %d", k, n, elapsed, elapsed/10+1)
		}
	}
	if n := allowed[0].Load(); n < 10 {
		t.Errorf("key 0 admitted only %d in %d ms: the test did not race", n, elapsed)
	}
	now.Add(1000)
	s.Sweep()
	if k := s.Stats().Keys; k != 0 {
		t.Fatalf("keys = %d after everything expired, want 0", k)
	}
}
