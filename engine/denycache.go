package engine

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// denyCache remembers the store's refusals until their RetryAfter, so that
// a subject hammering a budget it has used up costs no store call until
// the budget could admit it again. Nothing anyone else does can make a
// budget come back sooner, so a cached refusal is the store's answer,
// reported as of now; it answers only the same cost under the same limit.
// Only refusals whose Remaining cannot change before RetryAfter are
// cached: those of cost 1, and any of a fixed window (a sliding counter's
// Remaining grows before RetryAfter for costs above 1). A group refused by
// one of its limits is remembered as that limit's refusal, with the
// group's decisions: until its RetryAfter the group is refused without a
// store call, the refusing limit's decision exact (it is the one RateLimit
// reports) and the others' as the store last reported them.
//
// It is sharded and bounded: when a shard is full, an entry that ends
// first among a few is evicted.
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
// group (empty tag) is not the same subject's state in another group. Long
// parts are held as digests, so that the cache's bound, a number of
// entries, bounds its bytes too (see [algo.StateKey]).
type denyKey = algo.StateKey

// denyKeyOf returns the deny cache's key of a request.
func denyKeyOf(req *algo.Request) denyKey { return algo.StateKeyOf(req) }

type denyEntry struct {
	until time.Time // refused until
	at    time.Time // when the store refused
	cost  int64     // the refused cost; other costs still ask the store
	d     algo.Decision
	group []algo.Decision // the whole group's decisions, for a group refusal
	keys  []denyKey       // the group's requests, in order: it answers only them
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
	d, _, _, ok := c.getGroup(req, now)
	return d, ok
}

// getGroup is get that also returns the group snapshot and its requests'
// keys (nil for a single request's refusal).
func (c *denyCache) getGroup(req algo.Request, now time.Time) (algo.Decision, []algo.Decision, []denyKey, bool) {
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
		return algo.Decision{}, nil, nil, false
	}
	// Nothing anyone else does can make the budget come back sooner, so
	// the refusal stands; report it as of now. Remaining is unchanged.
	d := e.d
	d.RetryAfter = e.until.Sub(now)
	d.ResetAfter = max(d.RetryAfter, d.ResetAfter-now.Sub(e.at))
	return d, e.group, e.keys, true
}

func (c *denyCache) put(req algo.Request, d algo.Decision, now time.Time) {
	c.putGroup(req, d, now, nil, nil)
}

func (c *denyCache) putGroup(req algo.Request, d algo.Decision, now time.Time, group []algo.Decision, keys []denyKey) {
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
	sh.m[k] = denyEntry{until: now.Add(d.RetryAfter), at: now, cost: req.Cost, d: d, group: group, keys: keys}
}

// cacheable reports whether d, the store's refusal of req, holds as it is
// until its RetryAfter (see denyCache).
func cacheable(req *tollgate.Request, d *tollgate.Decision) bool {
	return !d.Allowed && d.RetryAfter > 0 && (req.Cost == 1 || req.Limit.Algorithm == algo.FixedWindow)
}

// lookup answers reqs from the cache: a single request by its own
// refusal, a group by the refusal of any of its requests remembered with
// this very group (the same requests in the same order: another group
// that shares the refused request holds other budgets, whose decisions
// the snapshot does not know).
func (c *denyCache) lookup(reqs []tollgate.Request, now time.Time) ([]tollgate.Decision, bool) {
	if len(reqs) == 1 && reqs[0].Tag == "" {
		if reqs[0].Cost <= 0 {
			return nil, false
		}
		d, ok := c.get(reqs[0], now)
		if !ok {
			return nil, false
		}
		return []tollgate.Decision{d}, true
	}
	for i, r := range reqs {
		if r.Cost <= 0 {
			continue
		}
		if d, snap, keys, ok := c.getGroup(r, now); ok && sameGroup(keys, reqs) {
			ds := append([]tollgate.Decision(nil), snap...)
			ds[i] = d
			return ds, true
		}
	}
	return nil, false
}

// remember caches the store's decisions ds of reqs if they refuse in a
// way that holds (cacheable): a group under its longest such refusal.
func (c *denyCache) remember(reqs []tollgate.Request, ds []tollgate.Decision, now time.Time) {
	if len(reqs) == 1 && reqs[0].Tag == "" {
		if cacheable(&reqs[0], &ds[0]) {
			c.put(reqs[0], ds[0], now)
		}
		return
	}
	if tollgate.Admitted(ds) {
		return
	}
	if worst := longestCacheable(reqs, ds); worst >= 0 {
		keys := make([]denyKey, len(reqs))
		for i := range reqs {
			keys[i] = denyKeyOf(&reqs[i])
		}
		c.putGroup(reqs[worst], ds[worst], now, ds, keys)
	}
}

// longestCacheable is the index of the cacheable refusal of ds that
// lasts longest, or -1 for none.
func longestCacheable(reqs []tollgate.Request, ds []tollgate.Decision) int {
	worst := -1
	for i := range ds {
		if cacheable(&reqs[i], &ds[i]) && (worst < 0 || ds[i].RetryAfter > ds[worst].RetryAfter) {
			worst = i
		}
	}
	return worst
}

// sameGroup reports whether keys are the keys of reqs, in order.
func sameGroup(keys []denyKey, reqs []tollgate.Request) bool {
	if len(keys) != len(reqs) {
		return false
	}
	for i := range reqs {
		if keys[i] != denyKeyOf(&reqs[i]) {
			return false
		}
	}
	return true
}

// forget drops the refusals remembered for req's key.
func (c *denyCache) forget(req *tollgate.Request) {
	sh := c.shard(req.Subject)
	k := denyKeyOf(req)
	sh.mu.Lock()
	delete(sh.m, k)
	sh.mu.Unlock()
}
