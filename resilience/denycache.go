package resilience

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// denyCache remembers refusals until their RetryAfter. It is sharded and
// bounded: when a shard is full, expired entries are dropped, and if none
// are, the new refusal is simply not cached.
type denyCache struct {
	seed   maphash.Seed
	shards [16]denyShard
	per    int
}

type denyShard struct {
	mu sync.Mutex
	m  map[denyKey]denyEntry
}

// denyKey names one state as the stores do: a subject's state in its own
// group (empty tag) is not the same subject's state in another group.
type denyKey struct {
	policy, tag, subject string
	alg                  algo.Algorithm
}

// denyKeyOf returns the deny cache's key of a request.
func denyKeyOf(req *algo.Request) denyKey {
	k := denyKey{req.Name, req.Tag, req.Subject, req.Limit.Algorithm}
	if k.tag == k.subject {
		k.tag = ""
	}
	return k
}

type denyEntry struct {
	until time.Time // refused until
	at    time.Time // when the store refused
	cost  int64     // the refused cost; other costs still ask the store
	d     algo.Decision
	group []algo.Decision // the whole group's decisions, for a group refusal
}

// evictionSample is how many entries a full cache looks at to pick one
// to evict.
const evictionSample = 8

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(1, size/16)}
	for i := range c.shards {
		c.shards[i].m = map[denyKey]denyEntry{}
	}
	return c
}

func (c *denyCache) shard(subject string) *denyShard {
	return &c.shards[maphash.String(c.seed, subject)%16]
}

func (c *denyCache) get(req algo.Request, now time.Time) (algo.Decision, bool) {
	d, _, ok := c.getGroup(req, now)
	return d, ok
}

// getGroup is get that also returns the group snapshot (nil for a single
// request's refusal).
func (c *denyCache) getGroup(req algo.Request, now time.Time) (algo.Decision, []algo.Decision, bool) {
	sh := c.shard(req.Subject)
	k := denyKeyOf(&req)
	sh.mu.Lock()
	e, ok := sh.m[k]
	if ok && !now.Before(e.until) {
		delete(sh.m, k)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || req.Cost != e.cost || req.Limit.Capacity() != e.d.Quota {
		return algo.Decision{}, nil, false
	}
	// Nothing anyone else does can make the budget come back sooner, so
	// the refusal stands; report it as of now. Remaining is unchanged
	// (see the package doc for which refusals are cached).
	d := e.d
	d.RetryAfter = e.until.Sub(now)
	d.ResetAfter = max(d.RetryAfter, d.ResetAfter-now.Sub(e.at))
	return d, e.group, true
}

func (c *denyCache) put(req algo.Request, d algo.Decision, now time.Time) {
	c.putGroup(req, d, now, nil)
}

func (c *denyCache) putGroup(req algo.Request, d algo.Decision, now time.Time, group []algo.Decision) {
	sh := c.shard(req.Subject)
	k := denyKeyOf(&req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, exists := sh.m[k]; !exists && len(sh.m) >= c.per {
		// Full: make room by evicting, of a few entries taken at random
		// (map order), the one that ends first, so that no put pays for a
		// scan of the shard. A dropped entry only costs a store call.
		var victim denyKey
		var end time.Time
		n := 0
		for k2, e := range sh.m {
			if n == 0 || e.until.Before(end) {
				victim, end = k2, e.until
			}
			if n++; n == evictionSample {
				break
			}
		}
		delete(sh.m, victim)
	}
	sh.m[k] = denyEntry{until: now.Add(d.RetryAfter), at: now, cost: req.Cost, d: d, group: group}
}
