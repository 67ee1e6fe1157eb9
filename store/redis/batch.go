package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
)

// Coalescing. Requests on Redis' clock (zero Now) go through a lane: the
// whole server on a standalone or Sentinel deployment, one hash slot on a
// Cluster (one script call may only touch one slot). A lane lets at most
// maxCalls script calls run at once. A request that finds a call free makes
// its own call, through its algorithm's script, exactly as without
// batching: at low load nothing waits and nothing changes. A request that
// finds every call busy joins the lane's queue; when a call finishes and
// the queue is not empty, that call's turn passes to a flusher goroutine,
// which sends whatever is queued (up to MaxBatch requests) as one call of
// batch.lua, and again until the queue is empty, then exits. So batches
// form only while Redis is busy, as large as the concurrency makes them,
// and no timer ever holds a request back. A request in a batch that fails
// fails alone (batch.lua catches its error); a batch that Redis refuses
// with TRYAGAIN (its slot is migrating, with keys on both nodes) is decided
// request by request.

// defaultMaxBatch is the largest batch when Options.MaxBatch is zero.
const defaultMaxBatch = 64

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// maxCalls is how many script calls one lane runs at once: one per
// GOMAXPROCS, at least 2 and at most 4. Redis runs one script at a time, so
// a few calls in flight keep it busy across the round trip while the next
// batch gathers; more would only make the batches smaller.
var maxCalls = min(max(2, runtime.GOMAXPROCS(0)), 4)

// pending is a request waiting in a lane's queue.
type pending struct {
	ctx  context.Context
	alg  algo.Algorithm
	key  string
	args []string     // see requestArgs
	res  chan outcome // buffered: the flusher never waits for the caller
}

// outcome is a script's answer to one request: the five values of finish.
type outcome struct {
	vals []int64
	err  error
}

// lane is one coalescing domain: its queue and the calls running for it.
type lane struct {
	mu    sync.Mutex
	queue []*pending
	busy  int // script calls running: callers' own and flushers'
}

// batcher is the coalescing state of a [Store].
type batcher struct {
	maxBatch  int          // 1: no batching
	script    *rueidis.Lua // batch.lua
	whole     lane         // standalone and Sentinel
	slotsOnce sync.Once    // allocates slots on first use on a Cluster
	slots     *[clusterSlots]atomic.Pointer[lane]
	mu        sync.Mutex // orders closed against flushers.Add
	closed    atomic.Bool
	flushers  sync.WaitGroup
}

// BatchScript returns the source of the script that decides several
// independent requests, in order, in one call.
func BatchScript() (string, error) {
	files := []string{"prelude.lua"}
	for _, a := range algo.Algorithms() {
		files = append(files, scriptFiles[a])
	}
	return concat(append(files, "batch.lua")...)
}

// requestArgs encodes a request for either script: the algorithm, then the
// nine arguments of its single script (now, slack, rate, period, capacity,
// cost, max delay, calendar, zone offset). The single script takes
// args[1:]; batch.lua takes args[0] and args[3:] per request.
func requestArgs(r algo.Request, now, slack string) []string {
	l := r.Limit
	return []string{
		strconv.Itoa(int(l.Algorithm)),
		now,
		slack,
		strconv.FormatInt(l.Rate, 10),
		strconv.FormatInt(l.Period.Milliseconds(), 10),
		strconv.FormatInt(l.Capacity(), 10),
		strconv.FormatInt(r.Cost, 10),
		strconv.FormatInt(l.MaxDelay.Milliseconds(), 10),
		strconv.Itoa(int(l.Calendar)),
		strconv.FormatInt(l.ZoneOffset(zoneTime(r.Now)), 10),
	}
}

// single decides one request with its algorithm's script.
func (s *Store) single(ctx context.Context, c rueidis.Client, a algo.Algorithm, key string, args []string) ([]int64, error) {
	vals, err := s.scripts[a].Exec(ctx, c, []string{key}, args[1:]).AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(vals) != 5 {
		return nil, fmt.Errorf("script returned %d values, want 5", len(vals))
	}
	return vals, nil
}

// coalesced decides a request on Redis' clock, alone if a call is free in
// its lane, else in the lane's next batch.
func (s *Store) coalesced(ctx context.Context, c rueidis.Client, a algo.Algorithm, key string, args []string) ([]int64, error) {
	b := &s.batch
	if b.closed.Load() {
		return s.single(ctx, c, a, key, args)
	}
	ln := b.laneFor(c, key)
	ln.mu.Lock()
	if ln.busy < maxCalls { // then the queue is empty: see release
		ln.busy++
		ln.mu.Unlock()
		vals, err := s.single(ctx, c, a, key, args)
		s.release(ln)
		return vals, err
	}
	p := &pending{ctx: ctx, alg: a, key: key, args: args, res: make(chan outcome, 1)}
	ln.queue = append(ln.queue, p)
	ln.mu.Unlock()
	select {
	case o := <-p.res:
		return o.vals, o.err
	case <-ctx.Done():
		return nil, ctx.Err() // the request may yet be decided, as after a timeout
	}
}

