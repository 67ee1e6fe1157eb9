package resilience

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestMemoBounded: the memory of last decisions holds at most its size,
// takes new keys when full, and evicts first what no longer counts.
func TestMemoBounded(t *testing.T) {
	m := newMemo(64 * 100)
	now := int64(1_800_000_000_000)
	l := algo.Limit{Rate: 100, Period: time.Minute}
	req := func(i int) algo.Request {
		return algo.Request{Name: "p", Subject: fmt.Sprint("s", i), Limit: l, Cost: 1}
	}
	// Keys whose knowledge has ended (an old, reset decision) ...
	for i := 0; i < 64*100; i++ {
		r := req(i)
		m.record(&r, &algo.Decision{Remaining: 99, ResetAfter: time.Second}, now-time.Hour.Milliseconds())
	}
	// ... give way to live ones.
	for i := 100_000; i < 100_000+64*50; i++ {
		r := req(i)
		m.record(&r, &algo.Decision{Remaining: 0, ResetAfter: time.Minute}, now)
	}
	if n := m.len(); n > 64*100 {
		t.Fatalf("the memo holds %d keys, bound %d", n, 64*100)
	}
	lost := 0
	for i := 100_000; i < 100_000+64*50; i++ {
		k := keyOf(&algo.Request{Name: "p", Subject: fmt.Sprint("s", i), Limit: l})
		sh := m.shard(&k)
		if lookup(sh, &k, &l) == nil {
			lost++
		}
	}
	t.Logf("%d of %d live keys evicted while ended ones remained", lost, 64*50)
	// Eviction looks at a few entries only: allow for a sample that
	// held no ended one (1 in 2^16 at worst here).
	if lost > 5 {
		t.Fatalf("%d of %d live keys were evicted while ended ones remained", lost, 64*50)
	}
	// Full of live keys, it still takes new ones.
	for i := 0; i < 100_000; i++ {
		r := req(200_000 + i)
		m.record(&r, &algo.Decision{Remaining: 0, ResetAfter: time.Minute}, now)
	}
	if n := m.len(); n > 64*100 {
		t.Fatalf("the memo holds %d keys, bound %d", n, 64*100)
	}
	r := req(200_000 + 99_999)
	k := keyOf(&r)
	if lookup(m.shard(&k), &k, &l) == nil {
		t.Fatal("the key recorded last is not remembered")
	}
}

// TestMemoBytes measures what a remembered key costs, for the
// documentation of Options.RememberSize (subjects of 43 bytes, a
// base64url SHA-256 pseudonym, which the memo keeps a reference to).
func TestMemoBytes(t *testing.T) {
	const n = 100_000
	subjects := make([]string, n)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("%043d", i)
	}
	l := algo.Limit{Rate: 100, Period: time.Minute}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newMemo(n)
	for i := 0; i < n; i++ {
		r := algo.Request{Name: "p", Subject: subjects[i], Limit: l, Cost: 1}
		m.record(&r, &algo.Decision{Remaining: 1, ResetAfter: time.Minute}, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / float64(m.len())
	t.Logf("%d keys remembered, %.0f bytes each (not counting the subjects' bytes)", m.len(), per)
	if per > 300 {
		t.Fatalf("%.0f bytes per remembered key, documented as about 230", per)
	}
	runtime.KeepAlive(subjects)
}

// BenchmarkMemoRecord is what remembering costs each decision of the store.
func BenchmarkMemoRecord(b *testing.B) {
	m := newMemo(DefaultRememberSize)
	reqs := make([]algo.Request, 1024)
	for i := range reqs {
		reqs[i] = algo.Request{Name: "p", Subject: fmt.Sprintf("%043d", i), Limit: algo.Limit{Rate: 100, Period: time.Minute}, Cost: 1}
	}
	d := algo.Decision{Allowed: true, Remaining: 10, ResetAfter: time.Second}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.record(&reqs[i%len(reqs)], &d, int64(i))
			i++
		}
	})
}
