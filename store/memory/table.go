package memory

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/algo"
)

// A table is an open-addressing hash table, probed linearly, of references
// to a shard's entries. A slot is 8 bytes so that the tables, the one part
// of a decision read in no particular order, stay small enough to be
// cached: slotEmpty, or the high 32 bits of the key's hash and the entry's
// slab index plus 2. Tables are read without locks, so slots are atomic;
// they are written under the shard lock, and a table is replaced, never
// resized in place. Deleting moves the entries after a deleted slot back
// (see removeAt), so a table holds no tombstones and never needs cleaning.
type table struct {
	slots []atomic.Uint64
	mask  uint64
}

const (
	slotEmpty = 0
	minSlots  = 8
	slotBytes = 8
)

// newTable returns an empty table of size slots and charges s for it.
func (s *Store) newTable(size int) *table {
	s.bytes.Add(int64(size) * slotBytes)
	return &table{slots: make([]atomic.Uint64, size), mask: uint64(size - 1)}
}

// slotOf returns the slot value of the entry with index idx and hash h.
func slotOf(h uint64, idx uint32) uint64 { return h>>32<<32 | uint64(idx+2) }

// full reports whether a table of size slots with n of them in use is too
// full to take one more: at most 13/16, which keeps probes within a cache
// line or two.
func full(n, size int) bool { return 16*(n+1) > 13*size }

// A shard holds the keys of the groups that hash to it. A decision for a
// key the shard already holds takes only that entry's lock: the table is
// probed without the shard lock and the entry then checked under its own.
// The shard lock serializes changes (new keys, the sweep, the table's
// growth) and decisions over several keys at once. Whoever holds both
// locks took the shard lock first.
type shard struct {
	tab   atomic.Pointer[table]
	_     [56]byte // keep tab, read by every decision, off the lock's cache line
	mu    sync.Mutex
	live  int          // entries in the table
	slots atomic.Int32 // overflow slots in the table; read without sh.mu
	_     [44]byte     // keep shards on separate cache lines
}

// find returns the live entry for key k with hash h, locked, or nil.
// Without sh.mu it may miss a key being added or moved; under sh.mu it
// finds every key.
func (s *Store) find(sh *shard, h uint64, k []byte) *entry {
	t := sh.tab.Load()
	return s.findIn(t, t.slots[h&t.mask].Load(), h, k)
}

// findIn is find in table t, whose first slot for h was read as v.
func (s *Store) findIn(t *table, v, h uint64, k []byte) *entry {
	tag := h >> 32
	for i := h & t.mask; v != slotEmpty; i = (i + 1) & t.mask {
		if v>>32 == tag {
			if e := s.ents.dir.Load().at(uint32(v) - 2); e != nil {
				e.mu.Lock()
				if e.live() && e.hash == h && e.is(k) {
					return e
				}
				e.mu.Unlock()
			}
		}
		v = t.slots[(i+1)&t.mask].Load()
	}
	return nil
}

// findLocked is find under sh.mu, which the caller holds with the locks
// of the entries in held: it skips those, and locks no entry but the one
// it returns (it compares hashes first, which sh.mu guards too).
func (s *Store) findLocked(sh *shard, h uint64, k []byte, held ...*entry) *entry {
	t := sh.tab.Load()
	sl := s.ents.dir.Load()
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i].Load()
		if v == slotEmpty {
			return nil
		}
		if v>>32 != h>>32 {
			continue
		}
		e := sl.at(uint32(v) - 2)
		if e.hash != h || slices.Contains(held, e) {
			continue
		}
		e.mu.Lock()
		if e.live() && e.is(k) {
			return e
		}
		e.mu.Unlock()
	}
}

// insert adds an entry for key k with hash h, which sh does not hold, and
// returns it locked. The caller holds sh.mu and has reserved the entry's
// bytes (see Store.room), and the key if it is one; insert charges only
// the growth of the table, which room has made room for.
func (s *Store) insert(sh *shard, h uint64, k []byte) *entry {
	t := sh.tab.Load()
	if full(sh.live, len(t.slots)) {
		t = s.rehash(sh, 2*len(t.slots))
	}
	e := s.ents.alloc()
	e.mu.Lock()
	e.reset(h, k)
	e.flags = entryLive
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == slotEmpty {
			sh.live++
			t.slots[i].Store(slotOf(h, e.idx))
			return e
		}
	}
}

