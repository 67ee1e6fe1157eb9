package redis

import (
	"context"

	"github.com/tollgate/tollgate/algo"
)

// KeySlot exposes keySlot to the tests.
var KeySlot = keySlot

// MaxCalls returns how many script calls one lane runs at once.
func MaxCalls() int { return maxCalls }

// Busy returns how many script calls the store's standalone lane is
// running (its callers' own and its flushers').
func (s *Store) Busy() int {
	ln := &s.batch.whole
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.busy
}

// DecideBatch decides reqs (valid, on Redis' clock, all in one slot) as one
// batch, as a flusher would, and returns each request's decision or error.
func (s *Store) DecideBatch(ctx context.Context, reqs []algo.Request) ([]algo.Decision, []error) {
	batch := make([]*pending, len(reqs))
	for i, r := range reqs {
		batch[i] = &pending{ctx: ctx, alg: r.Limit.Algorithm, key: KeyFor(r), args: requestArgs(r, "", "0"), res: make(chan outcome, 1)}
	}
	s.send(batch)
	ds, errs := make([]algo.Decision, len(reqs)), make([]error, len(reqs))
	for i, p := range batch {
		o := <-p.res
		if errs[i] = o.err; o.err == nil {
			v := o.vals
			ds[i] = algo.Result{Allowed: v[0] == 1, Limit: reqs[i].Limit.Capacity(), Remaining: v[1], ResetAfter: v[2], RetryAfter: v[3], Delay: v[4]}.Decision()
		}
	}
	return ds, errs
}
