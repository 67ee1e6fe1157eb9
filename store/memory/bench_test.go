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

// benchLimit is generous enough that most decisions admit, so the
// benchmark measures the write path, not just refusals.
func benchLimit(a algo.Algorithm) algo.Limit {
	l := algo.Limit{Algorithm: a, Rate: 1_000_000, Period: time.Second}
	if a == algo.SlidingWindowLog {
		l.Rate = 1000 // the log keeps an entry per admitted request
	}
	return l
}

func BenchmarkAllow(b *testing.B) {
	subjects := make([]string, 100_000)
	for i := range subjects {
		subjects[i] = "subject-" + strconv.Itoa(i)
	}
	for _, a := range algo.Algorithms() {
		for _, keys := range []int{1, len(subjects)} {
			b.Run(a.String()+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				s := memory.New(memory.Options{})
				defer s.Close()
				h, err := algo.NewHandle("bench", benchLimit(a))
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var next atomic.Uint64
				b.ReportAllocs()
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
			})
		}
	}
}

// BenchmarkAllowWithoutHandle is BenchmarkAllow's gcra on one key with
// requests that carry no handle: the store validates and prepares the
// limit on every call.
func BenchmarkAllowWithoutHandle(b *testing.B) {
	s := memory.New(memory.Options{})
	defer s.Close()
	l := benchLimit(algo.GCRA)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Allow(ctx, algo.Request{Name: "bench", Subject: "subject", Limit: l, Cost: 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSettleAll settles reservations of one subject, each with an
// id of its own that the store remembers for a minute: a settle costs
// the same however many of the subject's are remembered (when one map
// per subject held them, each settle cost as much as all of them).
func BenchmarkSettleAll(b *testing.B) {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, err := algo.NewHandle("bench", algo.Limit{Algorithm: algo.TokenBucket, Rate: 1 << 30, Period: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := h.Request("one-tenant", 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		st := algo.Settlement{ID: strconv.Itoa(i), TTL: time.Minute, Items: []algo.SettleItem{{Request: req, Actual: 60}}}
		if _, err := s.SettleAll(ctx, st); err != nil {
			b.Fatal(err)
		}
	}
}
