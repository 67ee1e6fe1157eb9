package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// plainTokenBucket is the token-bucket script of the design notes (seed
// 000 section 7): HMGET, HSET and PEXPIRE on a hash, time from the client.
const plainTokenBucket = `
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local now_ms = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local values = redis.call('HMGET', key, 'tokens', 'updated_at')
local tokens = tonumber(values[1]) or capacity
local updated_at = tonumber(values[2]) or now_ms
local elapsed = math.max(0, now_ms - updated_at) / 1000
tokens = math.min(capacity, tokens + elapsed * refill_rate)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', key, 'tokens', tokens, 'updated_at', now_ms)
redis.call('PEXPIRE', key, math.ceil((capacity / refill_rate) * 2000))
return { allowed, math.floor(tokens) }
`

// decider makes one decision for a key; a refusal is errRefused.
type decider func(ctx context.Context, key string) error

// storeImpl is one implementation the store and fleet suites measure: open
// makes its decider in this process, or exe is a worker program of its own
// (peers/goredis902) that opens it.
type storeImpl struct {
	name string
	open func(spec workerSpec) (decider, func(), error)
	exe  string
}

// limitSpec is a limit every implementation enforces alike: Rate per
// Period, Burst at once.
type limitSpec struct {
	Rate, Burst int64
	Period      time.Duration
}

// expiringLimit is generous (1,000,000/s) so that every decision takes the
// write path; a key's state is spent a microsecond after its touch, so it
// expires then (Tollgate), or a second later (redis_rate rounds its TTL up
// to whole seconds), or two (the plain script).
var expiringLimit = limitSpec{Rate: benchRate, Burst: benchRate, Period: time.Second}

// benchRate is the expiring limit's rate, per second; the memory suite's too.
const benchRate = 1_000_000

// liveLimit is a per-user quota of 1,000 a day, burst 1,000: each decision
// adds 86.4 s to the key's debt, so the key stays live between touches,
// and no key is touched anywhere near 1,000 times in a run, so nothing is
// refused.
var liveLimit = limitSpec{Rate: 1_000, Burst: 1_000, Period: 24 * time.Hour}

// storeKeySet is a column of the store table: how many keys, under which
// limit.
type storeKeySet struct {
	keys  int
	live  bool // under liveLimit, prefilled, kept from cell to cell
	label string
}

var (
	oneHotKey    = storeKeySet{1, false, "one hot key"}
	keysExpire   = storeKeySet{100_000, false, "keys expire between touches"}
	keysStayLive = storeKeySet{100_000, true, "keys stay live"}
)

// storeCell is one key set at one number of callers.
type storeCell struct {
	set     storeKeySet
	callers int
}

// storeRow is one cell of the store table.
type storeRow struct {
	impl       string
	callers    int
	set        storeKeySet
	perSec     float64
	lat        summary
	scriptUsec float64 // per decision: Redis' script time
	redisUsec  float64 // per decision: redis-server's CPU time
	calls      float64 // script calls per decision
	errors     int64
}

// limit returns the limit a worker's spec carries.
func (s workerSpec) limit() limitSpec { return limitSpec{s.Rate, s.Burst, s.Period} }

// goredisVersion is the version of go-redis this program is built with.
func goredisVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/redis/go-redis/v9" {
				return d.Version
			}
		}
	}
	return "(unknown)"
}

// redisRateName is the name of redis_rate's row on a go-redis version.
func redisRateName(version string) string { return "redis_rate v10 (go-redis " + version + ")" }

