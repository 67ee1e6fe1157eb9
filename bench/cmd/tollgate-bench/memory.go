package main

import (
	"context"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// memoryRow is one cell of the memory table.
type memoryRow struct {
	impl      string
	keys      int
	perSec    float64
	allocsPer float64
}

// xrateMap is the usual way to limit many keys with x/time/rate: a sharded
// map of *rate.Limiter, created on first use.
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
		l = rate.NewLimiter(benchRate, benchRate)
		sh.m[key] = l
	}
	sh.Unlock()
	return l.Allow()
}

func runMemorySuite(dur time.Duration) []memoryRow {
	var rows []memoryRow
	for _, nkeys := range []int{1, 100_000} {
		keys := makeKeys(nkeys)
		store := memory.New(memory.Options{})
		// Requests carry the limit's handle, prepared once, as the
		// gateway's do.
		h, err := algo.NewHandle("bench", algo.Limit{Rate: benchRate, Period: time.Second})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		tg := func(key string) {
			store.Allow(ctx, h.Request(key, 1))
		}
		x := newXrateMap()
		xr := func(key string) { x.allow(key) }
		impls := []struct {
			name string
			f    func(string)
		}{{"tollgate memory store (gcra)", tg}, {"sharded map of x/time/rate", xr}}
		for _, impl := range impls {
			for _, k := range keys { // create every key first: measure steady state
				impl.f(k)
			}
		}
		// Rounds outer, implementations inner; each figure is the median.
		runs := make([][]memoryRow, len(impls))
		for range repeats {
			for i, impl := range impls {
				n, elapsed := spin(runtime.GOMAXPROCS(0), keys, impl.f, dur)
				allocs := testing.AllocsPerRun(10_000, func() { impl.f(keys[len(keys)/2]) })
				row := memoryRow{impl: impl.name, keys: nkeys, perSec: float64(n) / elapsed.Seconds(), allocsPer: allocs}
				fmt.Fprintf(os.Stderr, "memory: %-30s keys %6d: %10.0f/s, %.1f allocs/decision\n", row.impl, nkeys, row.perSec, allocs)
				runs[i] = append(runs[i], row)
			}
		}
		for _, rs := range runs {
			row := rs[0]
			row.perSec = median(rs, func(r memoryRow) float64 { return r.perSec })
			row.allocsPer = median(rs, func(r memoryRow) float64 { return r.allocsPer })
			rows = append(rows, row)
		}
		store.Close()
	}
	return rows
}

// spin calls f from workers goroutines for dur and counts the calls.
func spin(workers int, keys []string, f func(string), dur time.Duration) (int64, time.Duration) {
	var wg sync.WaitGroup
	counts := make([]int64, workers*8) // padded against false sharing
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
