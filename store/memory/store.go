// Package memory is Tollgate's embedded store: rate-limit state in this
// process, decided by the same algorithms as the Redis store (package algo),
// so the two cannot disagree.
//
// Each key's state has its own lock, so decisions for different keys
// proceed in parallel; a decision for a key already held takes no other
// lock. Keys are sharded by group (the subject, or the tag), and a shard's
// lock serializes adding and dropping keys. Every key expires when its
// state becomes equivalent to a fresh key (a full bucket, an elapsed
// window); expired keys are dropped by a background sweep, which visits a
// bounded batch of a shard's slots per hold of its lock. A dropped key's
// memory is kept until the sweep after, to be reused without allocating if
// the key comes back; a decision for a key the store holds allocates
// nothing. No request sweeps.
//
// # Memory bound
//
// [Options.MaxBytes] bounds the bytes the store's state takes (and
// [Options.MaxKeys], if set, the number of keys). Each key is charged its
// 128-byte entry, and its variable parts when they change size (a key
// longer than 41 bytes, a sliding log's buffers, a lease map), never on
// each decision; the shards' tables are charged as they are allocated.
// tollgate_memory_bytes reports the total. It may exceed the bound by what
// logs grow by between new keys, and by the overflow slots below.
//
// When a new key does not fit, the store makes room with bounded work: it
// samples up to 64 entries of the new key's shard from a random slot (and
// of another shard if its own offers few), drops the expired keys it
// meets, and evicts the keys that have spent the least of their limits
// (tollgate_memory_evictions_total counts them). A subject whose key is
// evicted regains what it had spent, the least in the sample. The store
// never evicts a key whose state holds a refusal (a decision refused, or
// left nothing remaining, since it was last fresh), a locked account, or
// a key with live leases: those budgets are never reset.
//
// If the sample offers nothing to evict, the new subject is decided in one
// of a fixed number of shared overflow slots (tollgate_memory_overflow_total
// counts the requests charged to them): state per shard, kind, policy, tag
// and limit, chosen by the subject's hash, created outside the bound but
// bounded itself. Subjects sharing a slot share its budget, so each is
// limited at least as strictly as it would be alone; a key created while
// its slot holds state starts from that state, so a subject cannot regain
// what it spent there. For the login guard, accounts sharing a slot share
// failures and locks, and a success does not clear a slot's failures; for
// leases, subjects share the slot's concurrency. Only when a shard holds
// its most overflow slots (an eighth of the bound, at least 16, and
// taking many policies under attack at once) is a new key refused with
// [ErrFull].
package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/algo"
)

// ErrFull reports a new key the store could neither make room for nor
// decide in an overflow slot, because its shard already holds its most
// overflow slots (see the package documentation). Callers apply their
// failure policy to it, as they would to an unavailable Redis.
var ErrFull = errors.New("memory store is full")

// Defaults for [Options].
const (
	DefaultMaxBytes      = 256 << 20
	DefaultShards        = 64
	DefaultSweepInterval = time.Second
)

// Options configures a [Store]. The zero value is the default.
type Options struct {
	// Now is the store's clock, used when a request carries no time and by
	// the sweep. Nil means time.Now. Tests that pass explicit times should
	// set Now to the same fake clock so the sweep agrees with them.
	Now func() time.Time
	// MaxBytes bounds the bytes the store's state takes (see the package
	// documentation); zero means DefaultMaxBytes and a negative value means
	// no bound.
	MaxBytes int64
	// MaxKeys, if positive, also bounds the number of keys; zero or a
	// negative value means no bound but MaxBytes.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two; zero means DefaultShards.
	Shards int
	// SweepInterval is how often expired keys are swept; zero means
	// DefaultSweepInterval and a negative value disables the background
	// sweep (expired keys are then dropped only when touched, when [Store.Sweep]
	// is called, or to make room for a new key).
	SweepInterval time.Duration
}

// A key names one state: an algorithm (or pseudo-algorithm), a policy, a
// tag (empty when it is the subject) and a subject. Its bytes are the
// algorithm, then the policy and the tag, each length-prefixed so that no
// two different keys share bytes, then the subject. Entries hold the bytes,
// built on the stack for lookups.
type key struct {
	alg                  algo.Algorithm
	policy, tag, subject string
}

