package redis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

func BenchmarkAllow(b *testing.B) {
	subjects := make([]string, 100_000)
	for i := range subjects {
		subjects[i] = "subject-" + strconv.Itoa(i)
	}
	s := newStore(b)
	for _, a := range algo.Algorithms() {
		for _, keys := range []int{1, len(subjects)} {
			b.Run(a.String()+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				l := algo.Limit{Algorithm: a, Rate: 1_000_000, Period: time.Second}
				if a == algo.SlidingWindowLog {
					l.Rate = 1000
				}
				ctx := context.Background()
				var next atomic.Uint64
				b.ReportAllocs()
				b.SetParallelism(32) // 64 concurrent callers on 2 cores
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(7919)
					for pb.Next() {
						i++
						if _, err := s.Allow(ctx, algo.Request{Policy: "bench", Subject: subjects[i%uint64(keys)], Limit: l, Cost: 1}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
