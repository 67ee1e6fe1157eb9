package memory

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/algo"
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