// keyOf returns the key of a rate-limit request.
func keyOf(r *algo.Request) key {
	k := key{alg: r.Limit.Algorithm, policy: r.Policy, tag: r.Tag, subject: r.Subject}
	if k.tag == k.subject {
		k.tag = ""
	}
	return k
}

// appendPrefix appends the bytes of a key up to the tag.
func appendPrefix(b []byte, alg algo.Algorithm, policy string) []byte {
	b = append(b, byte(alg))
	b = binary.AppendUvarint(b, uint64(len(policy)))
	return append(b, policy...)
}

// appendTo appends the key's bytes to b.
func (k *key) appendTo(b []byte) []byte {
	b = appendPrefix(b, k.alg, k.policy)
	b = binary.AppendUvarint(b, uint64(len(k.tag)))
	b = append(b, k.tag...)
	return append(b, k.subject...)
}

// hashes returns the hash of key k and the shard of its group. The
// requests of one group share a shard so that [Store.AllowAll] can decide
// them under one lock. A key without a tag hashes as its subject's hash
// (which also picks the shard, by its top bits) xor the hash of its prefix,
// which c, if not nil, holds.
func (s *Store) hashes(k *key, c *policyEntry) (uint64, *shard) {
	if k.tag == "" {
		hg := maphash.String(s.seed, k.subject)
		var ph uint64
		if c != nil {
			ph = c.ph
		} else {
			var buf [64]byte
			ph = maphash.Bytes(s.seed, appendPrefix(buf[:0], k.alg, k.policy))
		}
		return hg ^ ph, &s.shards[hg>>s.shift]
	}
	var buf [96]byte
	h := maphash.Bytes(s.seed, k.appendTo(buf[:0]))
	return h, &s.shards[maphash.String(s.seed, k.tag)>>s.shift]
}

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

// Pseudo-algorithms that keep the login guard's and the leases' state in
// the same shards.
const (
	lockoutKind algo.Algorithm = 250
	leaseKind   algo.Algorithm = 251
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

// Store is the in-memory [tollgate.Store]. It is safe for concurrent use.
// Call Close to stop its background sweep.
type Store struct {
	shards  []shard
	shift   uint8 // a group's shard is the top bits of its hash
	seed    maphash.Seed
	now     func() time.Time
	wall    bool  // now is time.Now: read it with wallMS
	maxKeys int64 // 0: no bound
	// maxBytes bounds bytes (<0: no bound); maxSlots bounds each shard's
	// overflow slots, slotWays of them for one kind, policy, tag and limit.
	maxBytes int64
	maxSlots int32
	slotWays uint64

	ents     entrySlab
	limits   [limitCache]atomic.Pointer[prepared]
	policies [limitCache]atomic.Pointer[policyEntry]

	keys      atomic.Int64 // keys held: live entries but ghosts and overflow slots
	bytes     atomic.Int64 // bytes charged: entries in tables, their parts, tables
	overflows atomic.Uint64
	evictions atomic.Uint64
	expired   atomic.Uint64

	// sweepBatch is called by the sweep with the slots it visited under
	// one hold of a shard's lock, after releasing it; tests set it.
	sweepBatch func(visited int)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	descKeys, descBytes, descMaxBytes, descOverflow, descEvicted, descExpired *prometheus.Desc
}

// New returns a Store configured by opts.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = DefaultShards
	}
	size := 1
	for size < n {
		size <<= 1
	}
	s := &Store{
		shards:   make([]shard, size),
		shift:    uint8(64 - bits.TrailingZeros(uint(size))),
		seed:     maphash.MakeSeed(),
		now:      opts.Now,
		maxKeys:  max(0, int64(opts.MaxKeys)),
		maxBytes: opts.MaxBytes,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		descKeys: prometheus.NewDesc("tollgate_memory_keys",
			"Keys held by the in-memory store.", nil, nil),
		descBytes: prometheus.NewDesc("tollgate_memory_bytes",
			"Bytes of state the in-memory store holds, as it charges them against its bound.", nil, nil),
		descMaxBytes: prometheus.NewDesc("tollgate_memory_max_bytes",
			"The in-memory store's bound on tollgate_memory_bytes (+Inf: none).", nil, nil),
		descOverflow: prometheus.NewDesc("tollgate_memory_overflow_total",
			"Requests for new keys charged to a shared overflow slot because the in-memory store was full.", nil, nil),
		descEvicted: prometheus.NewDesc("tollgate_memory_evictions_total",
			"Keys dropped from the full in-memory store, before they expired, to make room for new ones.", nil, nil),
		descExpired: prometheus.NewDesc("tollgate_memory_expired_total",
			"Keys dropped from the in-memory store after they expired.", nil, nil),
	}
	if s.now == nil {
		s.now, s.wall = time.Now, true
	}
	if s.maxBytes == 0 {
		s.maxBytes = DefaultMaxBytes
	}
	s.maxSlots = maxSlotsPerShard(s.maxBytes, size)
	s.slotWays = slotWaysFor(s.maxSlots)
	for i := range s.shards {
		s.shards[i].tab.Store(s.newTable(minSlots))
	}
	s.ents.dir.Store(&slab{})
	interval := opts.SweepInterval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	if interval > 0 {
		go s.sweepLoop(interval)
	} else {
		close(s.done)
	}
	return s
}

