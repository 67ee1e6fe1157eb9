package memory

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
)

// checkInvariants recomputes what s charges and counts from its tables and
// checks it against its counters; it also checks that every entry in a
// table can be found from its home slot, and that a sliding log is charged
// for the capacity it has. It returns the bytes charged for overflow
// slots. The store must be quiet.
func checkInvariants(t *testing.T, s *Store) (inSlots int64) {
	t.Helper()
	var bytes, keys int64
	sl := s.ents.dir.Load()
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		tab := sh.tab.Load()
		bytes += int64(len(tab.slots)) * slotBytes
		live, slots := 0, int32(0)
		for i := range tab.slots {
			v := tab.slots[i].Load()
			if v == slotEmpty {
				continue
			}
			e := sl.at(uint32(v) - 2)
			e.mu.Lock()
			live++
			bytes += e.bytes()
			switch {
			case !e.live():
				t.Errorf("shard %d slot %d: an entry not live", si, i)
			case e.flags&entrySlot != 0:
				slots++
				inSlots += e.bytes()
			case !e.ghost():
				keys++
			}
			if v != slotOf(e.hash, e.idx) {
				t.Errorf("shard %d slot %d: slot value %x, entry hash %x idx %d", si, i, v, e.hash, e.idx)
			}
			for j := e.hash & tab.mask; j != uint64(i); j = (j + 1) & tab.mask {
				if tab.slots[j].Load() == slotEmpty {
					t.Errorf("shard %d: the entry in slot %d is past an empty slot %d from its home", si, i, j)
					break
				}
			}
			if g := e.st.Log; g != nil {
				capacity := reflect.ValueOf(g).Elem().FieldByName("ts").Len()
				if e.logShift == 0 || 1<<e.logShift < capacity {
					t.Errorf("a log of capacity %d charged as 1<<%d", capacity, e.logShift)
				}
			}
			if x := e.ext; x != nil && x.leases != nil {
				var ids int64
				for id := range x.leases {
					ids += allocBytes(len(id))
				}
				if ids != x.leaseIDs || len(x.leases) > x.leaseMax {
					t.Errorf("leases %d (most %d) charged %d bytes of ids, hold %d", len(x.leases), x.leaseMax, x.leaseIDs, ids)
				}
			}
			e.mu.Unlock()
		}
		if live != sh.live || slots != sh.slots.Load() {
			t.Errorf("shard %d: %d entries and %d slots, counted %d and %d", si, live, slots, sh.live, sh.slots.Load())
		}
		sh.mu.Unlock()
	}
	if got := s.bytes.Load(); got != bytes {
		t.Errorf("bytes charged %d, recomputed %d", got, bytes)
	}
	if got := s.keys.Load(); got != keys {
		t.Errorf("keys counted %d, recomputed %d", got, keys)
	}
	return inSlots
}

// workload runs a random mix of every kind of request against s, at
// times from now, which it advances, and returns how many were refused
// with ErrFull.
func workload(t *testing.T, s *Store, now *atomic.Int64, seed uint64, n int) (full int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	long := strings.Repeat("l", 50)
	check := func(err error) int {
		if errors.Is(err, ErrFull) {
			return 1
		}
		if err != nil {
			t.Error(err)
		}
		return 0
	}
	rule := algo.LockoutRule{Threshold: 3, Lock: time.Second, MaxLock: time.Minute, Window: 2 * time.Second, Memory: 5 * time.Second}
	for range n {
		if rng.IntN(50) == 0 {
			now.Add(int64(rng.IntN(300)))
		}
		at := time.UnixMilli(now.Load())
		sub := "s" + strconv.Itoa(rng.IntN(400))
		if rng.IntN(8) == 0 {
			sub += long
		}
		// A limit per policy and algorithm, as a policy file has: a key's
		// state means something only under its limit.
		algs := algo.Algorithms()
		a, p := algs[rng.IntN(len(algs))], rng.IntN(2)
		l := algo.Limit{Algorithm: a, Rate: int64(3 + 17*p), Period: time.Duration(1+p) * time.Second}
		switch rng.IntN(6) {
		case 0, 1:
			_, err := s.Allow(ctx, algo.Request{Name: "p" + strconv.Itoa(p), Subject: sub, Limit: l, Cost: int64(rng.IntN(2)), Now: at})
			full += check(err)
		case 2:
			tag := "t" + strconv.Itoa(rng.IntN(3))
			_, err := s.AllowAll(ctx, []algo.Request{
				{Name: "g1", Subject: sub, Tag: tag, Limit: algo.Limit{Algorithm: a, Rate: 7, Period: time.Second}, Cost: 1, Now: at},
				{Name: "g2", Subject: sub, Tag: tag, Limit: algo.Limit{Rate: 10, Period: time.Second}, Cost: 1, Now: at},
				{Name: "g3", Subject: tag, Tag: tag, Limit: algo.Limit{Rate: 50, Period: time.Second}, Cost: int64(rng.IntN(2)), Now: at},
			})
			full += check(err)
		case 3:
			// Every operation, with held attempts (some left to expire).
			op := algo.LockOp(rng.IntN(5))
			var hold algo.Hold
			if op != algo.LockCheck && (op == algo.LockReserve || rng.IntN(2) == 0) {
				hold = algo.Hold{ID: "a" + strconv.Itoa(rng.IntN(6)), TTL: time.Duration(1+rng.IntN(1500)) * time.Millisecond}
			}
			_, err := s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: sub, Rule: rule, Op: op, Hold: hold, Now: at})
			full += check(err)
			if rng.IntN(2) == 0 {
				// A rate limit with held attempts, as the login guard's
				// per-address failure budget.
				req := algo.Request{Name: "ipf" + strconv.Itoa(p), Subject: sub, Limit: l, Cost: 1, Now: at}
				h := algo.Hold{ID: "h" + strconv.Itoa(rng.IntN(6)), TTL: time.Duration(1+rng.IntN(1500)) * time.Millisecond}
				if rng.IntN(2) == 0 {
					_, err = s.Reserve(ctx, req, h)
				} else {
					_, err = s.Settle(ctx, req, h, rng.IntN(2) == 0)
				}
				full += check(err)
			}
		case 4:
			req := algo.LeaseRequest{Name: "conc", Subject: sub, ID: "id" + strconv.Itoa(rng.IntN(20)), Limit: int64(1 + rng.IntN(12)), TTL: time.Duration(1+rng.IntN(2000)) * time.Millisecond, Now: at}
			if rng.IntN(2) == 0 {
				_, err := s.Acquire(ctx, req)
				full += check(err)
			} else {
				full += check(s.Release(ctx, req))
			}
		case 5:
			// A sliding log that grows: many admitted requests.
			ll := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 200, Period: time.Second}
			for range 1 + rng.IntN(30) {
				now.Add(1)
				_, err := s.Allow(ctx, algo.Request{Name: "log", Subject: sub, Limit: ll, Cost: 1, Now: time.UnixMilli(now.Load())})
				full += check(err)
			}
		}
	}
	return full
}

