// Package memory is Tollgate's embedded store: rate-limit state in this
// process, decided by the same algorithms as the Redis store (package algo),
// so the two cannot disagree.
//
// The store is sharded by subject, each shard behind its own mutex, so
// decisions for different subjects proceed in parallel. Every key expires
// when its state becomes equivalent to a fresh key (a full bucket, an
// elapsed window); expired keys are dropped on access and by a background
// sweep, so memory is bounded by the keys active within their window.
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

// A key is the algorithm, then the policy, the tag and the subject, the
// first two length-prefixed so that no two different keys share bytes.
// Shards map string(key) to entries: one string to hash and compare, and
// lookups through m[string(b)] do not allocate; only a new key's string
// is allocated, once.
func appendKey(b []byte, policy, tag, subject string, alg algo.Algorithm) []byte {
	b = append(b, byte(alg))
	b = binary.AppendUvarint(b, uint64(len(policy)))
	b = append(b, policy...)
	b = binary.AppendUvarint(b, uint64(len(tag)))
	b = append(b, tag...)
	return append(b, subject...)
}

// keyOf appends the key of a rate-limit request to b.
func keyOf(b []byte, r algo.Request) []byte {
	tag := r.Tag
	if tag == r.Subject {
		tag = ""
	}
	return appendKey(b, r.Policy, tag, r.Subject, r.Limit.Algorithm)
}

func (s *Store) shardOf(r algo.Request) *shard {
	return &s.shards[maphash.String(s.seed, r.Group())&s.mask]
}

type entry struct {
	st     algo.State
	expire int64            // ms; the state is fresh from then on
	leases map[string]int64 // concurrency leases: id -> expiry (ms)
}

// Pseudo-algorithms that keep the login guard's and the leases' state in
// the same sharded map.
const (
	lockoutKind algo.Algorithm = 250
	leaseKind   algo.Algorithm = 251
)

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	_  [40]byte // keep shards on separate cache lines
}