// Close stops the background sweep. The store stays usable.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// Allow implements [tollgate.Store].
func (s *Store) Allow(ctx context.Context, req algo.Request) (d algo.Decision, err error) {
	// The decision is written to d field by field; see decision.
	err = s.allow(ctx, &req, &d)
	return d, err
}

// allow decides req into d, which it leaves alone on error.
func (s *Store) allow(ctx context.Context, req *algo.Request, d *algo.Decision) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deciding in memory: %w", err)
	}
	k := keyOf(req)
	c := s.policy(&k)
	if c != nil && sameLimit(&c.limit, &req.Limit) {
		return s.decide(req, &k, c, &c.pl, d)
	}
	var tmp algo.Prepared
	pl, err := s.prepare(&req.Limit, &tmp)
	if err != nil {
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if c == nil && k.tag == "" {
		s.cachePolicy(&k, &req.Limit)
	}
	return s.decide(req, &k, c, pl, d)
}

// decide decides req, whose key is k, under pl into d; c is the cached
// policy of k, if any.
func (s *Store) decide(req *algo.Request, k *key, c *policyEntry, pl *algo.Prepared, d *algo.Decision) error {
	var h uint64
	var sh *shard
	if c != nil { // hashes, inline
		hg := maphash.String(s.seed, k.subject)
		h, sh = hg^c.ph, &s.shards[hg>>s.shift]
	} else {
		h, sh = s.hashes(k, c)
	}
	// The table is the one thing read in no particular order: start
	// reading the key's first slot, then build the key meanwhile.
	t := sh.tab.Load()
	v := t.slots[h&t.mask].Load()
	var buf [96]byte
	var kb []byte
	if c != nil && len(c.prefix)+len(k.subject) <= len(buf) {
		n := copy(buf[:], c.prefix)
		kb = buf[:n+copy(buf[n:], k.subject)]
	} else {
		kb = k.appendTo(buf[:0])
	}
	var ms int64
	if s.wall && req.Now.IsZero() { // msOf, inline
		ms = wallMS()
	} else {
		ms = s.msOf(req.Now)
	}
	e := s.findIn(t, v, h, kb)
	if e == nil {
		return s.allowLocked(sh, h, kb, req, k, pl, ms, d)
	}
	if e.ghost() {
		return s.revive(sh, h, kb, e, req, k, pl, ms, d)
	}
	return s.decideIn(e, pl, ms, req.Cost, d)
}

// allowLocked decides a request for key kb under the shard lock. It is
// the way to add a key.
func (s *Store) allowLocked(sh *shard, h uint64, kb []byte, req *algo.Request, k *key, pl *algo.Prepared, ms int64, d *algo.Decision) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.findLocked(sh, h, kb)
	if e != nil && !e.ghost() {
		return s.decideIn(e, pl, ms, req.Cost, d)
	}
	return s.allowNew(sh, h, kb, e, req, k, pl, ms, d)
}

