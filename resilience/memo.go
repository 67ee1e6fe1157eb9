package resilience

import (
	"hash/maphash"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// memo remembers, for each key (name, algorithm, tag, subject), what the
// store last decided for it and what the local fallback did since:
//
//   - the store's last decision: what remained and when the whole
//     capacity is back, as of when it was received. The fallback starts
//     the key from it, not from a full budget;
//   - what the fallback admitted and has not yet charged to the store
//     (owed), and until when that counts. The key's next request to the
//     store carries it;
//   - which local state the fallback decides the key in (epoch): a new one
//     each time the store has decided since the last was started, so that
//     a local state never counts what the store already knows.
//
// It is sharded and bounded by a number of keys: a full shard evicts, of a
// few entries taken at random (map order), the one whose knowledge ends
// first. An evicted key is as one this instance never saw.
type memo struct {
	seed   maphash.Seed
	shards [memoShards]memoShard
	per    int
	epochs atomic.Uint64
}

// memoShards is the number of independently locked shards: every decision
// the store makes is recorded, so they must not contend.
const memoShards = 64

type memoShard struct {
	mu sync.Mutex
	m  map[memoKey]*memoEntry
}

// memoKey is a request's key, as the stores tell states apart, long parts
// held as digests, so that what the memo keeps per key is bounded as the
// number of keys is (see [algo.StateKey]).
type memoKey = algo.StateKey

func keyOf(r *algo.Request) memoKey { return algo.StateKeyOf(r) }

// memoEntry is what this instance knows of one key. Times are in ms since
// the epoch, on this instance's clock.
type memoEntry struct {
	limit algo.Limit // the limit it is about; a request under another starts afresh

	seen      bool  // the store has decided for the key
	remaining int64 // what the store said remained
	at        int64 // when that answer was received
	reset     int64 // when the store said the whole capacity is back

	epoch uint64 // the local state the fallback decides in; 0: none yet
	stale bool   // the store has decided since that local state was started

	owed      int64 // admitted by the fallback, not yet charged to the store
	owedUntil int64 // when what is owed stops counting
	// paying is open while a request carries what is owed to the store:
	// the key's other requests wait for it, rather than pass without.
	paying chan struct{}
}

// forget resets e for limit l, waking whoever waits on it.
func (e *memoEntry) forget(l *algo.Limit) {
	if e.paying != nil {
		close(e.paying)
	}
	*e = memoEntry{limit: *l}
}

// owedAt returns what is owed at now, forgetting it once it has expired.
func (e *memoEntry) owedAt(now int64) int64 {
	if e.owed > 0 && now >= e.owedUntil {
		e.owed, e.owedUntil = 0, 0
	}
	return e.owed
}

// until is when the entry stops being worth more than no entry.
func (e *memoEntry) until() int64 {
	t := e.owedUntil
	if e.seen {
		t = max(t, e.reset)
	}
	return t
}

// memoSample is how many entries a full shard looks at to pick one to
// evict.
const memoSample = 16

func newMemo(size int) *memo {
	m := &memo{seed: maphash.MakeSeed(), per: max(1, size/memoShards)}
	for i := range m.shards {
		m.shards[i].m = map[memoKey]*memoEntry{}
	}
	return m
}

func (m *memo) shard(k *memoKey) *memoShard {
	return &m.shards[maphash.String(m.seed, k.Subject)%memoShards]
}

// entry returns k's entry for limit l, creating it (and making room for
// it) if there is none or it is about another limit. The caller holds
// sh.mu.
func (m *memo) entry(sh *memoShard, k memoKey, l *algo.Limit, now int64) *memoEntry {
	e := sh.m[k]
	if e != nil {
		if !sameLimit(&e.limit, l) {
			e.forget(l)
		}
		return e
	}
	if len(sh.m) >= m.per {
		// Full: evict, of a few entries, the one whose knowledge ends
		// first (one that has ended, if the sample holds one), so that no
		// insertion pays for a scan of the shard.
		var victim memoKey
		var end int64
		n := 0
		for k2, e2 := range sh.m {
			if u := e2.until(); n == 0 || u < end {
				victim, end = k2, u
			}
			if n++; n == memoSample || end <= now {
				break
			}
		}
		sh.m[victim].forget(l)
		delete(sh.m, victim)
	}
	e = &memoEntry{limit: *l}
	sh.m[k] = e
	return e
}

// lookup returns k's entry for limit l, or nil. The caller holds sh.mu.
func lookup(sh *memoShard, k *memoKey, l *algo.Limit) *memoEntry {
	e := sh.m[*k]
	if e == nil || !sameLimit(&e.limit, l) {
		return nil
	}
	return e
}

// A debt is what a key owes the store, carried by one of its requests.
type debt struct {
	extra  int64         // what the request carries on top of its cost
	paying chan struct{} // closed when it is settled; nil with no debt
}

// take returns what req carries to the store of what its key owes, on
// top of its cost: all of it, up to the capacity (none for a query, which
// charges nothing). The key's other requests then wait until the debt is
// settled; while another request carries it, take returns that request's
// channel to wait on instead.
func (m *memo) take(req *algo.Request, now int64) (d debt, wait <-chan struct{}) {
	if req.Cost == 0 {
		return d, nil
	}
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := lookup(sh, &k, &req.Limit)
	if e == nil {
		return d, nil
	}
	if e.paying != nil {
		return d, e.paying
	}
	d.extra = min(e.owedAt(now), req.Limit.Capacity()-req.Cost)
	if d.extra <= 0 {
		return debt{}, nil
	}
	e.owed -= d.extra
	e.paying = make(chan struct{})
	d.paying = e.paying
	return d, nil
}

// settle ends a debt taken for req: paid, or given back to the key when
// the store did not charge it.
func (m *memo) settle(req *algo.Request, d debt, paid bool) {
	if d.paying == nil {
		return
	}
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil || e.paying != d.paying {
		return // forgotten meanwhile, which closed the channel
	}
	if !paid {
		e.owed += d.extra
	}
	close(e.paying)
	e.paying = nil
}

// record remembers the store's decision d for req, received at now, and
// returns what the key still owes (what d does not know of).
func (m *memo) record(req *algo.Request, d *algo.Decision, now int64) int64 {
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := m.entry(sh, k, &req.Limit, now)
	e.seen, e.remaining, e.at, e.reset = true, d.Remaining, now, now+d.ResetAfter.Milliseconds()
	e.stale = true
	return e.owedAt(now)
}

// seeder puts a key's starting state into a fresh local state: it charges
// req (cost, time) to the local store.
type seeder func(req algo.Request) error

// local returns the request that decides req in the fallback's local
// store, under share, the instance's share of req's limit. If the key has
// no local state yet, or the store has decided for it since its local
// state was started, it starts a new one from what the store last said:
// the share of what remained (less what the key owes), charged as of when
// the store said it, so that it comes back when it would have on the
// store; without such an answer, or after it has reset, a full share.
// With known set, a key the store has not decided for since this instance
// started (or remembered it) is refused with errUnknown.
func (m *memo) local(req *algo.Request, share *algo.Limit, now int64, known bool, seed seeder) (algo.Request, error) {
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := m.entry(sh, k, &req.Limit, now)
	if known && !e.seen {
		return algo.Request{}, errUnknown
	}
	if e.epoch == 0 || e.stale {
		c, s := req.Limit.Capacity(), share.Capacity()
		left, at := c, now
		if e.seen && now < e.reset {
			left, at = e.remaining, min(e.at, now)
		}
		left = max(0, left-e.owedAt(now))
		// The share of what is left, rounded down (left × s may not fit
		// in 64 bits; it is below c × 2^64).
		hi, lo := bits.Mul64(uint64(left), uint64(s))
		q, _ := bits.Div64(hi, lo, uint64(c))
		spent := s - int64(q)
		e.epoch, e.stale = m.epochs.Add(1), false
		if spent > 0 {
			r := localRequest(req, share, e.epoch)
			r.Cost, r.Now = min(spent, s), time.UnixMilli(at)
			if err := seed(r); err != nil {
				e.epoch = 0
				return algo.Request{}, err
			}
		}
	}
	return localRequest(req, share, e.epoch), nil
}

// localRequest is req in the local state of the given epoch: the subject
// carries the epoch, and the tag keeps the group together.
func localRequest(req *algo.Request, share *algo.Limit, epoch uint64) algo.Request {
	r := *req
	r.Limit = *share
	r.Tag = req.Group()
	r.Subject = req.Subject + "\x00" + strconv.FormatUint(epoch, 10)
	return r
}

// owe records that the fallback admitted req, decided as d at now.
func (m *memo) owe(req *algo.Request, d *algo.Decision, now int64) {
	if req.Cost == 0 {
		return
	}
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := lookup(sh, &k, &req.Limit); e != nil {
		e.owedAt(now)
		e.owed += req.Cost
		e.owedUntil = max(e.owedUntil, now+d.ResetAfter.Milliseconds())
	}
}

// len returns the number of keys remembered.
func (m *memo) len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// sameLimit reports whether a and b are the same limit. Zones compare by
// name: a reloaded policy loads its zones again.
func sameLimit(a, b *algo.Limit) bool {
	if a.Rate != b.Rate || a.Period != b.Period || a.Algorithm != b.Algorithm || a.Burst != b.Burst ||
		a.MaxDelay != b.MaxDelay || a.Calendar != b.Calendar {
		return false
	}
	return a.Zone == b.Zone || a.Zone != nil && b.Zone != nil && a.Zone.String() == b.Zone.String()
}

// owes reports whether req's key has admissions of the fallback not yet
// charged to the store, or a request carrying them now.
func (m *memo) owes(req *algo.Request, now int64) bool {
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := lookup(sh, &k, &req.Limit)
	return e != nil && (e.owedAt(now) > 0 || e.paying != nil)
}

// forget drops what is remembered of req's key.
func (m *memo) forget(req *algo.Request) {
	k := keyOf(req)
	sh := m.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.m, k)
}
