package memory

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/tollgate/tollgate/algo"
)

// Overflow slots hold the state of keys the store has no room for (see the
// package documentation): the state of evicted keys, merged, and the
// decisions for new keys when no room can be made. A slot is an entry like
// any other, flagged entrySlot, in the shard of the subjects it stands
// for, so that using it takes no other lock; its key cannot be a
// request's, whose first byte is an algorithm.
//
// A key's slot is named by the key's kind, policy and tag, its limit (for
// a rate limit: a state means something only under its limit) and a
// number from its subject's hash. A new key whose slot holds state starts
// from that state, so a subject whose key was evicted, or decided in its
// slot, regains nothing.
const (
	// slotMark is the first byte of a slot's key.
	slotMark = 0xfe
	// A shard holds minShardSlots to maxShardSlots slots made by
	// evictions, and as many again made by decisions: see
	// maxSlotsPerShard.
	minShardSlots = 64
	maxShardSlots = 4096
	// A shard has up to maxSlotWays slots for one kind, policy, tag and
	// limit: see Store.slotWays.
	maxSlotWays = 16
)

// maxSlotsPerShard returns how many overflow slots evictions may make in
// each of n shards: an eighth of maxBytes' worth, within [minShardSlots,
// maxShardSlots]. Decisions may make as many again; past that a new key
// gets ErrFull.
func maxSlotsPerShard(maxBytes int64, n int) int32 {
	if maxBytes < 0 {
		return maxShardSlots
	}
	return int32(min(max(maxBytes/8/int64(n)/entryBytes, minShardSlots), maxShardSlots))
}

// slotWaysFor returns how many slots a shard has for one kind, policy, tag
// and limit when it may hold maxSlots: 16 but in small stores, so that a
// shard has slots for 16 of them at least.
func slotWaysFor(maxSlots int32) uint64 {
	return uint64(min(max(maxSlots/16, 1), maxSlotWays))
}