// revive decides a request for the ghost e, which the caller has locked,
// as one for a new key, and makes e the key's entry again if the request
// is charged and that takes no room but a key's; else it leaves the
// decision to allowLocked.
func (s *Store) revive(sh *shard, h uint64, kb []byte, e *entry, req *algo.Request, k *key, pl *algo.Prepared, ms int64, d *algo.Decision) error {
	if sh.slots.Load() > 0 {
		// The key may have to start from its overflow slot's state.
		e.mu.Unlock()
		return s.allowLocked(sh, h, kb, req, k, pl, ms, d)
	}
	st := algo.State{E: scale(&req.Limit)}
	var r algo.Result
	ttl, err := pl.DecideInto(&r, &st, ms, req.Cost)
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && req.Cost > 0 {
		// A ghost's entry is charged already; a log is not.
		if st.Log != nil || !s.reserve(0, true) {
			e.mu.Unlock()
			return s.allowLocked(sh, h, kb, req, k, pl, ms, d)
		}
		e.flags &^= entryGhost
		e.st, e.expire = st, ms+ttl
		markHeld(e, &r)
	}
	e.mu.Unlock()
	decision(d, &r)
	return nil
}

// allowNew decides a request for key kb, which sh holds not at all (e is
// nil) or as the ghost e, locked, into d; it adds the key, or revives e,
// if the request is charged and room can be made, and else charges the
// key's overflow slot. The key's state starts from its overflow slot's,
// if that holds any. The caller holds sh.mu.
func (s *Store) allowNew(sh *shard, h uint64, kb []byte, e *entry, req *algo.Request, k *key, pl *algo.Prepared, ms int64, d *algo.Decision) error {
	if e != nil {
		defer e.mu.Unlock()
	}
	var st algo.State
	var r algo.Result
	var from uint8 // the capacity charged for the log st was cloned from
	fp := s.limitFP(&req.Limit)
	var sk []byte
	var slot *entry
	if sh.slots.Load() > 0 {
		sk = s.slotKey(k.alg, k.policy, k.tag, k.subject, fp)
		if slot = s.findSlot(sh, sk, e); slot != nil {
			defer slot.mu.Unlock()
			from = inherit(&st, slot, ms)
		}
	}
	st.E = scale(&req.Limit)
	ttl, err := pl.DecideInto(&r, &st, ms, req.Cost)
	if err != nil {
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && req.Cost > 0 {
		shift := logShiftOf(st.Log, from)
		switch {
		case e != nil && s.room(sh, ms, logBytes(shift), false, true):
			e.flags &^= entryGhost
			e.st, e.logShift = st, shift // room charged the log
		case e == nil && s.room(sh, ms, newEntryBytes(len(kb), shift), true, true):
			e = s.insert(sh, h, kb)
			defer e.mu.Unlock()
			e.st, e.logShift = st, shift
		default:
			if sk == nil {
				sk = s.slotKey(k.alg, k.policy, k.tag, k.subject, fp)
			}
			if slot == nil {
				if slot = s.newSlot(sh, sk); slot == nil {
					return fmt.Errorf("deciding in memory: %w", ErrFull)
				}
				defer slot.mu.Unlock()
			}
			e = slot
			e.flags &^= entryGhost
			s.setState(e, &st, from)
			s.overflows.Add(1)
		}
		e.expire = ms + ttl
		markHeld(e, &r)
	}
	decision(d, &r)
	return nil
}

// decideIn decides a request in the live entry e, which the caller has
// locked, and unlocks it.
func (s *Store) decideIn(e *entry, pl *algo.Prepared, ms, cost int64, d *algo.Decision) error {
	// Like a Redis script, write only when a request was charged; a query
	// or a refusal leaves the stored state and its expiry alone. The sweep
	// deletes only expired keys, so a clock that steps back finds the
	// state it left (unless room was made for new keys by evicting it).
	// Decide changes the state it is given only when it charges, so a live
	// state is decided in place.
	var r algo.Result
	var ttl int64
	var err error
	if e.expire > ms {
		ttl, err = pl.DecideInto(&r, &e.st, ms, cost)
	} else {
		ttl, err = s.decideFresh(e, pl, &r, ms, cost)
	}
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && cost > 0 {
		e.expire = ms + ttl
		if g := e.st.Log; g != nil && (e.logShift == 0 || g.Len() > 1<<e.logShift) {
			s.chargeLog(e) // the log grew
		}
	}
	if r.Remaining == 0 || !r.Allowed {
		e.flags |= entryHeld
	}
	e.mu.Unlock()
	decision(d, &r)
	return nil
}

// decideFresh decides on a fresh state, as an expired entry's is, in e,
// and puts the old state back unless the request was charged.
func (s *Store) decideFresh(e *entry, pl *algo.Prepared, r *algo.Result, ms, cost int64) (int64, error) {
	old := e.st
	e.st = algo.State{E: old.E} // the limit's scale
	if e.flags&entryHeld != 0 {
		e.flags &^= entryHeld
	}
	ttl, err := pl.DecideInto(r, &e.st, ms, cost)
	if err != nil || !r.Allowed || cost == 0 {
		e.st = old
	} else if old.Log != nil || e.st.Log != nil {
		s.setLog(e, 0) // a new log, grown from empty
	}
	return ttl, err
}

// markHeld flags e as holding a refusal if r refused or left nothing.
func markHeld(e *entry, r *algo.Result) {
	if r.Remaining == 0 || !r.Allowed {
		e.flags |= entryHeld
	}
}

// decision sets d to r, field by field. Decisions and results are passed
// by pointer on the hot path: the compiler copies a six-field struct
// returned by value through memory, with wide loads that stall right
// after the struct was written field by field.
func decision(d *algo.Decision, r *algo.Result) {
	d.Allowed = r.Allowed
	d.Limit = r.Limit
	d.Remaining = r.Remaining
	d.ResetAfter = algo.Millis(r.ResetAfter)
	d.RetryAfter = algo.Millis(r.RetryAfter)
	d.Delay = algo.Millis(r.Delay)
}

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

// AllowAll implements [tollgate.MultiStore]: the requests, which share a
// group and so a shard, are decided under the shard lock and their
// entries' locks on copies of their state, and written back only if all
// are allowed.
func (s *Store) AllowAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	// CheckGroup also rules out two requests with one key, whose entry
	// would be locked twice.
	if err := algo.CheckGroup(reqs); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	ms := s.msOf(reqs[0].Now)
	n := len(reqs)
	ks := make([]key, n)
	keys := make([][]byte, n)
	hashes := make([]uint64, n)
	var sh *shard
	for i := range reqs {
		ks[i] = keyOf(&reqs[i])
		keys[i] = ks[i].appendTo(nil)
		hashes[i], sh = s.hashes(&ks[i], nil) // one group: one shard
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := make([]*entry, 0, n) // locked, to unlock when done
	defer func() {
		for _, e := range held {
			e.mu.Unlock()
		}
	}()
	entries := make([]*entry, n) // live entries; nil for a new key
	ghosts := make([]*entry, n)
	slots := make([]*entry, n)     // a new key's overflow slot, if it has one
	sks := make([][]byte, n)       // a new key's overflow slot key, if needed
	bases := make([]algo.State, n) // the state as it stands
	from := make([]uint8, n)       // the log capacity charged for it
	states := make([]algo.State, n)
	res := make([]algo.Result, n)
	ttls := make([]int64, n)
	all := true
	for i, r := range reqs {
		e := s.findLocked(sh, hashes[i], keys[i], held...)
		if e != nil {
			held = append(held, e)
			if e.ghost() {
				ghosts[i], e = e, nil
			}
		}
		entries[i] = e
		if e != nil {
			if e.expire > ms {
				bases[i], from[i] = e.st, e.logShift
			} else {
				bases[i].E = scale(&r.Limit)
			}
			states[i] = bases[i]
		} else {
			// A new key starts from its overflow slot's state, or, if an
			// earlier request of the group shares the slot, from the
			// state that request leaves, so that charging both to the
			// slot loses neither.
			sks[i] = s.slotKey(ks[i].alg, ks[i].policy, ks[i].tag, ks[i].subject, s.limitFP(&r.Limit))
			if j := indexBytes(sks[:i], sks[i]); j >= 0 {
				slots[i], bases[i], from[i], states[i] = slots[j], bases[j], from[j], states[j]
			} else {
				if sh.slots.Load() > 0 {
					if o := s.findSlot(sh, sks[i], held...); o != nil {
						held = append(held, o)
						slots[i] = o
						if !o.ghost() && o.expire > ms {
							bases[i], from[i] = o.st, o.logShift
						}
					}
				}
				bases[i].E = scale(&r.Limit)
				states[i] = bases[i]
			}
		}
		states[i].Log = states[i].Log.Clone()
		var err error
		if res[i], ttls[i], err = algo.Decide(r.Limit, &states[i], ms, r.Cost); err != nil {
			return nil, fmt.Errorf("deciding in memory: %w", err)
		}
		all = all && res[i].Allowed
	}
	ds := make([]algo.Decision, n)
	if !all {
		// Nothing is spent: report the limits that would have allowed as
		// they stand.
		for i, r := range reqs {
			if res[i].Allowed {
				st := bases[i]
				res[i], _, _ = algo.Decide(r.Limit, &st, ms, 0)
			} else if e := entries[i]; e != nil && e.expire > ms {
				e.flags |= entryHeld
			}
			ds[i] = res[i].Decision()
		}
		return ds, nil
	}
	for i, r := range reqs {
		ds[i] = res[i].Decision()
		if r.Cost == 0 {
			continue
		}
		e := entries[i]
		shift := logShiftOf(states[i].Log, from[i])
		switch {
		case e != nil:
			if e.expire <= ms {
				e.flags &^= entryHeld // the state was fresh
			}
			s.setState(e, &states[i], from[i])
		case ghosts[i] != nil && s.room(sh, ms, logBytes(shift), false, true):
			e = ghosts[i]
			e.flags &^= entryGhost
			e.st, e.logShift = states[i], shift // room charged the log
		case ghosts[i] == nil && s.room(sh, ms, newEntryBytes(len(keys[i]), shift), true, true):
			e = s.insert(sh, hashes[i], keys[i])
			held = append(held, e)
			e.st, e.logShift = states[i], shift
		default:
			if slots[i] == nil {
				// Another request of the group may have created it.
				if j := indexBytes(sks[:i], sks[i]); j >= 0 && slots[j] != nil {
					slots[i] = slots[j]
				} else if slots[i] = s.newSlot(sh, sks[i]); slots[i] == nil {
					// Requests before this one were charged: a shard
					// with no slot to spare loses all-or-nothing.
					return nil, fmt.Errorf("deciding in memory: %w", ErrFull)
				} else {
					held = append(held, slots[i])
				}
			}
			e = slots[i]
			e.flags &^= entryGhost
			s.setState(e, &states[i], from[i])
			s.overflows.Add(1)
		}
		e.expire = ms + ttls[i]
		markHeld(e, &res[i])
	}
	return ds, nil
}

// setState sets the state of e, which the caller has locked, to *st,
// whose log (if any) was charged at logShift from, and charges the
// difference.
func (s *Store) setState(e *entry, st *algo.State, from uint8) {
	e.st = *st
	s.setLog(e, from)
}

// Acquire implements [tollgate.Leaser]: a lease is a hold on the
// subject's lease key (see updateHeld), granted while fewer than the limit
// are held, counting those in the subject's overflow slot, and unless its
// id was released first (see Release).
func (s *Store) Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	if err := req.Validate(); err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	ok := false
	err := s.leaseOp(req, func(ms int64, leases algo.Holds) bool {
		held, released := leaseHolds(req.ID)
		if _, ok := leases[released]; ok {
			return false
		}
		n := int64(0)
		for id := range leases {
			if id[0] == leaseHeld {
				n++
			}
		}
		if n >= req.Limit {
			return false
		}
		leases[held] = ms + req.TTL.Milliseconds()
		ok = true
		return true
	})
	if errors.Is(err, errNoRoom) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	return ok, nil
}

