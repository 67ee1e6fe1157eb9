package memory_test

import (
	"context"
	"hash/maphash"
	"runtime"
	"slices"
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
				s.Allow(ctx, algo.Request{Policy: "bench", Subject: k, Limit: l, Cost: 1})
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

// BenchmarkVersusXRateRatio alternates the two in short rounds, as
// tollgate-bench's spin does (GOMAXPROCS workers walking the keys), and
// reports tollgate's throughput over x/time/rate's, which is steadier than
// either figure on a shared machine.
func BenchmarkVersusXRateRatio(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "subject-" + strconv.Itoa(i)
			}
			s := memory.New(memory.Options{})
			defer s.Close()
			l := algo.Limit{Rate: 1_000_000, Period: time.Second}
			ctx := context.Background()
			x := newXrateMap()
			tg := func(k string) { s.Allow(ctx, algo.Request{Policy: "bench", Subject: k, Limit: l, Cost: 1}) }
			xr := func(k string) { x.allow(k) }
			for _, k := range keys {
				tg(k)
				xr(k)
			}
			// Each round runs both for 100ms; the median of the rounds'
			// ratios shrugs off what else the machine was doing.
			var tgN, xrN int64
			var tgT, xrT time.Duration
			ratios := make([]float64, b.N)
			for i := range ratios {
				n1, d1 := spin(keys, tg, 100*time.Millisecond)
				n2, d2 := spin(keys, xr, 100*time.Millisecond)
				tgN, tgT, xrN, xrT = tgN+n1, tgT+d1, xrN+n2, xrT+d2
				ratios[i] = (float64(n1) / d1.Seconds()) / (float64(n2) / d2.Seconds())
			}
			slices.Sort(ratios)
			b.ReportMetric(float64(tgN)/tgT.Seconds()/1e6, "tollgate-M/s")
			b.ReportMetric(float64(xrN)/xrT.Seconds()/1e6, "xrate-M/s")
			b.ReportMetric(ratios[len(ratios)/2], "ratio")
			b.ReportMetric(testing.AllocsPerRun(1000, func() { tg(keys[len(keys)/2]) }), "allocs/decision")
		})
	}
}

// spin calls f from GOMAXPROCS goroutines for dur and counts the calls.
func spin(keys []string, f func(string), dur time.Duration) (int64, time.Duration) {
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	counts := make([]int64, workers*8)
	start := time.Now()
	deadline := start.Add(dur)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			i := w * 7919
			n := int64(0)
			for time.Now().Before(deadline) {
				for j := 0; j < 256; j++ {
					i++
					f(keys[i%len(keys)])
				}
				n += 256
			}
			counts[w*8] = n
		}(w)
	}
	wg.Wait()
	var total int64
	for _, c := range counts {
		total += c
	}
	return total, time.Since(start)
}
