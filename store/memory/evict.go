package memory

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/tollgate/tollgate/algo"
)

// What the store charges for its state, in bytes: what the Go allocator
// hands out for it. TestLayout checks the sizes of the types and
// TestBytesPerKey the totals against the heap.
const (
	entryBytes    = 128 // an entry, in its slab chunk
	extBytes      = 48  // an entryExt (40 bytes, in the 48-byte size class)
	logBytesFixed = 80  // an algo.Log (72 bytes, in the 80-byte size class)
	// A lease map of at most 8 leases is one 256-byte block; beyond that,
	// its groups take 26 bytes a slot, at most 7/8 of them used, plus
	// about 128 bytes of tables.
	leaseMapSmall    = 256
	leaseMapSlot     = 26
	leaseMapOverhead = 128
)

// allocBytes returns about what the Go allocator hands out for n bytes:
// n rounded up as its size classes round it (within an eighth above 256
// bytes).
func allocBytes(n int) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= 8:
		return 8
	case n <= 256:
		return int64(n+15) &^ 15
	}
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return int64((n + step - 1) / step * step)
}

// logShiftFor returns the capacity an algo.Log grows to for n entries, as
// a shift: 4 entries, doubling.
func logShiftFor(n int) uint8 {
	sh := uint8(2)
	for 1<<sh < n {
		sh++
	}
	return sh
}

// logShiftOf returns the capacity charged for log g, at least from (the
// capacity of the log g was cloned from), or 0 for no log.
func logShiftOf(g *algo.Log, from uint8) uint8 {
	if g == nil {
		return 0
	}
	return max(from, logShiftFor(g.Len()))
}

// logBytes returns the bytes of a log of capacity 1<<shift: the Log and
// its two buffers of int64.
func logBytes(shift uint8) int64 {
	if shift == 0 {
		return 0
	}
	return logBytesFixed + 2*8<<shift
}

// leaseMapBytes returns the bytes of a map that has held n leases.
func leaseMapBytes(n int) int64 {
	if n <= 8 {
		return leaseMapSmall
	}
	slots := 1 << bits.Len(uint((n*8+6)/7-1))
	return leaseMapOverhead + leaseMapSlot*int64(slots)
}

// bytes returns the bytes of x's parts.
func (x *entryExt) bytes() int64 {
	if x == nil {
		return 0
	}
	n := extBytes + allocBytes(len(x.key))
	if x.leases != nil {
		n += leaseMapBytes(x.leaseMax) + x.leaseIDs
	}
	return n
}

// bytes returns what e is charged: its entry and its variable parts.
func (e *entry) bytes() int64 { return entryBytes + logBytes(e.logShift) + e.ext.bytes() }

// newEntryBytes returns what a new entry is charged for a key of klen
// bytes and a log of capacity 1<<shift (none for 0).
func newEntryBytes(klen int, shift uint8) int64 {
	n := entryBytes + logBytes(shift)
	if klen > inlineKey {
		n += extBytes + allocBytes(klen)
	}
	return n
}

// chargeLog charges e, which the caller has locked, for its log's growth.
func (s *Store) chargeLog(e *entry) {
	if n := logShiftOf(e.st.Log, e.logShift); n != e.logShift {
		s.bytes.Add(logBytes(n) - logBytes(e.logShift))
		e.logShift = n
	}
}

// setLog charges e, which the caller has locked, for a log that replaced
// its own (a clone of one charged at from, or one grown from empty).
func (s *Store) setLog(e *entry, from uint8) {
	n := logShiftOf(e.st.Log, from)
	s.bytes.Add(logBytes(n) - logBytes(e.logShift))
	e.logShift = n
}

// leased reports whether e, which the caller has locked, holds a lease
// live at ms.
func (e *entry) leased(ms int64) bool {
	if e.ext == nil {
		return false
	}
	for _, exp := range e.ext.leases {
		if exp > ms {
			return true
		}
	}
	return false
}

// pinned reports whether e, which the caller has locked, must not be
// evicted at ms: an overflow slot, or a key with a live lease or hold, a
// state that holds a refusal, or a locked account.
func (e *entry) pinned(ms int64) bool {
	switch {
	case e.flags&entrySlot != 0 || e.leased(ms):
		return true
	case e.expire <= ms:
		return false
	case e.flags&entryHeld != 0:
		return true
	}
	return e.kind() == lockoutKind && e.st.D > ms
}