// limitFP returns a fingerprint of l, never 0. A rate-limit key keeps its
// limit's in its state's E, which the rate algorithms do not use, so that
// evicting it can name its slot.
func (s *Store) limitFP(l *algo.Limit) int64 {
	h := uint64(l.Algorithm) + 1
	for _, v := range [...]uint64{uint64(l.Rate), uint64(l.Period), uint64(l.Burst), uint64(l.MaxDelay), uint64(l.Calendar)} {
		h = (h ^ v) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	if l.Zone != nil {
		h ^= maphash.String(s.seed, l.Zone.String())
	}
	return int64(h | 1)
}

// rateKind reports whether keys of kind a hold rate-limit state (and a
// limit fingerprint).
func rateKind(a algo.Algorithm) bool { return a != lockoutKind && a != leaseKind }

// slotKey returns the key of the overflow slot of the key of kind alg,
// policy, tag and subject, whose limit's fingerprint is fp (0 for a login
// guard's or a lease's key: their states mean the same under any rule).
func (s *Store) slotKey(alg algo.Algorithm, policy, tag, subject string, fp int64) []byte {
	b := make([]byte, 0, 24+len(policy)+len(tag))
	b = append(b, slotMark)
	b = appendPrefix(b, alg, policy)
	b = binary.AppendUvarint(b, uint64(len(tag)))
	b = append(b, tag...)
	b = binary.LittleEndian.AppendUint64(b, uint64(fp))
	return append(b, byte(maphash.String(s.seed, subject)%s.slotWays))
}

// slotKeyOf returns the key of the overflow slot of e's key. The caller
// holds e.mu.
func (s *Store) slotKeyOf(e *entry) []byte {
	kb := e.kin[:min(int(e.klen), inlineKey)]
	if e.klen == longKey {
		kb = []byte(e.ext.key)
	}
	alg := algo.Algorithm(kb[0])
	n, w := binary.Uvarint(kb[1:])
	policy := kb[1+w : 1+w+int(n)]
	rest := kb[1+w+int(n):]
	n, w = binary.Uvarint(rest)
	tag, subject := rest[w:w+int(n)], rest[w+int(n):]
	var fp int64
	if rateKind(alg) {
		fp = e.st.E
	}
	return s.slotKey(alg, string(policy), string(tag), string(subject), fp)
}

// findSlot returns the overflow slot with key sk in sh, locked, live or a
// ghost, or nil. The caller holds sh.mu and the locks of held.
func (s *Store) findSlot(sh *shard, sk []byte, held ...*entry) *entry {
	return s.findLocked(sh, maphash.Bytes(s.seed, sk), sk, held...)
}

// newSlot adds the overflow slot with key sk, which sh does not hold, and
// returns it locked, or nil if sh holds most slots already: for a
// decision, 2*s.maxSlots, and else s.maxSlots. A slot is charged but
// takes no room: it is made when there is none. The caller holds sh.mu.
func (s *Store) newSlot(sh *shard, sk []byte, decision bool) *entry {
	most := s.maxSlots
	if decision {
		most *= 2
	}
	if sh.slots.Load() >= most {
		return nil
	}
	s.bytes.Add(newEntryBytes(len(sk), 0))
	e := s.insert(sh, maphash.Bytes(s.seed, sk), sk)
	e.flags |= entrySlot
	sh.slots.Add(1)
	return e
}

// slotFor returns the overflow slot with key sk in sh, locked and live,
// made if need be (for a decision or not: see newSlot), or nil if it
// cannot be made. The caller holds sh.mu and the locks of held.
func (s *Store) slotFor(sh *shard, sk []byte, decision bool, held ...*entry) *entry {
	slot := s.findSlot(sh, sk, held...)
	if slot == nil {
		return s.newSlot(sh, sk, decision)
	}
	if slot.ghost() {
		slot.flags &^= entryGhost
		slot.expire = 0
	}
	return slot
}

// inherit sets *st to a copy of the state of slot, if it is not nil and
// holds state live at ms, and returns the log capacity charged for it.
func inherit(st *algo.State, slot *entry, ms int64) uint8 {
	if slot == nil || slot.ghost() || slot.expire <= ms {
		return 0
	}
	*st = slot.st
	st.Log = st.Log.Clone()
	return slot.logShift
}

// merge merges the state of e into its overflow slot, so that the slot's
// state is at least as strict as each was, and reports whether it could:
// two sliding logs cannot be merged. Both are locked, by the caller, who
// holds sh.mu too; e is not a slot and will be dropped.
func (s *Store) merge(slot, e *entry, ms int64) bool {
	if slot.expire <= ms {
		// The slot holds nothing: it takes e's state, log and all.
		s.bytes.Add(-logBytes(slot.logShift))
		slot.st, slot.logShift, slot.expire = e.st, e.logShift, e.expire
		e.st.Log, e.logShift = nil, 0 // charged to the slot now
		return true
	}
	a, b := &slot.st, &e.st
	switch e.kind() {
	case algo.GCRA: // the later theoretical arrival time
		if b.A > a.A || b.A == a.A && b.B > a.B {
			a.A, a.B = b.A, b.B
		}
	case algo.TokenBucket: // fewer tokens, refilled from later on
		a.A, a.B = min(a.A, b.A), max(a.B, b.B)
	case algo.LeakyBucket: // a higher level, drained from later on
		a.A, a.B = max(a.A, b.A), max(a.B, b.B)
	case algo.FixedWindow: // the later window, the higher count
		switch {
		case b.A > a.A:
			a.A, a.B = b.A, b.B
		case b.A == a.A:
			a.B = max(a.B, b.B)
		}
	case algo.SlidingWindowCounter: // in the later window, the higher counts
		w := max(a.A, b.A)
		ca, pa := counts(a, w)
		cb, pb := counts(b, w)
		a.A, a.B, a.C = w, max(ca, cb), max(pa, pb)
	case lockoutKind: // more failures, later, more locks, longer
		a.A, a.B, a.C, a.D, a.E = max(a.A, b.A), max(a.B, b.B), max(a.C, b.C), max(a.D, b.D), max(a.E, b.E)
	case leaseKind:
		// e holds no live lease (it would be pinned): nothing to keep.
		return true
	default:
		return false
	}
	slot.expire = max(slot.expire, e.expire)
	return true
}

// counts returns the current and previous counts of the sliding-window
// counter state st as seen from window w >= st.A.
func counts(st *algo.State, w int64) (cur, prev int64) {
	switch st.A {
	case w:
		return st.B, st.C
	case w - 1:
		return 0, st.B
	}
	return 0, 0
}

// liveLeases returns a copy of the leases of m live at ms.
func liveLeases(m map[string]int64, ms int64) map[string]int64 {
	var live map[string]int64
	for id, exp := range m {
		if exp > ms {
			if live == nil {
				live = map[string]int64{}
			}
			live[id] = exp
		}
	}
	return live
}

// indexBytes returns the index of the first of bs equal to b, or -1.
func indexBytes(bs [][]byte, b []byte) int {
	for i, c := range bs {
		if string(c) == string(b) {
			return i
		}
	}
	return -1
}