// TestAccounting runs random workloads against stores with and without
// room to spare, sweeping between them, and checks the store's counters
// and tables after each, and the bound.
func TestAccounting(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		full bool // ErrFull allowed: a store too small for the slots the workload needs
	}{
		{Options{Shards: 4, MaxBytes: -1}, false},
		{Options{Shards: 2, MaxBytes: 1 << 20}, false},
		{Options{Shards: 4, MaxBytes: 64 << 10}, true},
		{Options{Shards: 1, MaxBytes: 24 << 10}, true},
		{Options{Shards: 2, MaxKeys: 50}, false},
	} {
		t.Run("", func(t *testing.T) {
			var now atomic.Int64
			now.Store(1_800_000_000_000)
			opts := tc.opts
			opts.Now = func() time.Time { return time.UnixMilli(now.Load()) }
			opts.SweepInterval = -1
			s := New(opts)
			defer s.Close()
			full := 0
			seed := testenv.Seed(t)
			for round := range 6 {
				full += workload(t, s, &now, seed+uint64(round), 3000)
				slotBytes := checkInvariants(t, s)
				// Logs grow without making room, up to 200 entries here.
				if b := s.bytes.Load() - slotBytes; s.maxBytes > 0 && b > s.maxBytes+400*logBytes(8) {
					t.Errorf("bytes %d but overflow slots', bound %d", b, s.maxBytes)
				}
				if round%2 == 1 {
					s.Sweep()
					checkInvariants(t, s)
				}
			}
			if full > 0 && !tc.full {
				t.Errorf("%d requests refused with ErrFull", full)
			}
			now.Add(time.Hour.Milliseconds())
			s.Sweep()
			s.Sweep()
			checkInvariants(t, s)
			if st := s.Stats(); st.Keys != 0 {
				t.Errorf("after everything expired: %+v", st)
				dump(t, s, now.Load())
			}
			t.Logf("%+v; %d ErrFull", s.Stats(), full)
		})
	}
}

// TestAccountingConcurrent runs the workloads in parallel with sweeps and
// checks the counters once all is quiet.
func TestAccountingConcurrent(t *testing.T) {
	var now atomic.Int64
	now.Store(1_800_000_000_000)
	s := New(Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }, SweepInterval: -1, Shards: 2, MaxBytes: 256 << 10})
	defer s.Close()
	var wg sync.WaitGroup
	seed := testenv.Seed(t)
	for g := range 4 {
		wg.Go(func() { workload(t, s, &now, seed+uint64(g), 3000) })
	}
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				s.Sweep()
				time.Sleep(time.Millisecond)
			}
		}
	})
	wg.Wait()
	close(stop)
	sweeps.Wait()
	checkInvariants(t, s)
	t.Logf("%+v", s.Stats())
}

func dump(t *testing.T, s *Store, ms int64) {
	sl := s.ents.dir.Load()
	for si := range s.shards {
		tab := s.shards[si].tab.Load()
		for i := range tab.slots {
			v := tab.slots[i].Load()
			if v == 0 {
				continue
			}
			e := sl.at(uint32(v) - 2)
			t.Logf("left: flags %b kind %d expire-now %d st %+v ext %+v key %q", e.flags, e.kind(), e.expire-ms, e.st, e.ext, e.kin[:min(int(e.klen), 41)])
		}
	}
}