// reserve charges n bytes, and a key if key is set, if the store's bounds
// allow them, and reports whether it did; it charges nothing if not. Bytes
// that are no more than zero always fit.
func (s *Store) reserve(n int64, key bool) bool {
	if key {
		if k := s.keys.Add(1); s.maxKeys > 0 && k > s.maxKeys {
			s.keys.Add(-1)
			return false
		}
	}
	if n > 0 && s.maxBytes >= 0 {
		if s.bytes.Add(n) > s.maxBytes {
			s.bytes.Add(-n)
			if key {
				s.keys.Add(-1)
			}
			return false
		}
		return true
	}
	s.bytes.Add(n)
	return true
}

// Sampling bounds: to make room, a new key looks at no more than
// sampleSlots entries of a shard's table, and considers at most sampleKeys
// of them for eviction.
const (
	sampleSlots = 64
	sampleKeys  = 8
)

// scale returns what the share of limit l a key has spent is measured
// against: for a bucket, how long a state spent in full takes to become
// fresh (ms); for a window or a log, the number of requests it admits. A
// rate-limit key keeps it in its state's E, which the rate algorithms do
// not use.
func scale(l *algo.Limit) int64 {
	switch l.Algorithm {
	case algo.GCRA, algo.TokenBucket, algo.LeakyBucket:
		return max(l.Period.Milliseconds()*l.Capacity()/max(l.Rate, 1)+l.MaxDelay.Milliseconds(), 1)
	}
	return max(l.Rate, 1)
}

// spent returns the share of its limit e's live state has spent at ms, in
// 1/1024: about what its subject would regain if e were dropped. For a
// bucket that is the time its state takes to become fresh, for a window
// its count (the previous window's at half weight), for a log its
// entries, each against the limit's scale; for an account (whose rule the
// store does not keep), a sixteenth per failure, all once it has been
// locked. The caller holds e.mu.
func (e *entry) spent(ms int64) int64 {
	var n int64
	switch e.kind() {
	case lockoutKind:
		if e.st.C > 0 {
			return 1024
		}
		return min(1024, 64*e.st.A)
	case leaseKind, settleKind:
		return 0 // no live lease or settled id: nothing
	case algo.FixedWindow:
		n = e.st.B
	case algo.SlidingWindowCounter:
		n = e.st.B + e.st.C/2
	case algo.SlidingWindowLog:
		if e.st.Log != nil { // a key kept for a hold may have none
			n = int64(e.st.Log.Len())
		}
	default:
		n = e.expire - ms
	}
	return min(1024, n*1024/max(e.st.E, 1))
}

// A candidate is an entry that may be evicted, its shard, the share of
// its limit it has spent, and when it expires.
type candidate struct {
	e             *entry
	sh            *shard
	spent, expire int64
}

// room charges n bytes, and a key if key is set, for a new key of sh,
// making room if the store is full; if newEntry is set it also makes room
// for the growth of sh's table the key may need, and grows it. It reports
// whether it made room; if not, it charged nothing. The caller holds sh.mu
// (and the locks of entries it has found, which room neither evicts nor
// waits for).
//
// To make room it samples sh's table from a random slot, dropping the
// expired keys and ghosts it meets, which cost nothing to forget, and
// collecting the entries it may evict (those not pinned). If it finds
// fewer than sampleKeys (the bounds are the store's, and a shard may hold
// few keys), it samples another shard too, if that shard's lock is free.
// Then it evicts the entries found, those that have spent the least of
// their limits (the closest to fresh) first, until the new key fits. It
// never visits more than 2*sampleSlots entries (in 16*sampleSlots slots).
func (s *Store) room(sh *shard, ms, n int64, newEntry, key bool) bool {
	var cands []candidate
	sampled := false
	var other *shard // locked by room
	defer func() {
		if other != nil {
			other.mu.Unlock()
		}
	}()
	for {
		size := len(sh.tab.Load().slots)
		var grow int64
		if newEntry && full(sh.live, size) {
			grow = int64(size) * slotBytes
		}
		if s.reserve(n+grow, key) {
			if grow > 0 {
				s.bytes.Add(-grow) // rehash charges it
				s.rehash(sh, 2*size)
			}
			return true
		}
		if !sampled {
			sampled = true
			cands, other = s.candidates(sh, ms)
			continue
		}
		for len(cands) > 0 && !s.evict(cands[0].sh, cands[0].e, ms) {
			cands = cands[1:]
		}
		if len(cands) == 0 {
			return false
		}
		cands = cands[1:]
	}
}

