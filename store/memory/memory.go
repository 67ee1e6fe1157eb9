// Package memory is Tollgate's embedded store: rate-limit state in this
// process, decided by the same algorithms as the Redis store (package algo),
// so the two cannot disagree.
//
// Each key's state has its own lock, so decisions for different keys
// proceed in parallel; a decision for a key already held takes no other
// lock. Keys are sharded by group (the subject, or the tag), and a shard's
// lock serializes adding and dropping keys. Every key expires when its
// state becomes equivalent to a fresh key (a full bucket, an elapsed
// window); expired keys are dropped by a background sweep, so memory is
// bounded by the keys active within their window. A dropped key's memory
// is kept until the sweep after, to be reused without allocating if the
// key comes back; a decision for a key the store holds allocates nothing.
//
// # Key cap
//
// [Options.MaxKeys] bounds the number of keys. When the store is full, a
// request for a new key is not admitted: Allow returns an error wrapping
// [ErrFull], the overflow counter (metric tollgate_memory_overflow_total)
// is incremented, and nothing stored changes. Keys already tracked are never
// evicted before they expire, so an overflow can never hand an active
// subject a fresh budget early. Callers apply their failure policy to the
// error, as they would to an unavailable Redis.
package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/algo"
)

// ErrFull reports that the store holds [Options.MaxKeys] keys and cannot
// track a new one.
var ErrFull = errors.New("memory store is full")

// Defaults for [Options].
const (
	DefaultMaxKeys       = 1_000_000
	DefaultShards        = 64
	DefaultSweepInterval = time.Second
)

