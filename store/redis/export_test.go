package redis

import (
	"context"

	"github.com/redis/rueidis"

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
		batch[i] = &pending{ctx: ctx, key: KeyFor(r), res: make(chan outcome, 1)}
		appendRequest(batch[i].packed[:0], r)
	}
	s.send(batch)
	ds, errs := make([]algo.Decision, len(reqs)), make([]error, len(reqs))
	for i, p := range batch {
		o := <-p.res
		if errs[i] = o.err; o.err == nil {
			ds[i] = o.decision(reqs[i].Limit)
		}
	}
	return ds, errs
}

// DecideAt decides reqs (valid, all at reqs[0].Now, all in one slot) in
// one call of decide.lua, as the store decides a request that carries its
// time, and returns each request's decision or error: what k such
// requests made one after another would leave, in one round trip.
func (s *Store) DecideAt(ctx context.Context, reqs []algo.Request) ([]algo.Decision, []error, error) {
	now, slack, err := timeArgs(reqs[0].Now)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.conn()
	if err != nil {
		return nil, nil, err
	}
	keys := make([]string, len(reqs))
	var packed []byte
	for i, r := range reqs {
		keys[i] = KeyFor(r)
		packed = appendRequest(packed, r)
	}
	outs, err := outcomes(s.exec(ctx, c, s.decide, keys, []string{now, slack, string(packed)}), len(reqs))
	if err != nil {
		return nil, nil, err
	}
	ds, errs := make([]algo.Decision, len(reqs)), make([]error, len(reqs))
	for i, o := range outs {
		if errs[i] = o.err; o.err == nil {
			ds[i] = o.decision(reqs[i].Limit)
		}
	}
	return ds, errs, nil
}

// Pack returns reqs packed as the scripts' third argument.
func Pack(reqs ...algo.Request) string {
	var b []byte
	for _, r := range reqs {
		b = appendRequest(b, r)
	}
	return string(b)
}

// LibrarySource returns the function library's source.
func LibrarySource() (string, error) {
	l, err := newLibrary()
	if err != nil {
		return "", err
	}
	return l.src, nil
}

// The key builders, for the tests of the key layout.
var (
	SafeTag  = safeTag
	SafeName = safeName
	HeldKey  = heldKey
	LockKeys = lockKeys
	LeaseKey = leaseKey
	// SettledKey is the key of a settled reservation's marker.
	SettledKey = settledKey
)

// Outcomes decodes a script's answer to k requests under l: each one's
// decision or error.
func Outcomes(res rueidis.RedisResult, l algo.Limit, k int) ([]algo.Decision, []error, error) {
	outs, err := outcomes(res, k)
	if err != nil {
		return nil, nil, err
	}
	ds, errs := make([]algo.Decision, k), make([]error, k)
	for i, o := range outs {
		if errs[i] = o.err; o.err == nil {
			ds[i] = o.decision(l)
		}
	}
	return ds, errs, nil
}

// SettleBatch settles sts (on Redis' clock, all in one slot) as one
// batch, as a flusher would, and returns each one's answer or error.
func (s *Store) SettleBatch(ctx context.Context, sts []algo.Settlement) ([]algo.Settled, []error) {
	batch := make([]*pending, len(sts))
	outs, errs := make([]algo.Settled, len(sts)), make([]error, len(sts))
	for i, st := range sts {
		sc, err := newSettleCall(st)
		if err != nil {
			panic(err)
		}
		batch[i] = &pending{ctx: ctx, key: sc.keys[0], settle: sc, res: make(chan outcome, 1)}
	}
	s.send(batch)
	for i, p := range batch {
		errs[i] = (<-p.res).err
		outs[i] = p.settle.out
	}
	return outs, errs
}
