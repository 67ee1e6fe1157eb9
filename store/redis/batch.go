package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
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
// its own call of decide.lua, exactly as without batching: at low load
// nothing waits and nothing changes. A request that finds every call busy
// joins the lane's queue; when a call finishes and the queue is not empty,
// that call's turn passes to a flusher goroutine, which sends whatever is
// queued (up to MaxBatch requests) as one call of decide.lua, and again
// until the queue is empty, then exits. So batches form only while Redis
// is busy, as large as the concurrency makes them, and no timer ever holds
// a request back. decide.lua reads each key once and writes each key once
// per call, so a hot key's batch costs Redis one GET and one SET. A request
// in a batch that fails fails alone (decide.lua catches its error); a batch
// that Redis refuses with TRYAGAIN (its slot is migrating, with keys on
// both nodes) is decided request by request.
//
// Settles on Redis' clock share the lanes: a pending request is a
// decision or, with its settle set, a settlement (all of whose keys are
// in one slot). A settle that finds a call free makes its own call of
// settle_all; one queued behind busy calls goes out in the flusher's next
// batch, where the batch's settles are sent as one call of settle_many
// (after its decisions' one call of decide_all, in the same turn).
// settle_many settles them in order, each as settle_all alone would,
// once per ID and failing alone. Sharing the lanes, rather than giving
// settles lanes of their own, keeps maxCalls the bound on what one
// store runs at once on a Redis, and the machinery one.

// defaultMaxBatch is the largest batch when Options.MaxBatch is zero.
const defaultMaxBatch = 64

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// maxCalls is how many script calls one lane runs at once: one per
// GOMAXPROCS, at least 2 and at most 4. Redis runs one script at a time, so
// a few calls in flight keep it busy across the round trip while the next
// batch gathers; more would only make the batches smaller.
var maxCalls = min(max(2, runtime.GOMAXPROCS(0)), 4)

// pending is a request waiting in a lane's queue: a decision, or a
// settlement if settle is set (its answer then in settle.out, written
// before res is sent).
type pending struct {
	ctx    context.Context
	key    string
	packed [reqSize]byte // a decision's: see appendRequest
	settle *settleCall
	res    chan outcome // buffered: the flusher never waits for the caller
}

// pendings recycles the pendings (and their channels) of answered
// requests; one whose caller gave up is left to the collector, since a
// flusher may still answer it.
var pendings = sync.Pool{New: func() any { return &pending{res: make(chan outcome, 1)} }}

// outcome is a script's answer to one request: the five values of finish,
// or the request's own error.
type outcome struct {
	vals [5]int64
	err  error
}

// decision returns the decision o reports for a request under l.
func (o outcome) decision(l algo.Limit) algo.Decision {
	v := o.vals
	return algo.Result{Allowed: v[0] == 1, Quota: l.Capacity(), Remaining: v[1], ResetAfter: v[2], RetryAfter: v[3], Delay: v[4]}.Decision()
}

// outcomes decodes a script's answer to k requests (state.lua's answer):
// one string of 5k little-endian doubles or, when some requests failed, an
// array of that string and the index (from 1) and error text of each.
func outcomes(res rueidis.RedisResult, k int) ([]outcome, error) {
	outs := make([]outcome, k)
	if err := decodeOutcomes(res, outs); err != nil {
		return nil, err
	}
	return outs, nil
}

// decodeOutcomes decodes a script's answer into outs, one per request. It
// returns the call's error, if it failed as a whole.
func decodeOutcomes(res rueidis.RedisResult, outs []outcome) error {
	msg, err := res.ToMessage()
	if err != nil {
		return err
	}
	packed, err := msg.ToString()
	var msgs []rueidis.RedisMessage
	if err != nil {
		if msgs, err = msg.ToArray(); err != nil {
			return fmt.Errorf("reading script answer: %w", err)
		}
		if len(msgs)%2 != 1 {
			return fmt.Errorf("script answered %d values, want a string and pairs", len(msgs))
		}
		if packed, err = msgs[0].ToString(); err != nil {
			return fmt.Errorf("reading script answer: %w", err)
		}
	}
	if len(packed) != 40*len(outs) {
		return fmt.Errorf("script answered %d bytes for %d requests, want %d", len(packed), len(outs), 40*len(outs))
	}
	for i := range outs {
		if err := decodeInts(packed[40*i:40*i+40], outs[i].vals[:]); err != nil {
			return err
		}
	}
	for p := 1; p < len(msgs); p += 2 {
		i, err := msgs[p].AsInt64()
		if err != nil || i < 1 || int(i) > len(outs) {
			return fmt.Errorf("script answered an error for request %v of %d", msgs[p], len(outs))
		}
		text, err := msgs[p+1].ToString()
		if err != nil {
			return fmt.Errorf("reading script error: %w", err)
		}
		outs[i-1] = outcome{err: requestError(text)}
	}
	return nil
}

// decodeInts decodes packed, little-endian doubles holding integers below
// 2^53 as the scripts write them, into vals (len(packed) = 8 × len(vals)).
func decodeInts(packed string, vals []int64) error {
	for i := range vals {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(packed[8*i : 8*i+8])))
		if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return fmt.Errorf("script answered %v, not an integer", f)
		}
		vals[i] = int64(f)
	}
	return nil
}

