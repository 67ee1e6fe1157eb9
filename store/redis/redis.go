// Package redis is Tollgate's shared store: rate-limit state in Redis, so
// that many gateway instances spend one budget.
//
// Every decision is made atomically by Lua code (decide.lua, multi.lua
// for all-or-nothing groups and reserve.lua for held attempts, embedded in the binary with one
// file per algorithm), loaded as a function library and called with
// FCALL, or, where Redis refuses functions, run as scripts with EVALSHA;
// both are loaded again when Redis has lost them. The code reads the time
// from Redis itself (TIME), so all instances share one clock, and gives
// every key its TTL in the same call that writes it. State is two or three
// little-endian doubles in one string (16 or 24 bytes), and a request's
// parameters travel the same way, so Redis spends its time deciding rather
// than parsing decimal text. The Lua mirrors package algo operation for
// operation on integers below 2^53, so the Redis store and the in-memory
// store reach identical decisions.
//
// Under concurrency the store coalesces decisions: requests on Redis'
// clock that arrive while earlier calls are still running are decided
// together by one script call (see [Options.MaxBatch]), each in turn and
// each on its own, as separate calls would decide them. This cuts Redis'
// CPU per decision without delaying any request: a request that finds
// Redis idle is sent at once, alone.
//
// Keys look like rl:v3:{<subject>}:<policy>:<algorithm> (v1 held state
// as decimal text); the hash tag keeps
// all of one subject's keys in one Redis Cluster slot. A subject that is
// empty, longer than 64 bytes, or holds braces, spaces or control bytes is
// replaced by a hash of itself (as is one starting with "h:"), and '%' and
// ':' in a policy or a grouped subject are escaped, so no input can break
// the key layout or alias another request's key (see [KeyFor]).
package redis

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

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
	algo.SlidingWindowLog:     ":sl",
	algo.SlidingWindowCounter: ":sc",
}

// DecideScript returns the source of the script that decides one request,
// or several independent ones in order, as the store sends it to Redis
// where it cannot use the function library.
func DecideScript() (string, error) { return script("decide.lua", "decide_all") }

// MultiScript returns the source of the script that decides several limits
// of any algorithms all or nothing.
func MultiScript() (string, error) { return script("multi.lua", "multi_all") }

// ReserveScript returns the source of the script that holds, charges and
// gives back attempts on a rate limit (see [Store.Reserve]).
func ReserveScript() (string, error) { return script("reserve.lua", "reserve_one") }

