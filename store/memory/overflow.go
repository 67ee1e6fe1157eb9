package memory

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/tollgate/tollgate/algo"
)

// Overflow slots decide new subjects when their shard has no room and
// nothing it may evict (see the package documentation). A slot is an entry
// like any other, flagged entrySlot, in the shard of the subjects it
// decides, so that deciding in it takes no other lock; its key cannot be a
// request's, whose first byte is an algorithm.
//
// A key's slot is named by the key's kind, name and tag, its limit (for
// a rate limit: a state means something only under its limit) and a
// number from its subject's hash. A new key whose slot holds state starts
// from that state, so a subject decided in its slot regains nothing when
// room is made for it later.
const (
	// slotMark is the first byte of a slot's key.
	slotMark = 0xfe
	// A shard holds minShardSlots to maxShardSlots slots: see
	// maxSlotsPerShard.
	minShardSlots = 16
	maxShardSlots = 4096
	// A shard has up to maxSlotWays slots for one kind, name, tag and
	// limit: see Store.slotWays.
	maxSlotWays = 16
)

// maxSlotsPerShard returns how many overflow slots each of n shards may
// hold: an eighth of maxBytes' worth, within [minShardSlots,
// maxShardSlots]. Past that a new key with no slot gets ErrFull.
func maxSlotsPerShard(maxBytes int64, n int) int32 {
	if maxBytes < 0 {
		return maxShardSlots
	}
	return int32(min(max(maxBytes/8/int64(n)/entryBytes, minShardSlots), maxShardSlots))
}

// slotWaysFor returns how many slots a shard has for one kind, name, tag
// and limit when it may hold maxSlots: 16 but in small stores, so that a
// shard has slots for 16 of them at least.
func slotWaysFor(maxSlots int32) uint64 {
	return uint64(min(max(maxSlots/16, 1), maxSlotWays))
}

// limitFP returns a fingerprint of l for slot keys.
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

// slotKey returns the key of the overflow slot of the key of kind alg,
// name, tag and subject, whose limit's fingerprint is fp (0 for a login
// guard's or a lease's key: their states mean the same under any rule).
func (s *Store) slotKey(alg algo.Algorithm, name, tag, subject string, fp int64) []byte {
	b := make([]byte, 0, 24+len(name)+len(tag))
	b = append(b, slotMark)
	b = algo.AppendKeyPrefix(b, alg, name)
	b = binary.AppendUvarint(b, uint64(len(tag)))
	b = append(b, tag...)
	b = binary.LittleEndian.AppendUint64(b, uint64(fp))
	return append(b, byte(maphash.String(s.seed, subject)%s.slotWays))
}

// findSlot returns the overflow slot with key sk in sh, locked, live or a
// ghost, or nil. The caller holds sh.mu and the locks of held.
func (s *Store) findSlot(sh *shard, sk []byte, held ...*entry) *entry {
	return s.findLocked(sh, maphash.Bytes(s.seed, sk), sk, held...)
}

// newSlot adds the overflow slot with key sk, which sh does not hold, and
// returns it locked, or nil if sh holds s.maxSlots slots already. A slot
// is charged but takes no room: it is made when there is none. The caller
// holds sh.mu.
func (s *Store) newSlot(sh *shard, sk []byte) *entry {
	if sh.slots.Load() >= s.maxSlots {
		return nil
	}
	s.bytes.Add(newEntryBytes(len(sk), 0))
	e := s.insert(sh, maphash.Bytes(s.seed, sk), sk)
	e.flags |= entrySlot
	sh.slots.Add(1)
	return e
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
