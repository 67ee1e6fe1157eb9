package memory

import (
	"hash/maphash"

	"github.com/tollgate/tollgate/algo"
)

// limitCache is how many prepared limits, and how many policies, a store
// keeps.
const (
	limitBits  = 6
	limitCache = 1 << limitBits
)

// prepared is a limit and its prepared form.
type prepared struct {
	l  algo.Limit
	pl algo.Prepared
}

// prepare returns l prepared, from a cache of the limits in use (a store
// usually sees few distinct limits, and preparing one costs as much as
// deciding), or else prepared into tmp. The cache takes a limit only into
// a free place of two, and the sweep empties it, so that it follows the
// limits in use without ever allocating on each decision.
func (s *Store) prepare(l *algo.Limit, tmp *algo.Prepared) (*algo.Prepared, error) {
	h := uint64(l.Rate) ^ uint64(l.Period)<<3 ^ uint64(l.Burst)<<17 ^ uint64(l.MaxDelay)<<29 ^ uint64(l.Algorithm)<<59
	i := h * 0x9e3779b97f4a7c15 >> (64 - limitBits)
	for _, j := range [2]uint64{i, (i + 1) % limitCache} {
		c := s.limits[j].Load()
		if c == nil {
			pl, err := l.Prepare()
			if err != nil {
				return nil, err
			}
			c = &prepared{l: *l, pl: pl}
			s.limits[j].CompareAndSwap(nil, c)
			return &c.pl, nil
		}
		if sameLimit(&c.l, l) {
			return &c.pl, nil
		}
	}
	var err error
	*tmp, err = l.Prepare()
	return tmp, err
}

// sameLimit reports whether *a == *b, without a call.
func sameLimit(a, b *algo.Limit) bool {
	return a.Rate == b.Rate && a.Period == b.Period && a.Algorithm == b.Algorithm && a.Burst == b.Burst &&
		a.MaxDelay == b.MaxDelay && a.Calendar == b.Calendar && a.Zone == b.Zone
}

// A policyEntry caches, for a policy and algorithm, the hash of the keys'
// prefix and the limit last prepared for them.
type policyEntry struct {
	policy string
	alg    algo.Algorithm
	ph     uint64 // hash of the prefix of keys without a tag
	prefix string // their bytes but the subject
	limit  algo.Limit
	pl     algo.Prepared
}

// policySlot returns the first of the two places in the policy cache
// where k's policy and algorithm may be.
func policySlot(k *key) uint64 {
	h := uint64(len(k.policy)) ^ uint64(k.alg)<<8
	if len(k.policy) > 0 {
		h ^= uint64(k.policy[0])<<16 ^ uint64(k.policy[len(k.policy)-1])<<24
	}
	return h * 0x9e3779b97f4a7c15 >> (64 - limitBits)
}

// policy returns the cache entry of k's policy and algorithm, or nil if
// there is none or k has a tag. Like the limits, the policies are emptied
// by the sweep.
func (s *Store) policy(k *key) *policyEntry {
	if k.tag != "" {
		return nil
	}
	i := policySlot(k)
	if c := s.policies[i].Load(); c == nil || c.alg == k.alg && c.policy == k.policy {
		return c
	}
	return s.policyAt((i+1)%limitCache, k)
}

// policyAt returns the policy cache entry at i if it is k's.
func (s *Store) policyAt(i uint64, k *key) *policyEntry {
	if c := s.policies[i].Load(); c != nil && c.alg == k.alg && c.policy == k.policy {
		return c
	}
	return nil
}

// cachePolicy adds k's policy and algorithm, with limit l, to the cache if
// it has a free place for them. k has no tag.
func (s *Store) cachePolicy(k *key, l *algo.Limit) {
	i := policySlot(k)
	if s.policies[i].Load() != nil && s.policies[(i+1)%limitCache].Load() != nil {
		return // no place: do not allocate
	}
	pl, err := l.Prepare()
	if err != nil {
		return
	}
	var buf [64]byte
	pre := append(appendPrefix(buf[:0], k.alg, k.policy), 0) // no tag
	// The entry keeps the caller's string, often the very one later requests
	// carry, which compares fastest; the sweep lets go of it.
	c := &policyEntry{policy: k.policy, alg: k.alg, limit: *l, pl: pl,
		prefix: string(pre), ph: maphash.Bytes(s.seed, pre[:len(pre)-1])}
	for _, j := range [2]uint64{i, (i + 1) % limitCache} {
		if s.policies[j].CompareAndSwap(nil, c) {
			return
		}
	}
}
