package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestDenyCacheFull: a cache filled with refusals that have not ended (by
// an attacker with many addresses) still takes new ones, evicting the
// entry that ends first among a few, rather than scanning the shard on
// every put and then dropping the new refusal.
func TestDenyCacheFull(t *testing.T) {
	c := newDenyCache(16 * 1000)
	now := time.Unix(1_800_000_000, 0)
	req := func(i int) algo.Request {
		return algo.Request{Name: "p", Subject: fmt.Sprint("s", i), Limit: algo.Limit{Rate: 1, Period: time.Hour}, Cost: 1}
	}
	refused := algo.Decision{Quota: 1, RetryAfter: time.Hour}
	for i := 0; i < 100_000; i++ {
		c.put(req(i), refused, now)
	}
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].m)
	}
	if total > 16*1000 {
		t.Fatalf("the cache holds %d entries, bound 16,000", total)
	}
	// The newest refusals are cached.
	for i := 99_990; i < 100_000; i++ {
		if _, ok := c.get(req(i), now); !ok {
			t.Fatalf("refusal %d, put last, is not cached", i)
		}
	}
}
