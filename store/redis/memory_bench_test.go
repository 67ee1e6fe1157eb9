package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// BenchmarkMemoryPerKey measures Redis memory per active key for each
// algorithm: 100,000 subjects each make one request (the log: 10, its
// typical depth), and INFO memory's used_memory grows by bytes/key. It also
// checks that every key it wrote has a TTL. Run it alone:
//
//	go test -run '^$' -bench MemoryPerKey -benchtime 1x ./store/redis
func BenchmarkMemoryPerKey(b *testing.B) {
	const keys = 100_000
	c := srv.NewClient(b)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	usedMemory := func() int64 {
		info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("no used_memory in INFO")
		return 0
	}
	for _, a := range algo.Algorithms() {
		b.Run(a.String(), func(b *testing.B) {
			for range b.N {
				if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				before := usedMemory()
				l := algo.Limit{Algorithm: a, Rate: 100, Period: time.Hour}
				cost := int64(1)
				if a == algo.SlidingWindowLog {
					cost = 10
				}
				var wg sync.WaitGroup
				for w := 0; w < 64; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						for i := w; i < keys; i += 64 {
							if _, err := s.Allow(ctx, algo.Request{Name: "mem", Subject: fmt.Sprintf("user-%06d", i), Limit: l, Cost: cost}); err != nil {
								b.Error(err)
								return
							}
						}
					}(w)
				}
				wg.Wait()
				after := usedMemory()
				b.ReportMetric(float64(after-before)/keys, "bytes/key")
				bad, err := srv.KeysWithoutTTL(ctx, rstore.KeyPrefix+"*")
				if err != nil || len(bad) > 0 {
					b.Fatalf("keys without TTL: %d (%v)", len(bad), err)
				}
			}
		})
	}
}
