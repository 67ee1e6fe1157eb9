package memory

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
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

// Pseudo-algorithms that keep the login guard's and the leases' state,
// and the ids of a group's settled reservations, in the same shards.
const (
	lockoutKind algo.Algorithm = 250
	leaseKind   algo.Algorithm = 251
	settleKind  algo.Algorithm = 252
)

// inlineKey is how many bytes of its key an entry holds in place; longer
// keys live in the entry's ext, and longKey in klen marks them.
const (
	inlineKey = 41
	longKey   = 0xff
)

// An entry is one key's state: 128 bytes, the key included, so that a
// decision reads one block of memory besides the table. Its mutex guards
// every field but idx; hash changes only under the shard lock as well.
// Entries are found without the shard lock (see [shard]), so whoever locks
// an entry must check that it is still live and still holds the key looked
// for.
type entry struct {
	mu       sync.Mutex
	hash     uint64
	expire   int64 // ms; the state is fresh from then on
	st       algo.State
	ext      *entryExt
	idx      uint32 // index in the store's slab; set once
	flags    uint8  // entryLive, entryGhost, entryHeld, entrySlot
	logShift uint8  // the sliding log's capacity charged: 1<<logShift entries, 0 for none
	klen     uint8
	kin      [inlineKey]byte
}

// Entry flags.
const (
	// entryLive: in its shard's table; unset once deleted.
	entryLive = 1 << iota
	// entryGhost: swept, not a key any more (see Store.ghost), but still in
	// the table.
	entryGhost
	// entryHeld: a decision refused, or left nothing remaining, since the
	// state was last fresh, so the state holds a refusal and is never
	// evicted before it expires.
	entryHeld
	// entrySlot: an overflow slot (see overflow.go), never evicted and not
	// counted as a key.
	entrySlot
)

func (e *entry) live() bool  { return e.flags&entryLive != 0 }
func (e *entry) ghost() bool { return e.flags&entryGhost != 0 }

// entryExt holds an entry's rarely used parts.
type entryExt struct {
	key      string           // the key, when longer than inlineKey
	leases   map[string]int64 // leases: id -> expiry (ms)
	leaseMax int              // most leases the map has held (maps do not shrink)
	leaseIDs int64            // bytes of the ids of the leases held
}

// is reports whether e holds the key with bytes kb.
func (e *entry) is(kb []byte) bool {
	if len(kb) <= inlineKey {
		return int(e.klen) == len(kb) && string(e.kin[:len(kb)]) == string(kb)
	}
	return e.klen == longKey && e.ext.key == string(kb)
}

// kind returns the algorithm or pseudo-algorithm of e's key (its first
// byte), or 0 for a free entry.
func (e *entry) kind() algo.Algorithm {
	switch {
	case e.klen == longKey:
		return algo.Algorithm(e.ext.key[0])
	case e.klen > 0:
		return algo.Algorithm(e.kin[0])
	}
	return 0
}

// reset makes e a fresh entry for the key with bytes kb, with hash h, not
// yet live. The caller accounts for the bytes e no longer holds.
func (e *entry) reset(h uint64, kb []byte) {
	e.hash, e.expire, e.st, e.ext, e.flags, e.logShift = h, 0, algo.State{}, nil, 0, 0
	if len(kb) <= inlineKey {
		e.klen = uint8(copy(e.kin[:], kb))
	} else {
		e.klen = longKey
		e.ext = &entryExt{key: string(kb)}
	}
}

// A slab is the store's entries, in chunks that never move, so that an
// entry's address stays valid for readers without the shard lock.
type slab struct {
	chunks []*[chunkSize]entry
}

const chunkSize = 256

// at returns the entry with index idx, or nil if the slab has none.
func (sl *slab) at(idx uint32) *entry {
	if c := int(idx / chunkSize); c < len(sl.chunks) {
		return &sl.chunks[c][idx%chunkSize]
	}
	return nil
}

// entrySlab hands out the entries of all shards from one slab, lowest free
// index first, so that the live entries stay packed at its bottom (and in
// the order they were added), and the sweep can let go of empty chunks at
// its top. Its lock is taken after any shard or entry lock.
type entrySlab struct {
	dir  atomic.Pointer[slab]
	_    [56]byte // keep dir, read by every decision, off the lock's cache line
	mu   sync.Mutex
	n    int      // entry indexes handed out so far
	free []uint64 // bitmap of the free indexes below n
	low  int      // no word of free below low has a bit set
	used []bool   // by chunk: whether an entry was handed out since the last trim
	_    [64]byte // keep the counters that follow off this cache line
}

// alloc returns an unused entry, the one with the lowest free index.
func (es *entrySlab) alloc() *entry {
	es.mu.Lock()
	defer es.mu.Unlock()
	for w := es.low; w < len(es.free); w++ {
		if b := es.free[w]; b != 0 {
			es.low = w
			idx := w*64 + bits.TrailingZeros64(b)
			es.free[w] &^= 1 << (idx % 64)
			es.used[idx/chunkSize] = true
			return es.dir.Load().at(uint32(idx))
		}
	}
	es.low = len(es.free)
	idx := es.n
	es.n++
	if idx/64 == len(es.free) {
		es.free = append(es.free, 0)
	}
	sl := es.dir.Load()
	if idx/chunkSize == len(sl.chunks) {
		c := new([chunkSize]entry)
		for i := range c {
			c[i].idx = uint32(idx + i)
		}
		sl = &slab{chunks: append(sl.chunks[:len(sl.chunks):len(sl.chunks)], c)}
		es.dir.Store(sl)
		es.used = append(es.used, false)
	}
	es.used[idx/chunkSize] = true
	return sl.at(uint32(idx))
}

// release makes the deleted entry e free for reuse. The caller holds e.mu.
func (es *entrySlab) release(e *entry) {
	e.reset(0, nil) // let go of what it points to
	w := int(e.idx / 64)
	es.mu.Lock()
	es.free[w] |= 1 << (e.idx % 64)
	es.low = min(es.low, w)
	es.mu.Unlock()
}

// trim lets go of the chunk at the top of the slab while its entries are
// all free and none was handed out since the last trim: keys that expire
// and come back within a sweep interval reuse their chunks.
func (es *entrySlab) trim() {
	es.mu.Lock()
	defer es.mu.Unlock()
	defer clear(es.used)
	for es.n > 0 && !es.used[len(es.used)-1] {
		base := (es.n - 1) / chunkSize * chunkSize
		for i := base; i < es.n; i++ {
			if es.free[i/64]&(1<<(i%64)) == 0 {
				return
			}
		}
		clear(es.free[base/64:])
		es.free = es.free[:base/64]
		es.n = base
		es.low = min(es.low, len(es.free))
		es.used = es.used[:len(es.used)-1]
		sl := es.dir.Load()
		es.dir.Store(&slab{chunks: sl.chunks[: len(sl.chunks)-1 : len(sl.chunks)-1]})
	}
}