// storeImpls are the implementations of the store suite that run in this
// process.
func storeImpls() []storeImpl {
	var impls []storeImpl
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.SlidingWindowCounter} {
		impls = append(impls, storeImpl{name: "tollgate " + a.String(), open: func(s workerSpec) (decider, func(), error) {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
			if err != nil {
				return nil, nil, err
			}
			st, err := rstore.New(c, rstore.Options{})
			if err != nil {
				return nil, nil, err
			}
			d, err := tollgateDecider(st, a, s.limit())
			if err != nil {
				c.Close()
			}
			return d, c.Close, err
		}})
	}
	impls = append(impls, redisRateImpl())
	impls = append(impls, storeImpl{name: "plain token-bucket Lua (rueidis)", open: openPlainLua})
	return impls
}

// fleetImpls are the implementations of the fleet suite: Tollgate's store
// opened as the gateway opens it, and redis_rate on the current go-redis.
func fleetImpls() []storeImpl {
	return []storeImpl{
		{name: "tollgate gcra (opened as the gateway does)", open: func(s workerSpec) (decider, func(), error) {
			opt, err := rueidis.ParseURL("redis://" + s.Addr + "/0")
			if err != nil {
				return nil, nil, err
			}
			opt.DisableCache, opt.ForceSingleClient = true, true
			st, err := rstore.Open(opt, rstore.Options{})
			if err != nil {
				return nil, nil, err
			}
			d, err := tollgateDecider(st, algo.GCRA, s.limit())
			if err != nil {
				st.Close()
			}
			return d, func() { st.Close() }, err
		}},
		redisRateImpl(),
		{name: floorName, open: openFloor},
	}
}

// floorName names the fleet's floor: a call that decides nothing.
const floorName = "floor: an FCALL that decides nothing (rueidis)"

// floorLibrary is the floor's function: it returns a constant string as
// long as Tollgate's answer to one request, and touches no key.
const floorLibrary = "#!lua name=tollgate_bench_floor\n" +
	"redis.register_function('tollgate_bench_floor', function(keys, args) return '" + "0123456789012345678901234567890123456789" + "' end)\n"

// openFloor opens a client as the gateway's store opens one and calls the
// floor's function with the arguments of Tollgate's lone decision (a key,
// an empty string, "0" and 104 bytes): what Redis spends on a call, its network work
// and its Lua function call, before a script does anything.
func openFloor(s workerSpec) (decider, func(), error) {
	opt, err := rueidis.ParseURL("redis://" + s.Addr + "/0")
	if err != nil {
		return nil, nil, err
	}
	opt.DisableCache, opt.ForceSingleClient = true, true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(floorLibrary).Build()).Error(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("loading the floor's function: %w", err)
	}
	packed := string(make([]byte, 104))
	return func(ctx context.Context, key string) error {
		return c.Do(ctx, c.B().Fcall().Function("tollgate_bench_floor").Numkeys(1).Key(key).Arg("", "0", packed).Build()).Error()
	}, c.Close, nil
}

// implNamed finds an implementation by name among the store and fleet
// suites'.
func implNamed(name string) (storeImpl, bool) {
	for _, impl := range append(storeImpls(), fleetImpls()...) {
		if impl.name == name && impl.open != nil {
			return impl, true
		}
	}
	return storeImpl{}, false
}

// tollgateDecider decides with st under l by algorithm a. Requests carry
// the limit's handle, prepared once, as the gateway's do.
func tollgateDecider(st *rstore.Store, a algo.Algorithm, l limitSpec) (decider, error) {
	h, err := algo.NewHandle("bench", algo.Limit{Algorithm: a, Rate: l.Rate, Period: l.Period, Burst: l.Burst})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key string) error {
		d, err := st.Allow(ctx, h.Request(key, 1))
		if err == nil && !d.Allowed {
			return errRefused
		}
		return err
	}, nil
}

// redisRateImpl is redis_rate v10 on this program's go-redis.
func redisRateImpl() storeImpl {
	return storeImpl{name: redisRateName(goredisVersion()), open: func(s workerSpec) (decider, func(), error) {
		rdb := goredis.NewClient(&goredis.Options{Addr: s.Addr, PoolSize: s.Callers})
		lim := redis_rate.NewLimiter(rdb)
		l := redis_rate.Limit{Rate: int(s.Rate), Burst: int(s.Burst), Period: s.Period}
		return func(ctx context.Context, key string) error {
			res, err := lim.Allow(ctx, key, l)
			if err == nil && res.Allowed == 0 {
				return errRefused
			}
			return err
		}, func() { rdb.Close() }, nil
	}}
}