// Store is the in-memory [tollgate.Store]. It is safe for concurrent use.
// Call Close to stop its background sweep.
type Store struct {
	shards  []shard
	mask    uint64
	seed    maphash.Seed
	now     func() time.Time
	maxKeys int64

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
		mask:    uint64(size - 1),
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
		s.now = time.Now
	}
	if s.maxKeys == 0 {
		s.maxKeys = DefaultMaxKeys
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
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
func (s *Store) Allow(ctx context.Context, req algo.Request) (algo.Decision, error) {
	d, err := s.allow(ctx, req)
	if errors.Is(err, ErrFull) && s.sweepIfDue() {
		d, err = s.allow(ctx, req) // the sweep may have made room
	}
	if errors.Is(err, ErrFull) {
		s.overflows.Add(1)
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

func (s *Store) allow(ctx context.Context, req algo.Request) (algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, fmt.Errorf("deciding in memory: %w", err)
	}
	now := req.Now
	if now.IsZero() {
		now = s.now()
	}
	ms := now.UnixMilli()
	var buf [96]byte
	k := keyOf(buf[:0], req)
	sh := s.shardOf(req)

	sh.mu.Lock()
	e := sh.m[string(k)]
	var st algo.State
	if e != nil && e.expire > ms {
		st = e.st
	}
	r, ttl, err := algo.Decide(req.Limit, &st, ms, req.Cost)
	if err != nil {
		sh.mu.Unlock()
		return algo.Decision{}, fmt.Errorf("deciding in memory: %w", err)
	}
	// Like a Redis script, write only when a request was charged; a query
	// or a refusal leaves the stored state and its expiry alone. Only the
	// sweep deletes, so a clock that steps back finds the state it left.
	if r.Allowed && req.Cost > 0 {
		switch {
		case e != nil:
			e.st, e.expire = st, ms+ttl
		case s.reserve(sh, ms):
			sh.m[string(k)] = &entry{st: st, expire: ms + ttl}
		default:
			sh.mu.Unlock()
			return algo.Decision{}, fmt.Errorf("deciding in memory: %w (%d keys)", ErrFull, s.maxKeys)
		}
	}
	sh.mu.Unlock()
	return r.Decision(), nil
}

// AllowAll implements [tollgate.MultiStore]: the requests, which share a
// group and so a shard, are decided under one lock on copies of their
// state, and written back only if all are allowed.
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
	if err := algo.CheckGroup(reqs); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	now := reqs[0].Now
	if now.IsZero() {
		now = s.now()
	}
	ms := now.UnixMilli()
	sh := s.shardOf(reqs[0])
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := len(reqs)
	entries := make([]*entry, n)
	states := make([]algo.State, n)
	res := make([]algo.Result, n)
	ttls := make([]int64, n)
	all := true
	for i, r := range reqs {
		e := sh.m[string(keyOf(nil, r))]
		entries[i] = e
		if e != nil && e.expire > ms {
			states[i] = e.st
			states[i].Log = e.st.Log.Clone()
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
	// Expired entries about to be rewritten are dropped first, so that a
	// sweep made room for new keys cannot delete them under us.
	fresh := 0
	for i, r := range reqs {
		if r.Cost == 0 {
			continue
		}
		if e := entries[i]; e != nil && e.expire <= ms {
			delete(sh.m, string(keyOf(nil, r)))
			s.keys.Add(-1)
			s.expired.Add(1)
			entries[i] = nil
		}
		if entries[i] == nil {
			fresh++
		}
	}
	for j := 0; j < fresh; j++ {
		if !s.reserve(sh, ms) {
			s.keys.Add(-int64(j))
			return nil, fmt.Errorf("deciding in memory: %w (%d keys)", ErrFull, s.maxKeys)
		}
	}
	for i, r := range reqs {
		if r.Cost > 0 {
			if e := entries[i]; e != nil {
				e.st, e.expire = states[i], ms+ttls[i]
			} else {
				sh.m[string(keyOf(nil, r))] = &entry{st: states[i], expire: ms + ttls[i]}
			}
		}
		ds[i] = res[i].Decision()
	}
	return ds, nil
}

// Lockout implements [tollgate.Guard].
func (s *Store) Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error) {
	if err := ctx.Err(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in memory: %w", err)
	}
	if err := req.Rule.Validate(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in memory: %w", err)
	}
	ms := s.msOf(req.Now)
	sh, k := s.slot(req.Policy, req.Subject, lockoutKind)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	var st algo.State
	if e != nil && e.expire > ms {
		st = e.st
	}
	res, ttl := algo.Lockout(req.Rule, &st, ms, req.Op)
	if req.Op == algo.LockCheck {
		return res, nil
	}
	switch {
	case e != nil:
		e.st, e.expire = st, ms+ttl
	case ttl > 0:
		if !s.reserve(sh, ms) {
			s.overflows.Add(1)
			return res, fmt.Errorf("guarding login in memory: %w", ErrFull)
		}
		sh.m[k] = &entry{st: st, expire: ms + ttl}
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
	sh, k := s.slot(req.Policy, req.Subject, leaseKind)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		if !s.reserve(sh, ms) {
			s.overflows.Add(1)
			return false, fmt.Errorf("acquiring a lease in memory: %w", ErrFull)
		}
		e = &entry{leases: map[string]int64{}}
		sh.m[k] = e
	}
	for id, exp := range e.leases {
		if exp <= ms {
			delete(e.leases, id)
		}
	}
	if int64(len(e.leases)) >= req.Limit {
		return false, nil
	}
	exp := ms + req.TTL.Milliseconds()
	e.leases[req.ID] = exp
	e.expire = max(e.expire, exp)
	return true, nil
}

// Release implements [tollgate.Leaser].
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	sh, k := s.slot(req.Policy, req.Subject, leaseKind)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[k]; e != nil {
		delete(e.leases, req.ID)
	}
	return nil
}

// slot returns the shard and key of the login guard's or a lease set's
// state for subject under policy.
func (s *Store) slot(policy, subject string, kind algo.Algorithm) (*shard, string) {
	return &s.shards[maphash.String(s.seed, subject)&s.mask], string(appendKey(nil, policy, "", subject, kind))
}

func (s *Store) msOf(t time.Time) int64 {
	if t.IsZero() {
		t = s.now()
	}
	return t.UnixMilli()
}

// reserve counts one more key, sweeping sh if the store is full (Allow
// sweeps the other shards, outside any shard lock, if that is not enough).
// The caller holds sh.mu.
func (s *Store) reserve(sh *shard, ms int64) bool {
	if s.maxKeys < 0 {
		s.keys.Add(1)
		return true
	}
	if s.keys.Add(1) <= s.maxKeys {
		return true
	}
	s.sweepShard(sh, ms)
	if s.keys.Load() <= s.maxKeys {
		return true
	}
	s.keys.Add(-1)
	return false
}

func (s *Store) sweepShard(sh *shard, ms int64) {
	var n int64
	for k, e := range sh.m {
		if e.expire <= ms {
			delete(sh.m, k)
			n++
		}
	}
	if n > 0 {
		s.keys.Add(-n)
		s.expired.Add(uint64(n))
	}
}

// Sweep drops every expired key now. The background sweep calls it.
func (s *Store) Sweep() {
	ms := s.now().UnixMilli()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepShard(sh, ms)
		sh.mu.Unlock()
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
