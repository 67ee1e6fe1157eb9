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
// every put and then dropping the new refusal. The refusals come a
// millisecond apart, so the newest end last: with equal ends the victim
// is any of the sample, and the newest may go.
func TestDenyCacheFull(t *testing.T) {
	c := newDenyCache(16 * 1000)
	start := time.Unix(1_800_000_000, 0)
	req := func(i int) algo.Request {
		return algo.Request{Name: "p", Subject: fmt.Sprint("s", i), Limit: algo.Limit{Rate: 1, Period: time.Hour}, Cost: 1}
	}
	refused := algo.Decision{Quota: 1, RetryAfter: time.Hour}
	now := start
	for i := 0; i < 100_000; i++ {
		now = start.Add(time.Duration(i) * time.Millisecond)
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

// TestDenyCacheGroupOfOtherRequests: a group refusal answers only the same
// group again. Another group that shares the refusing request (a second
// descriptor of Envoy's rate-limit service beside a refused one, another
// user of a refused tenant) is not answered with the first group's
// decisions, which are about other budgets, in other places.
func TestDenyCacheGroupOfOtherRequests(t *testing.T) {
	c := newDenyCache(1000)
	now := time.Unix(1_800_000_000, 0)
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 10, Period: time.Hour}
	req := func(name, subject string) algo.Request {
		return algo.Request{Name: name, Subject: subject, Tag: "domain", Limit: l, Cost: 1}
	}
	a, refused := req("a", "x"), req("refused", "y")
	ds := []algo.Decision{{Allowed: true, Quota: 10, Remaining: 7}, {Quota: 10, RetryAfter: time.Minute}}
	c.remember([]algo.Request{a, refused}, ds, now)
	if got, ok := c.lookup([]algo.Request{a, refused}, now); !ok || got[0].Remaining != 7 || got[1].Allowed {
		t.Fatalf("the same group: %+v, %v", got, ok)
	}
	if got, ok := c.lookup([]algo.Request{refused, req("b", "z")}, now); ok {
		t.Fatalf("another group sharing the refused request was answered with the first group's decisions: %+v", got)
	}
	if got, ok := c.lookup([]algo.Request{req("a", "other"), refused}, now); ok {
		t.Fatalf("another subject's group was answered with the first group's decisions: %+v", got)
	}
}