// script returns the source of a script for rate-limit requests: the
// definitions with entry, then a call of entry's function fn.
func script(entry, fn string) (string, error) {
	defs, err := definitions(entry)
	if err != nil {
		return "", err
	}
	return defs + "begin(KEYS, ARGV)\nreset()\nreturn " + fn + "()\n", nil
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
const reqSize = 88

// An entry point is one way into the Lua: a function of the library and
// the script that stands in for it.
type entryPoint struct {
	fn     string
	script *rueidis.Lua
}

// preload loads the function library through c in the background, so
// that the first decisions find it rather than wait for it.
func (s *Store) preload(c rueidis.Client) {
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
// eleven little-endian doubles, the algorithm, rate, period (ms), capacity,
// cost, max delay (ms), calendar, and for a calendar window the bounds of
// the windows around the request's time (algo.Limit.CalendarBounds), zeros
// otherwise. Every value is an integer below 2^53 (Limit.Validate), so the
// doubles hold it exactly; Lua unpacks them in one call, where parsing
// decimal arguments costs several times more of Redis' time.
func appendRequest(b []byte, r algo.Request) []byte {
	l := r.Limit
	var cb [4]int64
	if l.Calendar != algo.NoCalendar {
		cb = l.CalendarBounds(zoneTime(r.Now))
	}
	for _, v := range [11]int64{int64(l.Algorithm), l.Rate, l.Period.Milliseconds(), l.Capacity(), r.Cost,
		l.MaxDelay.Milliseconds(), int64(l.Calendar), cb[0], cb[1], cb[2], cb[3]} {
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
}

// Store is the Redis [tollgate.Store]. It is safe for concurrent use.
type Store struct {
	client  atomic.Pointer[rueidis.Client]
	decide  entryPoint // decide.lua: one request, or a batch
	multi   entryPoint // multi.lua: several limits, all or nothing
	lib     *library   // nil with Options.NoFunctions
	lockout *rueidis.Lua
	lease   *rueidis.Lua
	reserve entryPoint    // reserve.lua: attempts held on a rate limit
	owned   bool          // Open made the client; Close closes it
	stop    chan struct{} // ends Open's connect loop
	done    chan struct{}
	once    sync.Once
	batch   batcher
}

// ErrNotConnected is returned by a store from [Open] that has not yet
// reached Redis.
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
	s := &Store{stop: make(chan struct{}), done: make(chan struct{})}
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
	}{{&s.decide, lib.decide, DecideScript}, {&s.multi, lib.multi, MultiScript}, {&s.reserve, lib.reserve, ReserveScript}} {
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

// Lockout implements [tollgate.Guard] with one script call. The account's
// state and its held attempts are two keys of one hash slot.
func (s *Store) Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error) {
	if err := req.Validate(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: %w", err)
	}
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return algo.LockoutResult{}, err
	}
	c, err := s.conn()
	if err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: %w", err)
	}
	r := req.Rule
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	key, held := lockKeys(req.Policy, req.Subject)
	vals, err := s.lockout.Exec(ctx, c, []string{key, held}, []string{now, slack, strconv.Itoa(int(req.Op)),
		strconv.FormatInt(r.Threshold, 10), ms(r.Lock), ms(r.MaxLock), ms(r.Window), ms(r.Memory),
		req.Hold.ID, ms(req.Hold.TTL)}).AsIntSlice()
	if err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: %w", err)
	}
	if len(vals) != 6 {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: script returned %d values, want 6", len(vals))
	}
	return algo.LockoutResult{Locked: vals[0] == 1, RetryAfter: vals[1], Failures: vals[2], Level: vals[3],
		Reserved: vals[4] == 1, Held: vals[5]}, nil
}

// Reserve implements [tollgate.Reserver] with one script call: it admits
// the attempt only if the limit could take the cost of every attempt held
// and this one, and then holds it. The limit's state and its holds are two
// keys of one hash slot.
func (s *Store) Reserve(ctx context.Context, req algo.Request, h algo.Hold) (algo.Decision, error) {
	d, err := s.holdOp(ctx, req, h, 1)
	if err != nil {
		return d, fmt.Errorf("reserving in redis: %w", err)
	}
	return d, nil
}

// Settle implements [tollgate.Reserver]: it ends the hold and, with
// charge, charges the request as [Store.Allow] would, in one script call.
func (s *Store) Settle(ctx context.Context, req algo.Request, h algo.Hold, charge bool) (algo.Decision, error) {
	op := 2
	if charge {
		op = 3
	}
	d, err := s.holdOp(ctx, req, h, op)
	if err != nil {
		return d, fmt.Errorf("settling in redis: %w", err)
	}
	return d, nil
}

func (s *Store) holdOp(ctx context.Context, req algo.Request, h algo.Hold, op int) (algo.Decision, error) {
	if err := checkRequest(&req); err != nil {
		return algo.Decision{}, err
	}
	if err := h.Validate(); err != nil {
		return algo.Decision{}, err
	}
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return algo.Decision{}, err
	}
	c, err := s.conn()
	if err != nil {
		return algo.Decision{}, err
	}
	var packed [reqSize]byte
	appendRequest(packed[:0], req)
	msgs, err := s.exec(ctx, c, s.reserve, []string{KeyFor(req), heldKey(req)}, []string{now, slack, string(packed[:]),
		strconv.Itoa(op), h.ID, strconv.FormatInt(h.TTL.Milliseconds(), 10)}).ToArray()
	if err != nil {
		return algo.Decision{}, err
	}
	outs, err := outcomes(msgs, 1)
	if err != nil {
		return algo.Decision{}, err
	}
	if outs[0].err != nil {
		return algo.Decision{}, outs[0].err
	}
	return outs[0].decision(req.Limit), nil
}