// Options configures a [Store]. The zero value is the default.
type Options struct {
	// Now is the store's clock, used when a request carries no time and by
	// the sweep. Nil means time.Now. Tests that pass explicit times should
	// set Now to the same fake clock so the sweep agrees with them.
	Now func() time.Time
	// MaxKeys bounds the number of keys; zero means DefaultMaxKeys and a
	// negative value means no bound.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two; zero means DefaultShards.
	Shards int
	// SweepInterval is how often expired keys are swept; zero means
	// DefaultSweepInterval and a negative value disables the background
	// sweep (expired keys are then dropped only when touched or when the
	// store is full).
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
// every field but idx. Entries are found without the shard lock (see
// [shard]), so whoever locks an entry must check that it is still live and
// still holds the key looked for.
type entry struct {
	mu     sync.Mutex
	hash   uint64
	expire int64 // ms; the state is fresh from then on
	st     algo.State
	ext    *entryExt
	idx    uint32 // index in the store's slab; set once
	live   bool   // in its shard's table; false once deleted
	ghost  bool   // swept: not a key any more (see Store.ghost), but still in the table
	klen   uint8
	kin    [inlineKey]byte
}

// entryExt holds an entry's rarely used parts.
type entryExt struct {
	key    string           // the key, when longer than inlineKey
	leases map[string]int64 // concurrency leases: id -> expiry (ms)
}

// is reports whether e holds the key with bytes kb.
func (e *entry) is(kb []byte) bool {
	if len(kb) <= inlineKey {
		return int(e.klen) == len(kb) && string(e.kin[:len(kb)]) == string(kb)
	}
	return e.klen == longKey && e.ext.key == string(kb)
}

// reset makes e a fresh entry for the key with bytes kb, with hash h.
func (e *entry) reset(h uint64, kb []byte) {
	e.hash, e.expire, e.st, e.ext, e.ghost = h, 0, algo.State{}, nil, false
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
// cached: slotEmpty, slotDeleted, or the high 32 bits of the key's hash
// and the entry's slab index plus 2. Tables are read without locks, so
// slots are atomic; they are written under the shard lock, and a table is
// replaced, never resized in place.
type table struct {
	slots []atomic.Uint64
	mask  uint64
}

const (
	slotEmpty   = 0
	slotDeleted = 1
	minSlots    = 8
)

func newTable(size int) *table {
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
	tab  atomic.Pointer[table]
	_    [56]byte // keep tab, read by every decision, off the lock's cache line
	mu   sync.Mutex
	live int      // entries in the table
	used int      // slots not empty: entries and deleted slots
	_    [40]byte // keep shards on separate cache lines
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
		if v>>32 == tag && v != slotDeleted {
			if e := s.ents.dir.Load().at(uint32(v) - 2); e != nil {
				e.mu.Lock()
				if e.live && e.hash == h && e.is(k) {
					return e
				}
				e.mu.Unlock()
			}
		}
		v = t.slots[(i+1)&t.mask].Load()
	}
	return nil
}

// insert adds an entry for key k with hash h, which sh does not hold, and
// returns it locked. The caller holds sh.mu and has reserved the key.
func (s *Store) insert(sh *shard, h uint64, k []byte) *entry {
	t := sh.tab.Load()
	switch {
	case full(sh.live, len(t.slots)):
		t = s.rehash(sh, 2*len(t.slots))
	case full(sh.used, len(t.slots)):
		// Mostly deleted slots: clean up, and shrink if nearly empty.
		size := len(t.slots)
		for size > minSlots && 16*(sh.live+1) <= size {
			size /= 2
		}
		t = s.rehash(sh, size)
	}
	e := s.ents.alloc()
	e.mu.Lock()
	e.reset(h, k)
	e.live = true
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if v := t.slots[i].Load(); v == slotEmpty || v == slotDeleted {
			if v == slotEmpty {
				sh.used++
			}
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

// rehash replaces sh's table by one of size slots without deleted slots
// and returns it. The caller holds sh.mu.
func (s *Store) rehash(sh *shard, size int) *table {
	old, t := sh.tab.Load(), newTable(size)
	for i := range old.slots {
		v := old.slots[i].Load()
		if v == slotEmpty || v == slotDeleted {
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
	sh.used = sh.live
	sh.tab.Store(t)
	return t
}

// removeAt takes e, in slot i of t, out of sh's table. The caller holds
// sh.mu and e.mu.
func (sh *shard) removeAt(t *table, i uint64, e *entry) {
	if t.slots[(i+1)&t.mask].Load() == slotEmpty {
		// No probe goes past an empty slot, so this one can be empty too.
		t.slots[i].Store(slotEmpty)
		sh.used--
	} else {
		t.slots[i].Store(slotDeleted)
	}
	e.live = false
	sh.live--
}

// Store is the in-memory [tollgate.Store]. It is safe for concurrent use.
// Call Close to stop its background sweep.
type Store struct {
	shards  []shard
	shift   uint8 // a group's shard is the top bits of its hash
	seed    maphash.Seed
	now     func() time.Time
	wall    bool // now is time.Now: read it with wallMS
	maxKeys int64

	ents     entrySlab
	limits   [limitCache]atomic.Pointer[prepared]
	policies [limitCache]atomic.Pointer[policyEntry]

	keys      atomic.Int64
	overflows atomic.Uint64
	lastFull  atomic.Int64 // ms of the last full sweep forced by a full store
	expired   atomic.Uint64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	descKeys, descOverflow, descExpired *prometheus.Desc
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
		shards:  make([]shard, size),
		shift:   uint8(64 - bits.TrailingZeros(uint(size))),
		seed:    maphash.MakeSeed(),
		now:     opts.Now,
		maxKeys: int64(opts.MaxKeys),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		descKeys: prometheus.NewDesc("tollgate_memory_keys",
			"Keys held by the in-memory store.", nil, nil),
		descOverflow: prometheus.NewDesc("tollgate_memory_overflow_total",
			"Requests for new keys refused because the in-memory store was full.", nil, nil),
		descExpired: prometheus.NewDesc("tollgate_memory_expired_total",
			"Keys dropped from the in-memory store after they expired.", nil, nil),
	}
	if s.now == nil {
		s.now, s.wall = time.Now, true
	}
	if s.maxKeys == 0 {
		s.maxKeys = DefaultMaxKeys
	}
	for i := range s.shards {
		s.shards[i].tab.Store(newTable(minSlots))
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
	if err != nil && errors.Is(err, ErrFull) {
		if s.sweepIfDue() {
			err = s.allow(ctx, &req, &d) // the sweep may have made room
		}
		if errors.Is(err, ErrFull) {
			s.overflows.Add(1)
		}
	}
	return d, err
}

// sweepIfDue sweeps every shard, at most once a second, when the store is
// full. It reports whether it swept.
func (s *Store) sweepIfDue() bool {
	now := s.now().UnixMilli()
	last := s.lastFull.Load()
	if now-last < 1000 || !s.lastFull.CompareAndSwap(last, now) {
		return false
	}
	s.Sweep()
	return true
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
		return s.allowLocked(sh, h, kb, pl, ms, req.Cost, d)
	}
	if e.ghost {
		return s.revive(sh, h, kb, e, pl, ms, req.Cost, d)
	}
	return decideIn(e, pl, ms, req.Cost, d)
}

// allowLocked decides a request for key kb under the shard lock. It is
// the way to add a key.
func (s *Store) allowLocked(sh *shard, h uint64, kb []byte, pl *algo.Prepared, ms, cost int64, d *algo.Decision) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.find(sh, h, kb)
	switch {
	case e == nil:
		return s.allowNew(sh, h, kb, pl, ms, cost, d)
	case e.ghost:
		return s.reviveLocked(sh, e, pl, ms, cost, d)
	}
	return decideIn(e, pl, ms, cost, d)
}

// revive decides a request for the ghost e, which the caller has locked,
// as one for a new key, and makes e the key's entry again if the request
// is charged and the store has room; if it has not, it leaves the
// decision to allowLocked.
func (s *Store) revive(sh *shard, h uint64, kb []byte, e *entry, pl *algo.Prepared, ms, cost int64, d *algo.Decision) error {
	var st algo.State
	var r algo.Result
	ttl, err := pl.DecideInto(&r, &st, ms, cost)
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && cost > 0 {
		if !s.tryReserve() {
			e.mu.Unlock()
			return s.allowLocked(sh, h, kb, pl, ms, cost, d)
		}
		e.ghost = false
		e.st, e.expire = st, ms+ttl
	}
	e.mu.Unlock()
	decision(d, &r)
	return nil
}

// reviveLocked is revive under the shard lock, which can make room.
func (s *Store) reviveLocked(sh *shard, e *entry, pl *algo.Prepared, ms, cost int64, d *algo.Decision) error {
	defer e.mu.Unlock()
	var st algo.State
	var r algo.Result
	ttl, err := pl.DecideInto(&r, &st, ms, cost)
	if err != nil {
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && cost > 0 {
		if !s.reserve(sh, ms, []*entry{e}) {
			return fmt.Errorf("deciding in memory: %w (%d keys)", ErrFull, s.maxKeys)
		}
		e.ghost = false
		e.st, e.expire = st, ms+ttl
	}
	decision(d, &r)
	return nil
}

// decideIn decides a request in the live entry e, which the caller has
// locked, and unlocks it.
func decideIn(e *entry, pl *algo.Prepared, ms, cost int64, d *algo.Decision) error {
	// Like a Redis script, write only when a request was charged; a query
	// or a refusal leaves the stored state and its expiry alone. Only the
	// sweep deletes, so a clock that steps back finds the state it left.
	// Decide changes the state it is given only when it charges, so a live
	// state is decided in place.
	var r algo.Result
	var ttl int64
	var err error
	if e.expire > ms {
		ttl, err = pl.DecideInto(&r, &e.st, ms, cost)
	} else {
		ttl, err = decideFresh(pl, &r, &e.st, ms, cost)
	}
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && cost > 0 {
		e.expire = ms + ttl
	}
	e.mu.Unlock()
	decision(d, &r)
	return nil
}

// decideFresh decides on a fresh state, as an expired entry's is, in *st,
// and puts the old state back unless the request was charged.
func decideFresh(pl *algo.Prepared, r *algo.Result, st *algo.State, ms, cost int64) (int64, error) {
	old := *st
	*st = algo.State{}
	ttl, err := pl.DecideInto(r, st, ms, cost)
	if err != nil || !r.Allowed || cost == 0 {
		*st = old
	}
	return ttl, err
}

// decision sets d to r, field by field. Decisions and results are passed
// by pointer on the hot path: the compiler copies a six-field struct
// returned by value through memory, with wide loads that stall right
// after the struct was written field by field.
func decision(d *algo.Decision, r *algo.Result) {
	d.Allowed = r.Allowed
	d.Limit = r.Limit
	d.Remaining = r.Remaining
	d.ResetAfter = time.Duration(r.ResetAfter) * time.Millisecond
	d.RetryAfter = time.Duration(r.RetryAfter) * time.Millisecond
	d.Delay = time.Duration(r.Delay) * time.Millisecond
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

// allowNew decides a request for key k, which sh does not hold, into d,
// and adds the key if the request is charged. The caller holds sh.mu.
func (s *Store) allowNew(sh *shard, h uint64, k []byte, pl *algo.Prepared, ms, cost int64, d *algo.Decision) error {
	var st algo.State
	var r algo.Result
	ttl, err := pl.DecideInto(&r, &st, ms, cost)
	if err != nil {
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if r.Allowed && cost > 0 {
		if !s.reserve(sh, ms, nil) {
			return fmt.Errorf("deciding in memory: %w (%d keys)", ErrFull, s.maxKeys)
		}
		e := s.insert(sh, h, k)
		e.st, e.expire = st, ms+ttl
		e.mu.Unlock()
	}
	decision(d, &r)
	return nil
}

// AllowAll implements [tollgate.MultiStore]: the requests, which share a
// group and so a shard, are decided under the shard lock and their
// entries' locks on copies of their state, and written back only if all
// are allowed.
func (s *Store) AllowAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
	ds, err := s.allowAll(ctx, reqs)
	if errors.Is(err, ErrFull) && s.sweepIfDue() {
		ds, err = s.allowAll(ctx, reqs)
	}
	if errors.Is(err, ErrFull) {
		s.overflows.Add(1)
	}
	return ds, err
}

func (s *Store) allowAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
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
	keys := make([][]byte, n)
	hashes := make([]uint64, n)
	var sh *shard
	for i := range reqs {
		k := keyOf(&reqs[i])
		keys[i] = k.appendTo(nil)
		hashes[i], sh = s.hashes(&k, nil) // one group: one shard
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := make([]*entry, 0, n) // locked, to unlock when done
	defer func() {
		for _, e := range held {
			e.mu.Unlock()
		}
	}()
	entries := make([]*entry, n) // nil for a ghost
	ghosts := make([]*entry, n)
	states := make([]algo.State, n)
	res := make([]algo.Result, n)
	ttls := make([]int64, n)
	all := true
	for i, r := range reqs {
		e := s.find(sh, hashes[i], keys[i])
		if e != nil {
			held = append(held, e)
			if e.ghost {
				ghosts[i], e = e, nil
			}
		}
		entries[i] = e
		if e != nil {
			if e.expire > ms {
				states[i] = e.st
				states[i].Log = e.st.Log.Clone()
			}
		}
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
				var st algo.State
				if e := entries[i]; e != nil && e.expire > ms {
					st = e.st
				}
				res[i], _, _ = algo.Decide(r.Limit, &st, ms, 0)
			}
			ds[i] = res[i].Decision()
		}
		return ds, nil
	}
	// Expired keys about to be rewritten are dropped first, so that the
	// count of keys to reserve is exact.
	fresh := 0
	for i, r := range reqs {
		if r.Cost == 0 {
			continue
		}
		if e := entries[i]; e != nil && e.expire <= ms {
			s.ghost(e)
			ghosts[i], entries[i] = e, nil
		}
		if entries[i] == nil {
			fresh++
		}
	}
	for j := 0; j < fresh; j++ {
		if !s.reserve(sh, ms, held) {
			s.keys.Add(-int64(j))
			return nil, fmt.Errorf("deciding in memory: %w (%d keys)", ErrFull, s.maxKeys)
		}
	}
	for i, r := range reqs {
		if r.Cost > 0 {
			e := entries[i]
			switch {
			case e != nil:
			case ghosts[i] != nil:
				e = ghosts[i]
				e.ghost = false
			default:
				e = s.insert(sh, hashes[i], keys[i])
				held = append(held, e)
			}
			e.st, e.expire = states[i], ms+ttls[i]
		}
		ds[i] = res[i].Decision()
	}
	return ds, nil
}

// Lockout implements [tollgate.Guard]. An account's held attempts are
// kept beside its state, in its entry.
func (s *Store) Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error) {
	if err := ctx.Err(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in memory: %w", err)
	}
	if err := req.Validate(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in memory: %w", err)
	}
	ms := s.msOf(req.Now)
	k := &key{alg: lockoutKind, policy: req.Policy, subject: req.Subject}
	h, sh := s.hashes(k, nil)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.find(sh, h, kb)
	var held []*entry
	if e != nil {
		defer e.mu.Unlock()
		held = []*entry{e}
	}
	var st algo.State
	holds := algo.Holds{}
	if e != nil && !e.ghost && e.expire > ms {
		st = e.st
		if e.ext != nil && e.ext.leases != nil {
			holds = e.ext.leases
		}
	}
	res, ttl := algo.Lockout(req.Rule, &st, holds, ms, req.Op, req.Hold)
	if req.Op == algo.LockCheck {
		return res, nil
	}
	switch {
	case e != nil && !e.ghost:
	case ttl > 0:
		if !s.reserve(sh, ms, held) {
			s.overflows.Add(1)
			return res, fmt.Errorf("guarding login in memory: %w", ErrFull)
		}
		if e != nil {
			e.ghost = false
		} else {
			e = s.insert(sh, h, kb)
			defer e.mu.Unlock()
		}
	default:
		return res, nil
	}
	e.st, e.expire = st, ms+ttl
	if len(holds) > 0 {
		if e.ext == nil {
			e.ext = &entryExt{}
		}
		e.ext.leases = holds
	} else if e.ext != nil {
		e.ext.leases = nil
	}
	return res, nil
}

// Acquire implements [tollgate.Leaser].
func (s *Store) Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	if err := req.Validate(); err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	ms := s.msOf(req.Now)
	k := &key{alg: leaseKind, policy: req.Policy, subject: req.Subject}
	h, sh := s.hashes(k, nil)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.find(sh, h, kb)
	if e == nil || e.ghost {
		var held []*entry
		if e != nil {
			held = []*entry{e}
		}
		if !s.reserve(sh, ms, held) {
			if e != nil {
				e.mu.Unlock()
			}
			s.overflows.Add(1)
			return false, fmt.Errorf("acquiring a lease in memory: %w", ErrFull)
		}
		if e != nil {
			e.ghost, e.expire = false, 0
		} else {
			e = s.insert(sh, h, kb)
		}
	}
	defer e.mu.Unlock()
	if e.ext == nil {
		e.ext = &entryExt{}
	}
	if e.ext.leases == nil {
		e.ext.leases = map[string]int64{}
	}
	leases := e.ext.leases
	for id, exp := range leases {
		if exp <= ms {
			delete(leases, id)
		}
	}
	if int64(len(leases)) >= req.Limit {
		return false, nil
	}
	exp := ms + req.TTL.Milliseconds()
	leases[req.ID] = exp
	e.expire = max(e.expire, exp)
	return true, nil
}

// Release implements [tollgate.Leaser].
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	k := &key{alg: leaseKind, policy: req.Policy, subject: req.Subject}
	h, sh := s.hashes(k, nil)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.find(sh, h, kb); e != nil {
		if !e.ghost && e.ext != nil {
			delete(e.ext.leases, req.ID)
		}
		e.mu.Unlock()
	}
	return nil
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

// tryReserve counts one more key if the store has room for it.
func (s *Store) tryReserve() bool {
	if s.maxKeys < 0 {
		s.keys.Add(1)
		return true
	}
	if s.keys.Add(1) <= s.maxKeys {
		return true
	}
	s.keys.Add(-1)
	return false
}

// reserve counts one more key, sweeping sh if the store is full (Allow
// sweeps the other shards, outside any shard lock, if that is not enough).
// The caller holds sh.mu and the locks of the entries in held.
func (s *Store) reserve(sh *shard, ms int64, held []*entry) bool {
	if s.maxKeys < 0 {
		s.keys.Add(1)
		return true
	}
	if s.keys.Add(1) <= s.maxKeys {
		return true
	}
	s.sweepShard(sh, ms, held, false)
	if s.keys.Load() <= s.maxKeys {
		return true
	}
	s.keys.Add(-1)
	return false
}

// ghost drops the key of the live entry e, whose lock the caller holds,
// as deleting it would, but leaves e in the table: if the key comes back
// before the next sweep, e is revived, without the shard lock, instead of
// a new entry being added. The sweep after that deletes the ghosts left.
// A ghost is not a key: it is not counted, its state is gone, and finding
// it is finding nothing.
func (s *Store) ghost(e *entry) {
	e.ghost = true
	e.st = algo.State{}
	if e.ext != nil {
		e.ext.leases = nil
	}
	s.keys.Add(-1)
	s.expired.Add(1)
}

// sweepShard drops sh's expired keys, and if reclaim is set deletes the
// ghosts left by the last sweep. The caller holds sh.mu and the locks of
// the entries in held.
func (s *Store) sweepShard(sh *shard, ms int64, held []*entry, reclaim bool) {
	t := sh.tab.Load()
	sl := s.ents.dir.Load()
	for i := range t.slots {
		v := t.slots[i].Load()
		if v == slotEmpty || v == slotDeleted {
			continue
		}
		e := sl.at(uint32(v) - 2)
		mine := slices.Contains(held, e)
		if !mine {
			e.mu.Lock()
		}
		switch {
		case e.ghost:
			if reclaim && !mine {
				sh.removeAt(t, uint64(i), e)
				s.ents.release(e)
			}
		case e.expire <= ms:
			s.ghost(e)
		}
		if !mine {
			e.mu.Unlock()
		}
	}
}

// Sweep drops every expired key now. The background sweep calls it.
func (s *Store) Sweep() {
	ms := s.now().UnixMilli()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepShard(sh, ms, nil, true)
		sh.mu.Unlock()
	}
	s.ents.trim()
	for i := range s.limits {
		s.limits[i].Store(nil)
		s.policies[i].Store(nil)
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
	Overflows uint64 // new keys refused because the store was full
	Expired   uint64 // keys dropped by a sweep after they expired
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Keys: s.keys.Load(), Overflows: s.overflows.Load(), Expired: s.expired.Load()}
}

// Describe implements [prometheus.Collector].
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.descKeys
	ch <- s.descOverflow
	ch <- s.descExpired
}

// Collect implements [prometheus.Collector].
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	ch <- prometheus.MustNewConstMetric(s.descKeys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(s.descOverflow, prometheus.CounterValue, float64(st.Overflows))
	ch <- prometheus.MustNewConstMetric(s.descExpired, prometheus.CounterValue, float64(st.Expired))
}