// openPlainLua opens the plain token-bucket script on rueidis.
func openPlainLua(s workerSpec) (decider, func(), error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	script := rueidis.NewLuaScript(plainTokenBucket)
	capacity := strconv.FormatInt(s.Burst, 10)
	refill := strconv.FormatFloat(float64(s.Rate)/s.Period.Seconds(), 'g', -1, 64)
	return func(ctx context.Context, key string) error {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		v, err := script.Exec(ctx, c, []string{"plain:" + key}, []string{capacity, refill, now, "1"}).AsIntSlice()
		if err == nil && (len(v) == 0 || v[0] == 0) {
			return errRefused
		}
		return err
	}, c.Close, nil
}

// buildPeer builds peers/goredis902 (redis_rate on go-redis v9.0.2) into
// dir and returns the program's path.
func buildPeer(src, dir string) (string, error) {
	exe := filepath.Join(dir, "goredis902")
	cmd := exec.Command("go", "build", "-o", exe, ".")
	cmd.Dir = src
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", src, err)
	}
	return exe, nil
}

// runStoreSuite measures every implementation (and peer, if not empty:
// redis_rate on go-redis v9.0.2) in each of cells.
func runStoreSuite(srv *redistest.Server, cells []storeCell, dur time.Duration, peer string) []storeRow {
	admin, err := srv.Client()
	if err != nil {
		fatal(err)
	}
	defer admin.Close()
	impls := storeImpls()
	if peer != "" { // beside the current go-redis's row
		impls = slices.Insert(impls, 4, storeImpl{name: redisRateName("v9.0.2"), exe: peer})
	}
	byImpl := make([][]storeRow, len(impls))
	prefilled := map[string]bool{} // the implementations whose live keys are in Redis
	// Cells outer, then rounds, then implementations: whatever else the
	// machine does during a cell hits every implementation alike, and each
	// figure is the median of its rounds.
	for _, c := range cells {
		runs := make([][]storeRow, len(impls))
		for range repeats {
			for i, impl := range impls {
				// Live keys stay from cell to cell (each implementation
				// fills its own once); other cells start from nothing.
				if !c.set.live || len(prefilled) == 0 {
					flushAll(admin)
					clear(prefilled)
				}
				spec := cellSpec(srv.Addr, impl.name, c, dur)
				if c.set.live {
					spec.Prefill = !prefilled[impl.name]
					prefilled[impl.name] = true
				}
				runs[i] = append(runs[i], runStoreCell(admin, impl, c, spec))
			}
		}
		for i, rs := range runs {
			byImpl[i] = append(byImpl[i], medianStoreRow(rs))
		}
	}
	var rows []storeRow
	for _, rs := range byImpl {
		rows = append(rows, rs...)
	}
	return rows
}

// cellSpec is the task of a store cell's worker.
func cellSpec(addr, impl string, c storeCell, dur time.Duration) workerSpec {
	l := expiringLimit
	if c.set.live {
		l = liveLimit
	}
	return workerSpec{Addr: addr, Impl: impl, Callers: c.callers, Keys: c.set.keys, Rate: l.Rate, Burst: l.Burst, Period: l.Period,
		Warmup: dur / 5, Duration: dur}
}

func flushAll(admin rueidis.Client) {
	if err := admin.Do(context.Background(), admin.B().Flushall().Build()).Error(); err != nil {
		fatal(err)
	}
}