// Release implements [tollgate.Leaser]. A lease that is not held is
// remembered as released for req.TTL, as the Redis store does, so that an
// Acquire of its id made afterwards takes nothing. (Here no Acquire runs
// after its caller has stopped waiting, so when the store is full and
// that memory would need room it is not kept.)
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("releasing a lease in memory: %w", err)
	}
	err := s.leaseOp(req, func(ms int64, leases algo.Holds) bool {
		held, released := leaseHolds(req.ID)
		if _, ok := leases[held]; ok {
			delete(leases, held)
		} else {
			leases[released] = ms + req.TTL.Milliseconds()
		}
		return true
	})
	if err != nil && !errors.Is(err, errNoRoom) && !errors.Is(err, ErrFull) {
		return fmt.Errorf("releasing a lease in memory: %w", err)
	}
	return nil
}

// The leases of a subject are holds (see updateHeld) whose ids are the
// lease's id after a byte that says what it is: a lease held, or one
// released before it was acquired.
const (
	leaseHeld     = 'L'
	leaseReleased = 'R'
)

// leaseHolds returns the hold ids of lease id held and released.
func leaseHolds(id string) (held, released string) {
	return string(leaseHeld) + id, string(leaseReleased) + id
}

// leaseOp runs op on the live leases of req's subject at the request's
// time; op reports whether it changed them.
func (s *Store) leaseOp(req algo.LeaseRequest, op func(ms int64, leases algo.Holds) bool) error {
	ms := s.msOf(req.Now)
	k := &key{alg: leaseKind, policy: req.Policy, subject: req.Subject}
	h, sh := s.hashes(k, nil)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	return s.updateHeld(sh, h, kb, func() []byte { return s.slotKey(leaseKind, req.Policy, "", req.Subject, 0) }, algo.State{}, ms,
		func(_ *algo.State, leases algo.Holds) (bool, int64, bool) { return op(ms, leases), 0, false }, nil)
}

