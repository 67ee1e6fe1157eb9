package memory_test

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// xrateMap is the usual way to limit many keys with x/time/rate, as
// bench/cmd/tollgate-bench measures it: a sharded map of *rate.Limiter.
type xrateMap struct {
	seed   maphash.Seed
	shards [64]struct {
		sync.Mutex
		m map[string]*rate.Limiter
	}
}

func newXrateMap() *xrateMap {
	x := &xrateMap{seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].m = map[string]*rate.Limiter{}
	}
	return x
}

func (x *xrateMap) allow(key string) bool {
	sh := &x.shards[maphash.String(x.seed, key)%64]
	sh.Lock()
	l := sh.m[key]
	if l == nil {
		l = rate.NewLimiter(1_000_000, 1_000_000)
		sh.m[key] = l
	}
	sh.Unlock()
	return l.Allow()
}

// BenchmarkVersusXRate runs the memory store and a sharded map of
// x/time/rate limiters side by side on the workload of tollgate-bench's
// memory table, so that their ratio comes from one run.
func BenchmarkVersusXRate(b *testing.B) {
	for _, n := range benchKeyCounts {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "subject-" + strconv.Itoa(i)
		}
		s := memory.New(memory.Options{})
		l := algo.Limit{Rate: 1_000_000, Period: time.Second}
		ctx := context.Background()
		x := newXrateMap()
		for _, impl := range []struct {
			name string
			f    func(string)
		}{
			{"tollgate", func(k string) {
				s.Allow(ctx, algo.Request{Name: "bench", Subject: k, Limit: l, Cost: 1})
			}},
			{"xrate", func(k string) { x.allow(k) }},
		} {
			for _, k := range keys {
				impl.f(k)
			}
			b.Run(impl.name+"/keys="+strconv.Itoa(n), func(b *testing.B) {
				var next atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(1)) * 7919
					for pb.Next() {
						i++
						impl.f(keys[i%len(keys)])
					}
				})
			})
		}
		s.Close()
	}
}

var benchKeyCounts = []int{1, 1000, 100_000}
