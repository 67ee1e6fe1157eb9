package memory_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
	"github.com/tollgate/tollgate/storetest"
)

// TestConformance runs the suite on a store without a background sweep:
// the suite's explicit times lie anywhere from 1970 to 2100, and a sweep
// by the store's clock (today) dropped a key spent in 2017 between two
// requests of the calendar check that expected it (seen under load; every
// time with a sweep each millisecond).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tollgate.Store {
		s := memory.New(memory.Options{SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// clock is a fake clock safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestSweepBoundsMemory(t *testing.T) {
	clk := &clock{now: time.UnixMilli(1_800_000_000_000)}
	s := memory.New(memory.Options{Now: clk.Now, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	l := tollgate.PerSecond(10)
	for i := 0; i < 1000; i++ {
		if _, err := s.Allow(ctx, algo.Request{Name: "p", Subject: string(rune('a'+i%26)) + string(rune(i)), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Stats().Keys; got != 1000 {
		t.Fatalf("keys = %d, want 1000", got)
	}
	clk.Add(99 * time.Millisecond) // each key needs 100 ms to refill
	s.Sweep()
	if got := s.Stats().Keys; got != 1000 {
		t.Fatalf("after 99ms keys = %d, want 1000 (swept a key still in use)", got)
	}
	clk.Add(time.Millisecond)
	s.Sweep()
	if st := s.Stats(); st.Keys != 0 || st.Expired != 1000 {
		t.Fatalf("after 100ms stats = %+v, want every key swept", st)
	}
}

func TestZeroCostOnFreshKeyStoresNothing(t *testing.T) {
	s := memory.New(memory.Options{SweepInterval: -1})
	defer s.Close()
	for _, a := range algo.Algorithms() {
		d, err := s.Allow(context.Background(), algo.Request{Name: "p", Subject: "s", Limit: algo.Limit{Algorithm: a, Rate: 3, Period: time.Second}})
		if err != nil || !d.Allowed || d.Remaining != 3 {
			t.Fatalf("%v: %+v, %v", a, d, err)
		}
	}
	if k := s.Stats().Keys; k != 0 {
		t.Fatalf("keys = %d after zero-cost queries, want 0", k)
	}
}

// TestKeyCap checks a full store whose keys all hold refusals: a new key
// is decided in its overflow slot and counted, limited like any key; no
// key that holds a refusal is evicted; and once they expire, new keys take
// their place.
func TestKeyCap(t *testing.T) {
	clk := &clock{now: time.UnixMilli(1_800_000_000_000)}
	s := memory.New(memory.Options{Now: clk.Now, MaxKeys: 10, SweepInterval: -1, Shards: 4})
	defer s.Close()
	ctx := context.Background()
	l := tollgate.PerMinute(5)
	req := func(sub string) (algo.Decision, error) {
		return s.Allow(ctx, algo.Request{Name: "p", Subject: sub, Limit: l, Cost: 5})
	}
	for i := 0; i < 10; i++ {
		if _, err := req(string(rune('a' + i))); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := req("new"); err != nil || !d.Allowed {
		t.Fatalf("11th key: %+v, %v; want admitted", d, err)
	}
	if d, err := req("new"); err != nil || d.Allowed {
		t.Fatalf("11th key again: %+v, %v; want refused", d, err)
	}
	const want = `
# HELP tollgate_memory_overflow_total Requests for new keys charged to a shared overflow slot because the in-memory store was full.
# TYPE tollgate_memory_overflow_total counter
tollgate_memory_overflow_total 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "tollgate_memory_overflow_total"); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Keys != 10 || st.Evictions != 0 {
		t.Fatalf("stats = %+v, want 10 keys, none evicted", st)
	}
	// Active keys keep their spent budget: still refused.
	for i := 0; i < 10; i++ {
		if d, err := req(string(rune('a' + i))); err != nil || d.Allowed {
			t.Fatalf("active key %d after overflow: %+v, %v (budget reset early?)", i, d, err)
		}
	}
	clk.Add(time.Minute)
	if d, err := req("new"); err != nil || !d.Allowed {
		t.Fatalf("after expiry the new key: %+v, %v", d, err)
	}
	if st := s.Stats(); st.Keys > 10 || st.Expired == 0 || st.Overflows != 1 {
		t.Fatalf("stats = %+v, want expired keys dropped for the new one, 1 overflow", st)
	}
}

func TestCollector(t *testing.T) {
	s := memory.New(memory.Options{SweepInterval: -1})
	defer s.Close()
	if _, err := s.Allow(context.Background(), algo.Request{Name: "p", Subject: "s", Limit: tollgate.PerMinute(5), Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(s); n != 6 {
		t.Fatalf("collected %d metrics, want 6", n)
	}
}