// release ends a caller's own call: if requests queued up meanwhile, the
// call's turn passes to a flusher for them.
func (s *Store) release(ln *lane) {
	ln.mu.Lock()
	if len(ln.queue) == 0 {
		ln.busy--
		ln.mu.Unlock()
		return
	}
	ln.mu.Unlock()
	b := &s.batch
	b.mu.Lock()
	if !b.closed.Load() {
		b.flushers.Add(1)
		b.mu.Unlock()
		go func() {
			defer b.flushers.Done()
			s.flush(ln)
		}()
		return
	}
	b.mu.Unlock()
	s.flush(ln) // closing: serve the stragglers here rather than start a goroutine
}

// flush sends the lane's queue in batches until it is empty, then gives up
// its turn.
func (s *Store) flush(ln *lane) {
	for {
		ln.mu.Lock()
		n := min(len(ln.queue), s.batch.maxBatch)
		if n == 0 {
			ln.busy--
			ln.mu.Unlock()
			return
		}
		batch := make([]*pending, n)
		copy(batch, ln.queue)
		clear(ln.queue[:n])
		if n == len(ln.queue) {
			ln.queue = ln.queue[:0]
		} else {
			ln.queue = ln.queue[n:]
		}
		ln.mu.Unlock()
		s.send(batch)
	}
}

// send decides a batch with one script call and hands out the results.
// Requests whose callers have gone are dropped; a lone request goes
// through its algorithm's script.
func (s *Store) send(batch []*pending) {
	live := batch[:0]
	for _, p := range batch {
		if p.ctx.Err() == nil {
			live = append(live, p)
		}
	}
	c := *s.client.Load() // set: the requests were made through it
	switch len(live) {
	case 0:
		return
	case 1:
		p := live[0]
		vals, err := s.single(p.ctx, c, p.alg, p.key, p.args)
		p.res <- outcome{vals, err}
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	keys := make([]string, len(live))
	args := make([]string, 0, 3+8*len(live))
	args = append(args, "", "0", strconv.Itoa(len(live)))
	for i, p := range live {
		keys[i] = p.key
		args = append(args, p.args[0])
		args = append(args, p.args[3:]...)
	}
	msgs, err := s.batch.script.Exec(ctx, c, keys, args).ToArray()
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsTryAgain() {
		// A Cluster slot in migration has some of the keys on each node,
		// and Redis ran nothing: decide the requests one by one, each
		// following its own redirection.
		var wg sync.WaitGroup
		for _, p := range live {
			wg.Go(func() {
				vals, err := s.single(p.ctx, c, p.alg, p.key, p.args)
				p.res <- outcome{vals, err}
			})
		}
		wg.Wait()
		return
	}
	if err == nil && len(msgs) != 5*len(live) {
		err = fmt.Errorf("batch script returned %d values, want %d", len(msgs), 5*len(live))
	}
	if err != nil {
		for _, p := range live {
			p.res <- outcome{err: err}
		}
		return
	}
	vals := make([]int64, len(msgs))
	for i, p := range live {
		o := outcome{vals: vals[5*i : 5*i+5 : 5*i+5]}
		for j := range 5 {
			if o.vals[j], err = msgs[5*i+j].AsInt64(); err != nil {
				o = outcome{err: err}
				break
			}
		}
		p.res <- o
	}
}

// batchContext returns the context of a batch's call: no cancellation (one
// caller giving up must not fail the others), and the latest of the
// callers' deadlines if they all have one.
func batchContext(live []*pending) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, p := range live {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// laneFor returns the lane of key: the whole server, or on a Cluster (or
// any deployment not known to have a single master) the key's hash slot.
func (b *batcher) laneFor(c rueidis.Client, key string) *lane {
	switch c.Mode() {
	case rueidis.ClientModeStandalone, rueidis.ClientModeSentinel:
		return &b.whole
	}
	b.slotsOnce.Do(func() { b.slots = new([clusterSlots]atomic.Pointer[lane]) })
	p := &b.slots[keySlot(key)]
	if ln := p.Load(); ln != nil {
		return ln
	}
	p.CompareAndSwap(nil, &lane{})
	return p.Load()
}

// close stops new batches and waits for the running flushers to finish.
// Requests made afterwards each make their own call.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed.Store(true)
	b.mu.Unlock()
	b.flushers.Wait()
}

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag — what lies between the first '{' and the next '}', if that
// is not empty — or else of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^key[k]]
	}
	return crc % clusterSlots
}

// crc16Table is the CRC16-CCITT (XMODEM, polynomial 0x1021) lookup table.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