// candidates samples sh, and another shard too if sh has fewer than
// sampleKeys entries it may evict and that shard's lock is free, and
// returns the entries found, those that have spent the least first, and
// the other shard it locked (nil for none). The caller holds sh.mu.
func (s *Store) candidates(sh *shard, ms int64) (cands []candidate, other *shard) {
	cands = s.sample(sh, ms, make([]candidate, 0, 2*sampleKeys))
	if len(cands) < sampleKeys && len(s.shards) > 1 {
		o := &s.shards[rand.IntN(len(s.shards)-1)] // another shard
		if o == sh {
			o = &s.shards[len(s.shards)-1]
		}
		if o.mu.TryLock() {
			other = o
			cands = s.sample(o, ms, cands)
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.spent, b.spent), cmp.Compare(a.expire, b.expire))
	})
	return cands, other
}

// sample visits the entries of sh's table from a random slot on, up to
// sampleSlots entries (and 8*sampleSlots slots), drops the expired keys
// and ghosts among them, and appends to cands up to sampleKeys entries it
// may evict. It skips entries locked by others (in use) or by the caller.
// The caller holds sh.mu.
func (s *Store) sample(sh *shard, ms int64, cands []candidate) []candidate {
	t := sh.tab.Load()
	sl := s.ents.dir.Load()
	i := rand.Uint64() & t.mask
	found, visited := 0, 0
	for slots := min(len(t.slots), 8*sampleSlots); slots > 0 && visited < sampleSlots && found < sampleKeys; slots-- {
		v := t.slots[i].Load()
		if v == slotEmpty {
			i = (i + 1) & t.mask
			continue
		}
		visited++
		e := sl.at(uint32(v) - 2)
		if !e.mu.TryLock() {
			i = (i + 1) & t.mask
			continue
		}
		switch {
		case e.flags&entrySlot != 0:
		case e.ghost():
			s.drop(sh, t, i, e)
			e.mu.Unlock()
			continue // slot i may hold another entry now
		case e.expire <= ms && !e.leased(ms):
			s.drop(sh, t, i, e)
			s.expired.Add(1)
			e.mu.Unlock()
			continue
		case !e.pinned(ms):
			cands = append(cands, candidate{e, sh, e.spent(ms), e.expire})
			found++
		}
		e.mu.Unlock()
		i = (i + 1) & t.mask
	}
	return cands
}

// evict drops e, a candidate of sample, if it is still a key that may be
// evicted, and reports whether it did. The caller holds sh.mu.
func (s *Store) evict(sh *shard, e *entry, ms int64) bool {
	if !e.mu.TryLock() {
		return false
	}
	defer e.mu.Unlock()
	if !e.live() || e.ghost() || e.pinned(ms) {
		return false
	}
	t := sh.tab.Load()
	want := slotOf(e.hash, e.idx)
	for i := e.hash & t.mask; ; i = (i + 1) & t.mask {
		switch t.slots[i].Load() {
		case want:
			s.drop(sh, t, i, e)
			s.evictions.Add(1)
			return true
		case slotEmpty:
			return false // not in sh: cannot happen
		}
	}
}

// drop deletes e, in slot i of sh's table t, and frees its entry, charging
// nothing more for it. The caller holds sh.mu and e.mu.
func (s *Store) drop(sh *shard, t *table, i uint64, e *entry) {
	switch {
	case e.flags&entrySlot != 0:
		sh.slots.Add(-1)
	case !e.ghost():
		s.keys.Add(-1)
	}
	s.bytes.Add(-e.bytes())
	s.removeAt(sh, t, i, e)
	s.ents.release(e)
}
