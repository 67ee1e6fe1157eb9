// Package redis is Tollgate's shared store: rate-limit state in Redis, so
// that many gateway instances spend one budget.
//
// Every decision is made atomically by Lua code (decide.lua, multi.lua
// for all-or-nothing groups, reserve.lua for held attempts, place.lua
// for places in a shaping queue and settle.lua for settled reservations,
// embedded in the binary with one file per algorithm), loaded as a
// function library and called with FCALL, or, where Redis refuses functions, run as scripts with EVALSHA;
// both are loaded again when Redis has lost them. The code reads the time
// from Redis itself (TIME), so all instances share one clock, and gives
// every key its TTL in the same call that writes it. State is two or three
// little-endian doubles in one string (16 or 24 bytes; 32 for a sliding
// counter a settle wrote, which records the settle's time), and a request's
// parameters travel the same way, so Redis spends its time deciding rather
// than parsing decimal text. The Lua mirrors package algo operation for
// operation on integers below 2^53, so the Redis store and the in-memory
// store reach identical decisions.
//
// Under concurrency the store coalesces decisions (and settles): requests on Redis'
// clock that arrive while earlier calls are still running are decided
// together by one script call (see [Options.MaxBatch]), each in turn and
// each on its own, as separate calls would decide them. This cuts Redis'
// CPU per decision without delaying any request: a request that finds
// Redis idle is sent at once, alone.
//
// Keys look like rl:v3:{<subject>}:<name>:<algorithm> (v1 held state
// as decimal text); the hash tag keeps
// all of one subject's keys in one Redis Cluster slot. A subject that is
// empty, longer than 64 bytes, or holds braces, spaces or control bytes is
// replaced by a hash of itself (as is one starting with "h:"), and '%' and
// ':' in a name or a grouped subject are escaped, so no input can break
// the key layout or alias another request's key (see [KeyFor]).
package redis

import (
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// KeyPrefix starts every key the store writes.
const KeyPrefix = "rl:v3:"

// explicitTimeSlack is added to every TTL when a request carries an
// explicit time: the key then expires by Redis' real clock while the
// decision runs on the caller's, and the state must outlive the test's
// notion of time. Production requests (zero Now) get exact TTLs.
const explicitTimeSlack = 10 * time.Minute

var scriptFiles = map[algo.Algorithm]string{
	algo.GCRA:                 "gcra.lua",
	algo.TokenBucket:          "token_bucket.lua",
	algo.LeakyBucket:          "leaky_bucket.lua",
	algo.FixedWindow:          "fixed_window.lua",
	algo.SlidingWindowLog:     "sliding_log.lua",
	algo.SlidingWindowCounter: "sliding_counter.lua",
}

var keySuffix = map[algo.Algorithm]string{
	algo.GCRA:                 ":gcra",
	algo.TokenBucket:          ":tb",
	algo.LeakyBucket:          ":lb",
	algo.FixedWindow:          ":fw",
	algo.SlidingWindowLog:     ":slc",
	algo.SlidingWindowCounter: ":sc",
}

// DecideScript returns the source of the script that decides one request,
// or several independent ones in order, as the store sends it to Redis
// where it cannot use the function library.
func DecideScript() (string, error) { return script("decide.lua", "decide_all") }

// OneScript returns the source of the script that decides a lone request
// on Redis' clock (decide.lua's decide_one).
func OneScript() (string, error) {
	defs, err := definitions("decide.lua")
	if err != nil {
		return "", err
	}
	return defs + "return decide_one(KEYS, ARGV)\n", nil
}

// MultiScript returns the source of the script that decides several limits
// of any algorithms all or nothing.
func MultiScript() (string, error) { return script("multi.lua", "multi_all") }

// ReserveScript returns the source of the script that holds, charges and
// gives back attempts on a rate limit (see [Store.Reserve]).
func ReserveScript() (string, error) { return script("reserve.lua", "reserve_one") }

// PlaceScript returns the source of the script that takes and gives back
// places in a shaping queue (see [Store.TakePlace]).
func PlaceScript() (string, error) { return script("place.lua", "place_op") }

// SettleScript returns the source of the script that settles a
// reservation (see [Store.SettleAll]).
func SettleScript() (string, error) { return script("settle.lua", "settle_all") }

// SettleManyScript returns the source of the script that settles several
// reservations coalesced, each on its own (settle.lua's settle_many).
func SettleManyScript() (string, error) { return script("settle.lua", "settle_many") }

// script returns the source of a script for rate-limit requests: the
// definitions with entry, then a call of entry's function fn.
func script(entry, fn string) (string, error) {
	defs, err := definitions(entry)
	if err != nil {
		return "", err
	}
	return defs + "begin(KEYS, ARGV, true)\nreset()\nreturn " + fn + "()\n", nil
}

// definitions returns the prelude, every algorithm, the shared state
// handling and the entries, which define the entry points' functions.
func definitions(entries ...string) (string, error) {
	files := []string{"prelude.lua"}
	for _, a := range algo.Algorithms() {
		files = append(files, scriptFiles[a])
	}
	return concat(append(append(files, "state.lua"), entries...)...)
}

// reqSize is the size of one packed request (see appendRequest).
const reqSize = 104

// An entry point is one way into the Lua: a function of the library and
// the script that stands in for it.
type entryPoint struct {
	fn     string
	script *rueidis.Lua
}

// preload loads the function library through c in the background, so
// that the first decisions find it rather than wait for it, and checks
// whether Redis evicts keys (checkEviction).
func (s *Store) preload(c rueidis.Client) {
	s.checks.Add(1)
	go func() {
		defer s.checks.Done()
		s.checkEviction(c)
	}()
	if s.lib == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), libraryLoadTimeout)
		defer cancel()
		s.lib.load(ctx, c)
	}()
}