// msOf returns t, or the store's time if t is zero, in ms since the epoch.
func (s *Store) msOf(t time.Time) int64 {
	if !t.IsZero() {
		return t.UnixMilli()
	}
	if s.wall {
		return wallMS()
	}
	return s.now().UnixMilli()
}

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
	for i := range s.limits {
		s.limits[i].Store(nil)
		s.policies[i].Store(nil)
	}
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
			size := len(t.slots)
			for size > minSlots && 16*(sh.live+1) <= size {
				size /= 2
			}
			if size < len(t.slots) {
				s.rehash(sh, size)
			}
			sh.mu.Unlock()
			return
		}
		sl := s.ents.dir.Load()
		visited := 0
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
		sh.mu.Unlock()
		if s.sweepBatch != nil {
			s.sweepBatch(visited)
		}
	}
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

// Stats is a snapshot of the store's counters.
type Stats struct {
	Keys      int64  // keys held now
	Bytes     int64  // bytes charged now (see Options.MaxBytes)
	MaxBytes  int64  // the bound on Bytes; negative: none
	Overflows uint64 // requests for new keys charged to an overflow slot
	Evictions uint64 // keys dropped before they expired to make room
	Expired   uint64 // keys dropped after they expired
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Keys: s.keys.Load(), Bytes: s.bytes.Load(), MaxBytes: s.maxBytes,
		Overflows: s.overflows.Load(), Evictions: s.evictions.Load(), Expired: s.expired.Load()}
}

// Describe implements [prometheus.Collector].
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.descKeys
	ch <- s.descBytes
	ch <- s.descMaxBytes
	ch <- s.descOverflow
	ch <- s.descEvicted
	ch <- s.descExpired
}

// Collect implements [prometheus.Collector].
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	maxBytes := float64(st.MaxBytes)
	if st.MaxBytes < 0 {
		maxBytes = math.Inf(1)
	}
	ch <- prometheus.MustNewConstMetric(s.descKeys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(s.descBytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(s.descMaxBytes, prometheus.GaugeValue, maxBytes)
	ch <- prometheus.MustNewConstMetric(s.descOverflow, prometheus.CounterValue, float64(st.Overflows))
	ch <- prometheus.MustNewConstMetric(s.descEvicted, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(s.descExpired, prometheus.CounterValue, float64(st.Expired))
}
