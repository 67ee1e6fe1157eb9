package redis_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// BenchmarkAllow measures decisions on Redis' clock by 64 concurrent
// callers, with coalescing on (maxbatch=64, the default) and off
// (maxbatch=1), and reports per decision the script calls Redis ran and
// the CPU time Redis spent (INFO cpu, user + system; it counts all of
// Redis' work, reading and parsing the calls included).
func BenchmarkAllow(b *testing.B) {
	subjects := make([]string, 100_000)
	for i := range subjects {
		subjects[i] = "subject-" + strconv.Itoa(i)
	}
	c := srv.NewClient(b)
	stores := map[int]*rstore.Store{}
	for _, mb := range []int{1, 64} {
		s, err := rstore.New(c, rstore.Options{MaxBatch: mb})
		if err != nil {
			b.Fatal(err)
		}
		stores[mb] = s
	}
	for _, a := range algo.Algorithms() {
		for _, keys := range []int{1, len(subjects)} {
			for _, mb := range []int{1, 64} {
				s := stores[mb]
				b.Run(a.String()+"/keys="+strconv.Itoa(keys)+"/maxbatch="+strconv.Itoa(mb), func(b *testing.B) {
					l := algo.Limit{Algorithm: a, Rate: 1_000_000, Period: time.Second}
					if a == algo.SlidingWindowLog {
						l.Rate = 1000
					}
					h, err := algo.NewHandle("bench", l)
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					var next atomic.Uint64
					b.ReportAllocs()
					b.SetParallelism(32) // 64 concurrent callers on 2 cores
					before, cpu := scriptCalls(b, c), redisCPU(b, c)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := next.Add(7919)
						for pb.Next() {
							i++
							if _, err := s.Allow(ctx, h.Request(subjects[i%uint64(keys)], 1)); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.StopTimer()
					b.ReportMetric(float64(scriptCalls(b, c)-before)/float64(b.N), "calls/op")
					b.ReportMetric(float64(redisCPU(b, c)-cpu)/float64(b.N), "redis-ns/op")
				})
			}
		}
	}
}

// redisCPU returns the CPU time the server behind c has used, in ns.
func redisCPU(tb testing.TB, c rueidis.Client) time.Duration {
	tb.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu line %q: %v", line, err)
			}
			total += time.Duration(f * float64(time.Second))
		}
	}
	return total
}
