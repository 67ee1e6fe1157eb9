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
// counts the requests charged to them): state per shard, kind, name, tag
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
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate"
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

// The compiler holds Store to the tollgate.Store contract.
var _ tollgate.Store = (*Store)(nil)

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
	// overflow slots, slotWays of them for one kind, name, tag and limit.
	maxBytes int64
	maxSlots int32
	slotWays uint64

	ents entrySlab

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

// ErrClosed is what Ping reports of a closed store.
var ErrClosed = errors.New("memory store closed")

// Ping implements [tollgate.Health]: the store answers while it is open.
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.stop:
		return ErrClosed
	default:
		return ctx.Err()
	}
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
	if h := req.Prepared(); h != nil {
		if req.Within == 0 {
			return s.decide(req, &k, h.KeyPrefix(), h.Prepared(), d)
		}
		pl, err := h.Prepared().For(req)
		if err != nil {
			return fmt.Errorf("deciding in memory: %w", err)
		}
		return s.decide(req, &k, h.KeyPrefix(), pl, d)
	}
	pl, err := req.Limit.Prepare()
	if err != nil {
		return fmt.Errorf("deciding in memory: %w", err)
	}
	if req.Within != 0 {
		if pl, err = pl.Within(req.Within); err != nil {
			return fmt.Errorf("deciding in memory: %w", err)
		}
	}
	return s.decide(req, &k, nil, &pl, d)
}

// PushBack implements [tollgate.Shaper]: it postpones the schedule of
// req's shaping limit by d on the store's clock (on req.Now if set); see
// [algo.PushBack]. req's Cost and Within are ignored.
func (s *Store) PushBack(ctx context.Context, req algo.Request, d time.Duration) (algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, fmt.Errorf("pushing back in memory: %w", err)
	}
	pl, prefix, err := prepared(&req)
	if err == nil {
		pl, err = pl.PushingBack(d)
	}
	if err != nil {
		return algo.Decision{}, fmt.Errorf("pushing back in memory: %w", err)
	}
	// A push back is written as a charged request's state is: with a
	// cost (which it does not spend) and the TTL it reports.
	req.Cost, req.Within = 1, 0
	k := keyOf(&req)
	var dec algo.Decision
	if err := s.decide(&req, &k, prefix, &pl, &dec); err != nil {
		return algo.Decision{}, err
	}
	return dec, nil
}

// decide decides req, whose key is k, under pl into d; prefix, if not
// nil, is the prefix of k's algorithm and name (its handle's).
func (s *Store) decide(req *algo.Request, k *key, prefix []byte, pl *algo.Prepared, d *algo.Decision) error {
	var h uint64
	var sh *shard
	if prefix != nil && k.tag == "" { // hashes, inline
		hg := maphash.String(s.seed, k.subject)
		h, sh = hg^maphash.Bytes(s.seed, prefix), &s.shards[hg>>s.shift]
	} else {
		h, sh = s.hashes(k)
	}
	// The table is the one thing read in no particular order: start
	// reading the key's first slot, then build the key meanwhile.
	t := sh.tab.Load()
	v := t.slots[h&t.mask].Load()
	var buf [96]byte
	var kb []byte
	if prefix != nil && k.tag == "" && len(prefix)+1+len(k.subject) <= len(buf) {
		n := copy(buf[:], prefix)
		buf[n] = 0 // no tag
		kb = buf[:n+1+copy(buf[n+1:], k.subject)]
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
		sk = s.slotKey(k.alg, k.name, k.tag, k.subject, fp)
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
				sk = s.slotKey(k.alg, k.name, k.tag, k.subject, fp)
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
	d.Quota = r.Quota
	d.Remaining = r.Remaining
	d.ResetAfter = algo.Millis(r.ResetAfter)
	d.RetryAfter = algo.Millis(r.RetryAfter)
	d.Delay = algo.Millis(r.Delay)
	d.Debt = r.Debt
}

// setState sets the state of e, which the caller has locked, to *st,
// whose log (if any) was charged at logShift from, and charges the
// difference.
func (s *Store) setState(e *entry, st *algo.State, from uint8) {
	e.st = *st
	s.setLog(e, from)
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

// prepared returns req's prepared limit and key prefix: its handle's, or
// the limit prepared now, with no prefix.
func prepared(req *algo.Request) (algo.Prepared, []byte, error) {
	if h := req.Prepared(); h != nil {
		return *h.Prepared(), h.KeyPrefix(), nil
	}
	pl, err := req.Limit.Prepare()
	return pl, nil, err
}

// preparedFor is prepared with req's queue threshold applied
// ([algo.Prepared.Within]).
func preparedFor(req *algo.Request) (algo.Prepared, error) {
	pl, _, err := prepared(req)
	if err != nil || req.Within == 0 {
		return pl, err
	}
	return pl.Within(req.Within)
}