// exec runs entry point e for keys and args: through the function library
// when Redis has it, else as its script.
func (s *Store) exec(ctx context.Context, c rueidis.Client, e entryPoint, keys, args []string) rueidis.RedisResult {
	if s.lib != nil {
		if res, ok := s.lib.call(ctx, c, e.fn, keys, args); ok {
			return res
		}
	}
	return e.script.Exec(ctx, c, keys, args)
}

// appendRequest appends r packed as the scripts read it (state.lua):
// thirteen little-endian doubles, the algorithm, rate, period (ms), capacity,
// cost, max delay (ms), calendar, for a calendar window the bounds of
// the windows around the request's time (algo.Limit.CalendarBounds), zeros
// otherwise, the request's queue threshold (ms, algo.Request.Within), and
// zero (see appendPushBack). Every value is an integer below 2^53 (Limit.Validate), so the
// doubles hold it exactly; Lua unpacks them in one call, where parsing
// decimal arguments costs several times more of Redis' time.
func appendRequest(b []byte, r algo.Request) []byte { return appendPushBack(b, r, 0) }

// appendPushBack appends r packed as appendRequest does, with push as its
// last double: when positive, the script pushes the schedule of r's
// shaping limit back by push ms (algo.PushBack) instead of deciding r.
func appendPushBack(b []byte, r algo.Request, push int64) []byte {
	l := r.Limit
	var cb [4]int64
	if l.Calendar != algo.NoCalendar {
		cb = l.CalendarBounds(zoneTime(r.Now))
	}
	for _, v := range [13]int64{int64(l.Algorithm), l.Rate, l.Period.Milliseconds(), l.Capacity(), r.Cost,
		l.MaxDelay.Milliseconds(), int64(l.Calendar), cb[0], cb[1], cb[2], cb[3], r.Within.Milliseconds(), push} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

func concat(names ...string) (string, error) {
	var b strings.Builder
	for _, n := range names {
		src, err := luaFiles.ReadFile("lua/" + n)
		if err != nil {
			return "", fmt.Errorf("loading script: %w", err)
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// Options configures a [Store]. The zero value is the default.
type Options struct {
	// MaxBatch is the most requests one script call decides when the
	// store coalesces concurrent requests; zero means 64, and 1 turns
	// coalescing off (every request is its own call). Only requests with
	// a zero Now (on Redis' clock) are coalesced, and on Redis Cluster only
	// requests whose keys share a hash slot.
	MaxBatch int
	// NoFunctions makes the store decide with scripts (EVALSHA) only. By
	// default it loads decide.lua as a function library and calls it with
	// FCALL, which costs Redis less per call, and falls back to scripts
	// where Redis refuses to load functions.
	NoFunctions bool
	// ConnectRetry is how often a store from [Open] tries to reach Redis
	// while it cannot; zero means 500ms.
	ConnectRetry time.Duration
	// Logger receives the error a store logs when it connects to a Redis
	// that evicts keys (see [Store.EvictionPolicy]); nil means
	// slog.Default().
	Logger *slog.Logger
}

// The compiler holds Store to the tollgate.Store contract.
var _ tollgate.Store = (*Store)(nil)

// Store is the Redis [tollgate.Store]. It is safe for concurrent use.
type Store struct {
	client  atomic.Pointer[rueidis.Client]
	connErr atomic.Pointer[error] // the last failed attempt of Open's to connect
	decide  entryPoint            // decide.lua: one request, or a batch
	multi   entryPoint            // multi.lua: several limits, all or nothing
	lib     *library              // nil with Options.NoFunctions
	lockout *rueidis.Lua
	lease   *rueidis.Lua
	reserve entryPoint // reserve.lua: attempts held on a rate limit
	place   entryPoint // place.lua: places in a shaping queue
	settle  entryPoint // settle.lua: settled reservations
	settles entryPoint // settle.lua's settle_many: several, coalesced
	one     entryPoint // decide.lua's decide_one: a lone request on Redis' clock
	owned   bool       // Open made the client; Close closes it
	log     *slog.Logger
	checks  sync.WaitGroup // the eviction check made on connecting
	stop    chan struct{}  // ends Open's connect loop
	done    chan struct{}
	once    sync.Once
	batch   batcher
}

// ErrNotConnected is returned by a store from [Open] that has not yet
// reached Redis, wrapped with the last attempt's error when there was
// one (connection refused, a wrong password).
var ErrNotConnected = errors.New("not connected to redis yet")

// New returns a Store that decides through client. The caller keeps
// ownership of client and closes it.
func New(client rueidis.Client, opts Options) (*Store, error) {
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	s.client.Store(&client)
	s.preload(client)
	close(s.done)
	return s, nil
}

func newStore(opts Options) (*Store, error) {
	if opts.MaxBatch < 0 {
		return nil, fmt.Errorf("creating redis store: MaxBatch %d is negative", opts.MaxBatch)
	}
	s := &Store{stop: make(chan struct{}), done: make(chan struct{}), log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	lib, err := newLibrary()
	if err != nil {
		return nil, fmt.Errorf("creating redis store: %w", err)
	}
	if !opts.NoFunctions {
		s.lib = lib
	}
	for _, x := range []struct {
		dst *entryPoint
		fn  string
		src func() (string, error)
	}{{&s.decide, lib.decide, DecideScript}, {&s.multi, lib.multi, MultiScript}, {&s.reserve, lib.reserve, ReserveScript}, {&s.place, lib.place, PlaceScript},
		{&s.settle, lib.settle, SettleScript}, {&s.settles, lib.settleMany, SettleManyScript}, {&s.one, lib.one, OneScript}} {
		src, err := x.src()
		if err != nil {
			return nil, fmt.Errorf("creating redis store: %w", err)
		}
		*x.dst = entryPoint{fn: x.fn, script: rueidis.NewLuaScript(src)}
	}
	s.batch.maxBatch = opts.MaxBatch
	if s.batch.maxBatch == 0 {
		s.batch.maxBatch = defaultMaxBatch
	}
	for _, x := range []struct {
		dst  **rueidis.Lua
		file string
	}{{&s.lockout, "lockout.lua"}, {&s.lease, "lease.lua"}} {
		src, err := concat("prelude.lua", x.file)
		if err != nil {
			return nil, fmt.Errorf("creating redis store: %w", err)
		}
		*x.dst = rueidis.NewLuaScript(src)
	}
	return s, nil
}

// Open returns a Store for the Redis opt describes, without waiting for
// it: while Redis cannot be reached, Allow fails with [ErrNotConnected] and
// the store keeps trying in the background (every opts.ConnectRetry), so
// a gateway can start, and serve by its failure policy, before Redis is
// up. Close stops the attempts and closes the client.
func Open(opt rueidis.ClientOption, opts Options) (*Store, error) {
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	s.owned = true
	retry := opts.ConnectRetry
	if retry <= 0 {
		retry = 500 * time.Millisecond
	}
	go func() {
		defer close(s.done)
		for {
			c, err := rueidis.NewClient(opt)
			if err == nil {
				s.client.Store(&c)
				s.preload(c)
				return
			}
			s.connErr.Store(&err)
			select {
			case <-s.stop:
				return
			case <-time.After(retry):
			}
		}
	}()
	return s, nil
}

// Close stops connecting and coalescing, waits for the batches under way,
// and, for a store from Open, closes its client (first, so that those
// batches end at once). A store from New stays usable after Close, with
// every request its own call.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.checks.Wait()
	if c := s.client.Load(); c != nil && s.owned {
		(*c).Close()
	}
	s.batch.close()
	return nil
}

// Connected reports whether the store has a client (a store from Open may
// not yet).
func (s *Store) Connected() bool { return s.client.Load() != nil }

// WaitConnected waits until the store has reached Redis and returns nil,
// or until ctx ends or the store is closed and returns [ErrNotConnected]
// with the last attempt's error.
func (s *Store) WaitConnected(ctx context.Context) error {
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	_, err := s.conn()
	return err
}

// Allow implements [tollgate.Store]. A request with an explicit Now is one
// call of decide.lua (FCALL, or EVALSHA where Redis refuses functions); one
// on Redis' clock may share its call with concurrent ones (see
// [Options.MaxBatch]). If ctx ends first, Allow returns its error; the
// request may still be decided, as with any call that times out.
func (s *Store) Allow(ctx context.Context, req algo.Request) (algo.Decision, error) {
	if err := checkRequest(&req); err != nil {
		return algo.Decision{}, fmt.Errorf("deciding in redis: %w", err)
	}
	return s.allow(ctx, req, 0)
}

// PushBack implements [tollgate.Shaper]: one call of decide.lua (or a
// share of a coalesced one) postpones the schedule of req's shaping limit
// by d on Redis' clock (on req.Now if set), for every instance sharing
// the key, and reports a query of it; see [algo.PushBack]. req's Cost and
// Within are ignored.
func (s *Store) PushBack(ctx context.Context, req algo.Request, d time.Duration) (algo.Decision, error) {
	req.Cost, req.Within = 0, 0
	if err := checkRequest(&req); err != nil {
		return algo.Decision{}, fmt.Errorf("pushing back in redis: %w", err)
	}
	pl, err := req.Limit.Prepare()
	if err == nil {
		pl, err = pl.PushingBack(d)
	}
	if err != nil {
		return algo.Decision{}, fmt.Errorf("pushing back in redis: %w", err)
	}
	return s.allow(ctx, req, int64((d+time.Millisecond-1)/time.Millisecond))
}

// allow decides req, checked, or with push > 0 pushes its schedule back.
func (s *Store) allow(ctx context.Context, req algo.Request, push int64) (algo.Decision, error) {
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return algo.Decision{}, err
	}
	c, err := s.conn()
	if err != nil {
		return algo.Decision{}, fmt.Errorf("deciding in redis: %w", err)
	}
	key := KeyFor(req)
	var packed [reqSize]byte
	appendPushBack(packed[:0], req, push)
	var o outcome
	if req.Now.IsZero() && s.batch.maxBatch > 1 {
		o = s.coalesced(ctx, c, key, &packed, nil)
	} else {
		o = s.single(ctx, c, key, now, slack, packed[:])
	}
	if o.err != nil {
		return algo.Decision{}, fmt.Errorf("deciding in redis: %w", o.err)
	}
	return o.decision(req.Limit), nil
}

// zoneTime is the time around which a calendar limit's windows are
// computed: the request's, or this process's clock when Redis' TIME
// decides. The script finds Redis' time among the windows before, at and
// after it, so the two clocks may differ by up to a day (a month).
func zoneTime(t time.Time) int64 {
	if t.IsZero() {
		return time.Now().UnixMilli()
	}
	return t.UnixMilli()
}

// timeArgs returns the now and slack script arguments for a request time.
func timeArgs(t time.Time) (now, slack string, err error) {
	if t.IsZero() {
		return "", "0", nil
	}
	ms := t.UnixMilli()
	if ms < 0 {
		return "", "", fmt.Errorf("deciding in redis: time %v is before the Unix epoch", t)
	}
	return strconv.FormatInt(ms, 10), strconv.FormatInt(explicitTimeSlack.Milliseconds(), 10), nil
}

// AllowAll implements [tollgate.Store]: one script call decides every
// request, all or nothing. The requests share a group, so their keys share
// a hash tag and one Cluster slot.
func (s *Store) AllowAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
	if err := algo.CheckGroup(reqs); err != nil {
		return nil, fmt.Errorf("deciding in redis: %w", err)
	}
	now, slack, err := timeArgs(reqs[0].Now)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(reqs))
	packed := make([]byte, 0, reqSize*len(reqs))
	for i, r := range reqs {
		keys[i] = KeyFor(r)
		packed = appendRequest(packed, r)
	}
	c, err := s.conn()
	if err != nil {
		return nil, fmt.Errorf("deciding in redis: %w", err)
	}
	outs, err := outcomes(s.exec(ctx, c, s.multi, keys, []string{now, slack, string(packed)}), len(reqs))
	if err != nil {
		return nil, fmt.Errorf("deciding in redis: %w", err)
	}
	ds := make([]algo.Decision, len(reqs))
	for i, r := range reqs {
		if outs[i].err != nil {
			return nil, fmt.Errorf("deciding in redis: %w", &algo.ItemError{Index: i, Err: outs[i].err})
		}
		ds[i] = outs[i].decision(r.Limit)
	}
	return ds, nil
}

// checkRequest validates req's limit, unless it comes with its handle
// (validated when the handle was made), its cost and its queue threshold.
func checkRequest(req *algo.Request) error {
	if req.Prepared() == nil {
		if err := req.Limit.Validate(); err != nil {
			return err
		}
	}
	if err := req.CheckWithin(); err != nil {
		return err
	}
	return req.Limit.CheckCost(req.Cost)
}

// Client returns the store's Redis client, or ErrNotConnected while a
// store from Open has not reached Redis yet; for callers that keep other
// state beside the budgets (a gateway's runtime state).
func (s *Store) Client() (rueidis.Client, error) { return s.conn() }

// conn returns the client, or ErrNotConnected for a store from Open that
// has not reached Redis yet.
func (s *Store) conn() (rueidis.Client, error) {
	c := s.client.Load()
	if c == nil {
		if err := s.connErr.Load(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotConnected, *err)
		}
		return nil, ErrNotConnected
	}
	return *c, nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("pinging redis: %w", err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("pinging redis: %w", err)
	}
	return nil
}