// Acquire implements [tollgate.Leaser] with one script call. If ctx ends
// first, Acquire returns its error and the lease may still be taken, as
// Redis runs the call whenever it reads it: a caller that does not know
// whether it holds the lease releases it (see [Store.Release]).
func (s *Store) Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error) {
	if err := req.Validate(); err != nil {
		return false, fmt.Errorf("acquiring a lease in redis: %w", err)
	}
	v, err := s.leaseOp(ctx, req, 1)
	if err != nil {
		return false, fmt.Errorf("acquiring a lease in redis: %w", err)
	}
	return v == 1, nil
}

// Release implements [tollgate.Leaser]. A lease that is not held (its
// acquire has not reached Redis yet, or was refused, or the lease expired)
// is remembered as released for req.TTL, in a sorted set beside the
// leases: an Acquire of req.ID that Redis runs meanwhile takes nothing, so
// a release and the acquire it cancels may reach Redis in either order.
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("releasing a lease in redis: %w", err)
	}
	if _, err := s.leaseOp(ctx, req, 2); err != nil {
		return fmt.Errorf("releasing a lease in redis: %w", err)
	}
	return nil
}

func (s *Store) leaseOp(ctx context.Context, req algo.LeaseRequest, op int) (int64, error) {
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return 0, err
	}
	c, err := s.conn()
	if err != nil {
		return 0, err
	}
	key := leaseKey(req.Policy, req.Subject)
	vals, err := s.lease.Exec(ctx, c, []string{key, key + ":released"}, []string{now, slack, strconv.Itoa(op),
		strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.TTL.Milliseconds(), 10), req.ID}).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(vals) != 2 {
		return 0, fmt.Errorf("script returned %d values, want 2", len(vals))
	}
	return vals[0], nil
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
			if c, err := rueidis.NewClient(opt); err == nil {
				s.client.Store(&c)
				s.preload(c)
				return
			}
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
	if c := s.client.Load(); c != nil && s.owned {
		(*c).Close()
	}
	s.batch.close()
	return nil
}

// Connected reports whether the store has a client (a store from Open may
// not yet).
func (s *Store) Connected() bool { return s.client.Load() != nil }