// runStoreCell measures one implementation in one cell.
func runStoreCell(admin rueidis.Client, impl storeImpl, c storeCell, spec workerSpec) storeRow {
	l, err := prepare(impl, spec)
	if err != nil {
		fatal(err)
	}
	defer l.close()
	res, use := measured(admin, []load{l})
	r := res[0]
	row := storeRow{impl: impl.name, callers: c.callers, set: c.set, perSec: r.perSec(), lat: summarize(r.Latencies), errors: r.Errors}
	if n := float64(r.Decisions); n > 0 {
		row.scriptUsec, row.redisUsec, row.calls = use.scriptUsec/n, use.cpuUsec/n, float64(use.calls)/n
	}
	fmt.Fprintf(os.Stderr, "store: %-34s callers %3d %-28s %8.0f/s p99 %s ms, %.2f µs script, %.2f µs Redis CPU, %.3f calls per decision, %d errors\n",
		row.impl, c.callers, c.set.label, row.perSec, ms(row.lat.p99), row.scriptUsec, row.redisUsec, row.calls, row.errors)
	return row
}

// medianStoreRow combines rounds of one cell: the median of each figure,
// and every round's errors.
func medianStoreRow(runs []storeRow) storeRow {
	row := runs[0]
	row.perSec = median(runs, func(r storeRow) float64 { return r.perSec })
	row.scriptUsec = median(runs, func(r storeRow) float64 { return r.scriptUsec })
	row.redisUsec = median(runs, func(r storeRow) float64 { return r.redisUsec })
	row.calls = median(runs, func(r storeRow) float64 { return r.calls })
	row.lat = medianLatency(runs, func(r storeRow) summary { return r.lat })
	for _, r := range runs[1:] {
		row.errors += r.errors
	}
	return row
}

// runCallers runs callers goroutines deciding in a closed loop for dur,
// caller g starting at key (first+g)*7919, and returns what they did.
func runCallers(first, callers int, keys []string, d decider, dur time.Duration) workerResult {
	var n, errs atomic.Int64
	var all []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := make([]time.Duration, 0, 4096)
			ctx := context.Background()
			i := (first + g) * 7919
			for time.Now().Before(deadline) {
				i++
				t0 := time.Now()
				if err := d(ctx, keys[i%len(keys)]); err != nil {
					errs.Add(1)
					continue
				}
				part = append(part, time.Since(t0))
			}
			n.Add(int64(len(part)))
			mu.Lock()
			all = append(all, part...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return workerResult{Decisions: n.Load(), Errors: errs.Load(), Elapsed: time.Since(start), Latencies: all}
}

// scriptUsec sums the microseconds Redis spent in script calls since the
// last CONFIG RESETSTAT (INFO commandstats).
func scriptUsec(ctx context.Context, c rueidis.Client) float64 {
	var total float64
	for _, line := range commandstats(ctx, c) {
		for _, f := range line {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				total += u
			}
		}
	}
	return total
}

// scriptCalls counts the script calls Redis ran since the last CONFIG
// RESETSTAT.
func scriptCalls(ctx context.Context, c rueidis.Client) int64 {
	var total int64
	for _, line := range commandstats(ctx, c) {
		for _, f := range line {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// commandstats returns the fields of INFO commandstats' script lines.
func commandstats(ctx context.Context, c rueidis.Client) [][]string {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		fatal(err)
	}
	var lines [][]string
	for _, line := range strings.Split(info, "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_fcall:") {
			continue
		}
		lines = append(lines, strings.Split(line[strings.Index(line, ":")+1:], ","))
	}
	return lines
}

// redisCPU returns the CPU time redis-server has used, user and system, in
// seconds (INFO cpu).
func redisCPU(ctx context.Context, c rueidis.Client) float64 {
	info, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, p := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, p); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return total
}

// makeKeys returns n keys: "hot" alone, or subject-0, subject-1...
func makeKeys(n int) []string {
	if n == 1 {
		return []string{"hot"}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "subject-" + strconv.Itoa(i)
	}
	return keys
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
