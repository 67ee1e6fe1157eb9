package memory

import (
	"time"

	"github.com/tollgate/tollgate/algo"
)

// ghost drops the key of the live entry e, whose lock the caller holds,
// as deleting it would, but leaves e in the table: if the key comes back
// before the next sweep, e is revived, without the shard lock, instead of
// a new entry being added. The sweep after that deletes the ghosts left.
// A ghost is not a key: it is not counted, its state is gone, and finding
// it is finding nothing. It is charged only its entry (and a long key).
func (s *Store) ghost(e *entry) {
	before := e.bytes()
	e.flags = e.flags&^entryHeld | entryGhost
	e.st = algo.State{}
	e.logShift = 0
	if e.ext != nil {
		e.ext.leases, e.ext.leaseMax, e.ext.leaseIDs = nil, 0, 0
	}
	s.bytes.Add(e.bytes() - before)
	if e.flags&entrySlot == 0 {
		s.keys.Add(-1)
		s.expired.Add(1)
	}
}

// sweepSlots is how many slots of a shard's table the sweep visits per
// hold of the shard's lock: a new key waits for at most that many.
const sweepSlots = 256

// Sweep drops every expired key now, a batch of slots at a time. The
// background sweep calls it.
func (s *Store) Sweep() {
	ms := s.now().UnixMilli()
	for i := range s.shards {
		s.sweepShard(&s.shards[i], ms)
	}
	s.ents.trim()
}

// sweepShard makes sh's expired keys ghosts and deletes the ghosts left by
// the last sweep, taking sh.mu for sweepSlots slots at a time; then it
// shrinks sh's table if it is nearly empty. It skips entries in use: the
// next sweep will see them.
func (s *Store) sweepShard(sh *shard, ms int64) {
	for i := 0; ; {
		sh.mu.Lock()
		t := sh.tab.Load()
		if i >= len(t.slots) {
			s.shrink(sh, t)
			sh.mu.Unlock()
			return
		}
		var visited int
		i, visited = s.sweepSlots(sh, t, i, ms)
		sh.mu.Unlock()
		if s.sweepBatch != nil {
			s.sweepBatch(visited)
		}
	}
}

// shrink halves sh's table t while it is at most a sixteenth full, down
// to minSlots. The caller holds sh.mu.
func (s *Store) shrink(sh *shard, t *table) {
	size := len(t.slots)
	for size > minSlots && 16*(sh.live+1) <= size {
		size /= 2
	}
	if size < len(t.slots) {
		s.rehash(sh, size)
	}
}

// sweepSlots sweeps up to sweepSlots occupied slots of sh's table t from
// slot i, and returns the slot it stopped at and how many it visited.
// The caller holds sh.mu.
func (s *Store) sweepSlots(sh *shard, t *table, i int, ms int64) (next, visited int) {
	sl := s.ents.dir.Load()
	for ; visited < sweepSlots && i < len(t.slots); visited++ {
		v := t.slots[i].Load()
		if v == slotEmpty {
			i++
			continue
		}
		e := sl.at(uint32(v) - 2)
		if !e.mu.TryLock() {
			i++
			continue
		}
		switch {
		case e.ghost():
			s.drop(sh, t, uint64(i), e)
			e.mu.Unlock()
			continue // slot i may hold another entry now
		case e.expire <= ms && !e.leased(ms):
			s.ghost(e)
		}
		e.mu.Unlock()
		i++
	}
	return i, visited
}

func (s *Store) sweepLoop(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}