// requestError is the error the script reports for one request (say,
// WRONGTYPE on a key written by something else).
type requestError string

func (e requestError) Error() string { return string(e) }

// lane is one coalescing domain: its queue and the calls running for it.
type lane struct {
	mu    sync.Mutex
	queue []*pending
	busy  int // script calls running: callers' own and flushers'
}

// batcher is the coalescing state of a [Store].
type batcher struct {
	maxBatch  int       // 1: no batching
	whole     lane      // standalone and Sentinel
	slotsOnce sync.Once // allocates slots on first use on a Cluster
	slots     *[clusterSlots]atomic.Pointer[lane]
	mu        sync.Mutex // orders closed against flushers.Add
	closed    atomic.Bool
	flushers  sync.WaitGroup
}

// single decides one request with its own call of decide.lua (its
// decide_one on Redis' clock).
func (s *Store) single(ctx context.Context, c rueidis.Client, key, now, slack string, packed []byte) outcome {
	e := s.decide
	if now == "" {
		e = s.one
	}
	var outs [1]outcome
	if err := decodeOutcomes(s.exec(ctx, c, e, []string{key}, []string{now, slack, string(packed)}), outs[:]); err != nil {
		return outcome{err: err}
	}
	return outs[0]
}

// alone makes a request's own call on Redis' clock: of decide.lua for a
// decision (packed), of settle.lua for a settlement (sc).
func (s *Store) alone(ctx context.Context, c rueidis.Client, key string, packed *[reqSize]byte, sc *settleCall) outcome {
	if sc != nil {
		return s.settleOne(ctx, c, sc)
	}
	return s.single(ctx, c, key, "", "0", packed[:])
}

// coalesced decides a request on Redis' clock (packed), or settles a
// settlement on it (sc, key its first item's), alone if a call is free in
// its lane, else in the lane's next batch.
func (s *Store) coalesced(ctx context.Context, c rueidis.Client, key string, packed *[reqSize]byte, sc *settleCall) outcome {
	b := &s.batch
	if b.closed.Load() {
		return s.alone(ctx, c, key, packed, sc)
	}
	ln := b.laneFor(c, key)
	ln.mu.Lock()
	if ln.busy < maxCalls { // then the queue is empty: see release
		ln.busy++
		ln.mu.Unlock()
		o := s.alone(ctx, c, key, packed, sc)
		s.release(ln)
		return o
	}
	p := pendings.Get().(*pending)
	p.ctx, p.key, p.settle = ctx, key, sc
	if sc == nil {
		p.packed = *packed
	}
	ln.queue = append(ln.queue, p)
	ln.mu.Unlock()
	select {
	case o := <-p.res:
		p.ctx, p.key, p.settle = nil, "", nil
		pendings.Put(p) // answered: nothing refers to it any more
		return o
	case <-ctx.Done():
		return outcome{err: ctx.Err()} // the request may yet be decided, as after a timeout
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

// send sends a batch: its decisions with one call of decide.lua, then its
// settles with one of settle_many (sendSettles), and hands out the
// results. Requests whose callers have gone are dropped; a lone one
// makes its own call (alone).
func (s *Store) send(batch []*pending) {
	live := batch[:0]
	var settles []*pending
	for _, p := range batch {
		switch {
		case p.ctx.Err() != nil:
		case p.settle != nil:
			settles = append(settles, p)
		default:
			live = append(live, p)
		}
	}
	c := *s.client.Load() // set: the requests were made through it
	s.sendDecisions(c, live)
	s.sendSettles(c, settles)
}

// sendDecisions decides live decisions with one call of decide.lua.
func (s *Store) sendDecisions(c rueidis.Client, live []*pending) {
	if len(live) < 2 {
		s.oneByOne(c, live)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	keys := make([]string, len(live))
	packed := make([]byte, 0, reqSize*len(live))
	for i, p := range live {
		keys[i] = p.key
		packed = append(packed, p.packed[:]...)
	}
	res := s.exec(ctx, c, s.decide, keys, []string{"", "0", string(packed)})
	if tryAgain(res) {
		s.oneByOne(c, live)
		return
	}
	outs, err := outcomes(res, len(live))
	for i, p := range live {
		if err != nil {
			p.res <- outcome{err: err}
		} else {
			p.res <- outs[i]
		}
	}
}

// tryAgain reports whether Redis refused a batch with TRYAGAIN: a Cluster
// slot in migration has some of its keys on each node, and Redis ran
// nothing. Its requests are then sent one by one (oneByOne), each
// following its own redirection.
func tryAgain(res rueidis.RedisResult) bool {
	re, ok := rueidis.IsRedisErr(res.Error())
	return ok && re.IsTryAgain()
}

// oneByOne makes each of the live requests' own call, at once.
func (s *Store) oneByOne(c rueidis.Client, live []*pending) {
	if len(live) == 1 {
		p := live[0]
		p.res <- s.alone(p.ctx, c, p.key, &p.packed, p.settle)
		return
	}
	var wg sync.WaitGroup
	for _, p := range live {
		wg.Go(func() { p.res <- s.alone(p.ctx, c, p.key, &p.packed, p.settle) })
	}
	wg.Wait()
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
