package redis_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestEvictingRedisReported: a Redis that evicts keys when full (the
// default maxmemory-policy of the managed services is volatile-lru, and
// every key the store writes has a TTL) forgets refusals and account
// locks under a flood of new subjects: on such a server a subject refused
// for an hour was admitted again after 60,000 requests of new subjects
// filled 4 MB. The store cannot stop Redis evicting; it says so, as an
// error, when it connects, and EvictionPolicy names the policy.
func TestEvictingRedisReported(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"}, "volatile-lru"},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu"}, "allkeys-lfu"},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, ""},
		{[]string{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"}, ""}, // no maxmemory: nothing is evicted
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := redistest.Start(t, tc.args...)
			var logs fixture.SyncBuffer
			s, err := rstore.New(r.NewClient(t), rstore.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := s.EvictionPolicy(ctx)
			if err != nil || got != tc.want {
				t.Fatalf("EvictionPolicy: %q, %v; want %q", got, err, tc.want)
			}
			if tc.want == "" {
				// The check runs once, when the store connects: closing
				// the store waits for it.
				s.Close()
				if strings.Contains(logs.String(), "maxmemory-policy") {
					t.Fatalf("a warning for a Redis that does not evict: %s", logs.String())
				}
				return
			}
			for !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "maxmemory-policy="+tc.want) {
				if ctx.Err() != nil {
					t.Fatalf("no error logged for a Redis evicting with %s: %q", tc.want, logs.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
