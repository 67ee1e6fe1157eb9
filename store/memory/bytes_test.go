package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// TestBytesPerKey measures, over 100,000 keys of each kind, the heap a key
// takes (the heap's growth, after a GC, per key) and what the store
// charges for it against Options.MaxBytes, and checks that the two agree
// within 10%. The table in docs/design/stores.md comes from its log (go test -run
// TestBytesPerKey -v ./store/memory).
func TestBytesPerKey(t *testing.T) {
	n := 100_000
	if raceEnabled {
		n = 10_000
	}
	ctx := context.Background()
	start := time.UnixMilli(1_800_000_000_000)
	rule := algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: 15 * time.Minute, Memory: time.Hour}
	allow := func(policy string, a algo.Algorithm, requests int) func(*memory.Store, string) {
		l := algo.Limit{Algorithm: a, Rate: 100, Period: time.Minute}
		return func(s *memory.Store, sub string) {
			for i := range requests {
				s.Allow(ctx, algo.Request{Name: policy, Subject: sub, Limit: l, Cost: 1, Now: start.Add(time.Duration(i) * time.Millisecond)})
			}
		}
	}
	for _, tc := range []struct {
		name string
		sub  func(i int) string
		do   func(s *memory.Store, sub string)
	}{
		{"gcra", pseudonym, allow("v1:api", algo.GCRA, 1)},
		{"token_bucket", pseudonym, allow("v1:api", algo.TokenBucket, 1)},
		{"fixed_window", pseudonym, allow("v1:api", algo.FixedWindow, 1)},
		{"sliding_counter", pseudonym, allow("v1:api", algo.SlidingWindowCounter, 1)},
		{"sliding_log, 3 requests", pseudonym, allow("v1:api", algo.SlidingWindowLog, 3)},
		{"sliding_log, 30 requests", pseudonym, allow("v1:api", algo.SlidingWindowLog, 30)},
		{"gcra, key over 41 bytes", pseudonym, allow("plan/free@753c6ec802", algo.GCRA, 1)},
		{"gcra, 100-byte subject", func(i int) string { return pseudonym(i) + strings.Repeat("x", 75) }, allow("v1:api", algo.GCRA, 1)},
		{"login guard account", pseudonym, func(s *memory.Store, sub string) {
			s.Lockout(ctx, algo.LockoutRequest{Name: "v1:login", Subject: sub, Rule: rule, Op: algo.LockFail, Now: start})
		}},
		{"one lease", pseudonym, func(s *memory.Store, sub string) {
			s.Acquire(ctx, algo.LeaseRequest{Name: "v1:conc", Subject: sub, ID: "0123456789abcdef-" + sub[16:], Limit: 10, TTL: time.Minute, Now: start})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subjects := make([]string, n)
			for i := range subjects {
				subjects[i] = tc.sub(i)
			}
			s := memory.New(memory.Options{MaxBytes: -1, SweepInterval: -1, Now: func() time.Time { return start }})
			defer s.Close()
			tc.do(s, "warm-up: the caches") // a policy, a limit
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			charged := s.Stats().Bytes
			for _, sub := range subjects {
				tc.do(s, sub)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			charged = s.Stats().Bytes - charged
			heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
			perKey := float64(charged) / float64(n)
			t.Logf("| %s | %.0f | %.0f |", tc.name, heap, perKey)
			if perKey < 0.9*heap || perKey > 1.1*heap {
				t.Errorf("%s: charged %.0f bytes a key, the heap grew by %.0f", tc.name, perKey, heap)
			}
			runtime.KeepAlive(subjects)
		})
	}
}

// pseudonym returns a subject shaped like identity's pseudonyms: a kind,
// "_" and 22 characters.
func pseudonym(i int) string { return fmt.Sprintf("ip_%022d", i) }