// rehash replaces sh's table by one of size slots, charging the
// difference, and returns it. The caller holds sh.mu.
func (s *Store) rehash(sh *shard, size int) *table {
	old, t := sh.tab.Load(), s.newTable(size)
	s.bytes.Add(-int64(len(old.slots)) * slotBytes)
	for i := range old.slots {
		v := old.slots[i].Load()
		if v == slotEmpty {
			continue
		}
		e := s.ents.dir.Load().at(uint32(v) - 2)
		for j := e.hash & t.mask; ; j = (j + 1) & t.mask {
			if t.slots[j].Load() == slotEmpty {
				t.slots[j].Store(v)
				break
			}
		}
	}
	sh.tab.Store(t)
	return t
}

// removeAt takes e, in slot i of t, out of sh's table, moving back the
// entries after it that a probe would otherwise no longer reach (deletion
// without tombstones, for linear probing). A reader without sh.mu may miss
// an entry being moved; it then looks again under sh.mu, as for a key
// being added. The caller holds sh.mu and e.mu.
func (s *Store) removeAt(sh *shard, t *table, i uint64, e *entry) {
	sl := s.ents.dir.Load()
	for j := (i + 1) & t.mask; ; j = (j + 1) & t.mask {
		v := t.slots[j].Load()
		if v == slotEmpty {
			break
		}
		// The entry in j may fill the hole at i if its home slot is not
		// in (i, j]: a probe from its home passes i before reaching j.
		home := sl.at(uint32(v)-2).hash & t.mask
		if (j-home)&t.mask >= (j-i)&t.mask {
			t.slots[i].Store(v)
			i = j
		}
	}
	t.slots[i].Store(slotEmpty)
	e.flags &^= entryLive
	sh.live--
}

// A key names one state: an algorithm (or pseudo-algorithm), a name, a
// tag (empty when it is the subject) and a subject. Its bytes are the
// algorithm, then the name and the tag, each length-prefixed so that no
// two different keys share bytes, then the subject. Entries hold the bytes,
// built on the stack for lookups.
type key struct {
	alg                algo.Algorithm
	name, tag, subject string
}

// keyOf returns the key of a rate-limit request.
func keyOf(r *algo.Request) key {
	k := key{alg: r.Limit.Algorithm, name: r.Name, tag: r.Tag, subject: r.Subject}
	if k.tag == k.subject {
		k.tag = ""
	}
	return k
}

// appendTo appends the key's bytes to b.
func (k *key) appendTo(b []byte) []byte {
	b = algo.AppendKeyPrefix(b, k.alg, k.name)
	b = binary.AppendUvarint(b, uint64(len(k.tag)))
	b = append(b, k.tag...)
	return append(b, k.subject...)
}

// hashes returns the hash of key k and the shard of its group. The
// requests of one group share a shard so that [Store.AllowAll] can decide
// them under one lock. A key without a tag hashes as its subject's hash
// (which also picks the shard, by its top bits) xor the hash of its
// prefix ([algo.AppendKeyPrefix]).
func (s *Store) hashes(k *key) (uint64, *shard) {
	if k.tag == "" {
		hg := maphash.String(s.seed, k.subject)
		var buf [64]byte
		ph := maphash.Bytes(s.seed, algo.AppendKeyPrefix(buf[:0], k.alg, k.name))
		return hg ^ ph, &s.shards[hg>>s.shift]
	}
	var buf [96]byte
	h := maphash.Bytes(s.seed, k.appendTo(buf[:0]))
	return h, &s.shards[maphash.String(s.seed, k.tag)>>s.shift]
}

// Pseudo-algorithms that keep the login guard's and the leases' state in
// the same shards.
const (
	lockoutKind algo.Algorithm = 250
	leaseKind   algo.Algorithm = 251
)