// Allow implements [tollgate.Store]. A request with an explicit Now is one
// EVALSHA; one on Redis' clock may share its call with concurrent ones (see
// [Options.MaxBatch]). If ctx ends first, Allow returns its error; the
// request may still be decided, as with any call that times out.
func (s *Store) Allow(ctx context.Context, req algo.Request) (algo.Decision, error) {
	if err := checkRequest(&req); err != nil {
		return algo.Decision{}, fmt.Errorf("deciding in redis: %w", err)
	}
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
	appendRequest(packed[:0], req)
	var o outcome
	if req.Now.IsZero() && s.batch.maxBatch > 1 {
		o = s.coalesced(ctx, c, key, &packed)
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
	msgs, err := s.exec(ctx, c, s.multi, keys, []string{now, slack, string(packed)}).ToArray()
	if err != nil {
		return nil, fmt.Errorf("deciding in redis: %w", err)
	}
	outs, err := outcomes(msgs, len(reqs))
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
// (validated when the handle was made), and its cost.
func checkRequest(req *algo.Request) error {
	if req.Prepared() == nil {
		if err := req.Limit.Validate(); err != nil {
			return err
		}
	}
	return req.Limit.CheckCost(req.Cost)
}

// conn returns the client, or ErrNotConnected for a store from Open that
// has not reached Redis yet.
func (s *Store) conn() (rueidis.Client, error) {
	c := s.client.Load()
	if c == nil {
		return nil, ErrNotConnected
	}
	return *c, nil
}

// Key layout. Every key the store writes is
//
//	rl:v3:{<group>}:<policy>[:<subject>]:<kind>[:held]
//
// <group> is the hash tag: a rate request's Group (its Tag, or its
// Subject), or the subject of a login guard or a lease; on Redis Cluster it
// alone picks the slot, so the keys of one group, and a key and its held
// set, share a slot. It is the group as it is when it can stand in a hash
// tag, and otherwise "h:" and a hash of it (see safeTag). <policy> is the
// request's Policy and <subject> (present only for a request whose Tag
// groups it with other subjects) its Subject, made safe as the group is;
// both are escaped, '%' as %25 and ':' as %3A, so neither holds a colon.
// <kind> is the algorithm's (gcra, tb, lb, fw, sl, sc), or lock for a login
// guard's state and lease for leases; ":held" follows for the set of held
// attempts beside a rate limit's or a login guard's state. So the fields
// between the colons after the tag are the policy, perhaps the subject,
// then one of the kinds, perhaps followed by held: no kind is "held", so
// the fields read one way only, and no two requests' states share a key.
// Names without '%' or ':' appear as they are: rl:v3:{user-42}:api:gcra.

// Key kinds beside the algorithms' (see keySuffix), and the suffix of a
// held set.
const (
	lockSuffix  = ":lock"
	leaseSuffix = ":lease"
	heldSuffix  = ":held"
)

// buildKey returns rl:v3:{<group>}:<policy>[:<subject>]<suffix>, where
// subject is a safeTag (never empty), or empty for none (no Tag, or a Tag
// equal to the Subject).
func buildKey(group, policy, subject, suffix string) string {
	tag := safeTag(group)
	policy = escapePart(policy)
	subject = escapePart(subject)
	var b strings.Builder
	b.Grow(len(KeyPrefix) + len(tag) + len(policy) + len(subject) + len(suffix) + 4)
	b.WriteString(KeyPrefix)
	b.WriteByte('{')
	b.WriteString(tag)
	b.WriteString("}:")
	b.WriteString(policy)
	if subject != "" {
		b.WriteByte(':')
		b.WriteString(subject)
	}
	b.WriteString(suffix)
	return b.String()
}

// escapePart returns s with '%' written as %25 and ':' as %3A, so that it
// holds no colon and every s has its own escaped form.
func escapePart(s string) string {
	if strings.IndexByte(s, ':') < 0 && strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Key returns the Redis key holding the state of subject under policy,
// for a request without a Tag.
func Key(policy, subject string, a algo.Algorithm) string {
	return KeyFor(algo.Request{Policy: policy, Subject: subject, Limit: algo.Limit{Algorithm: a}})
}

// KeyFor returns the Redis key of a request's state:
// rl:v3:{<subject>}:<policy>:<alg>, or rl:v3:{<tag>}:<policy>:<subject>:<alg>
// for a request whose Tag groups it with others (see the key layout
// above).
func KeyFor(r algo.Request) string {
	sub := ""
	if r.Tag != "" && r.Tag != r.Subject {
		sub = safeTag(r.Subject)
	}
	return buildKey(r.Group(), r.Policy, sub, keySuffix[r.Limit.Algorithm])
}

// heldKey returns the key of the set of attempts held on a request's
// limit (see [Store.Reserve]), in the slot of its state.
func heldKey(r algo.Request) string { return KeyFor(r) + heldSuffix }

// lockKeys returns the keys of an account's login-guard state and of its
// held attempts.
func lockKeys(policy, subject string) (state, held string) {
	state = buildKey(subject, policy, "", lockSuffix)
	return state, state + heldSuffix
}

// leaseKey returns the key of a subject's leases under policy.
func leaseKey(policy, subject string) string { return buildKey(subject, policy, "", leaseSuffix) }

// safeTag returns subject if it can stand inside a hash tag as it is, and
// otherwise "h:" and a hex SHA-256 prefix of it. Subjects that themselves
// start with "h:" are always hashed, so no subject can be chosen to share
// another's key.
func safeTag(subject string) string {
	ok := len(subject) > 0 && len(subject) <= 64 && !strings.HasPrefix(subject, "h:")
	for i := 0; ok && i < len(subject); i++ {
		c := subject[i]
		ok = c > ' ' && c < 0x7f && c != '{' && c != '}'
	}
	if ok {
		return subject
	}
	sum := sha256.Sum256([]byte(subject))
	return "h:" + hex.EncodeToString(sum[:16])
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
