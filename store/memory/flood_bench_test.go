package memory_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// BenchmarkExistingKeyUnderFlood measures the latency of decisions on
// keys a full store already holds while another goroutine floods it with
// new keys, as a login flood from many addresses does: p50 and p99 of
// Allow, AllowAll and a Lockout check, each on one of 1,000 existing keys.
func BenchmarkExistingKeyUnderFlood(b *testing.B) {
	const full = 200_000
	s := memory.New(memory.Options{MaxKeys: full})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Rate: 1_000_000, Period: time.Hour}
	rule := algo.LockoutRule{Threshold: 1_000_000, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	subjects := make([]string, 1000)
	for i := range subjects {
		subjects[i] = "existing-" + strconv.Itoa(i)
	}
	group := func(sub string) []algo.Request {
		return []algo.Request{
			{Name: "plan:a", Subject: sub, Limit: l, Cost: 1},
			{Name: "plan:b", Subject: sub, Limit: l, Cost: 1},
		}
	}
	ops := []struct {
		name string
		f    func(sub string)
	}{
		{"allow", func(sub string) { s.Allow(ctx, algo.Request{Name: "ip", Subject: sub, Limit: l, Cost: 1}) }},
		{"allow_all", func(sub string) { s.AllowAll(ctx, group(sub)) }},
		{"lockout", func(sub string) {
			s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: sub, Rule: rule, Op: algo.LockCheck})
		}},
	}
	for _, sub := range subjects {
		s.Allow(ctx, algo.Request{Name: "ip", Subject: sub, Limit: l, Cost: 1})
		s.AllowAll(ctx, group(sub))
		s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: sub, Rule: rule, Op: algo.LockFail})
	}
	next := 0
	floodOne := func() {
		sub := "flood-" + strconv.Itoa(next)
		next++
		s.Allow(ctx, algo.Request{Name: "ip", Subject: sub, Limit: l, Cost: 1})
		s.Lockout(ctx, algo.LockoutRequest{Name: "login", Subject: sub, Rule: rule, Op: algo.LockFail})
	}
	for range full / 2 {
		floodOne()
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						floodOne()
					}
				}
			})
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				op.f(subjects[i%len(subjects)])
				lat[i] = time.Since(t0)
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
		})
	}
}
