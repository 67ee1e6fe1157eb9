package main

import (
	"context"
	"fmt"
	"os"
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

// decider makes one decision for a key.
type decider func(ctx context.Context, key string) error

type storeImpl struct {
	name string
	open func(callers int) (decider, func(), error)
}

// storeRow is one cell of the store table.
type storeRow struct {
	impl          string
	callers, keys int
	perSec        float64
	lat           summary
	usecPerDec    float64
	errors        int64
}

const benchRate = 1_000_000 // per second: generous, so decisions take the write path

func storeImpls(addr string) []storeImpl {
	rueidisClient := func() (rueidis.Client, error) {
		return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	}
	var impls []storeImpl
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.SlidingWindowCounter} {
		// Requests carry the limit's handle, prepared once, as the
		// gateway's do.
		h, err := algo.NewHandle("bench", algo.Limit{Algorithm: a, Rate: benchRate, Period: time.Second})
		if err != nil {
			panic(err)
		}
		impls = append(impls, storeImpl{name: "tollgate " + a.String(), open: func(int) (decider, func(), error) {
			c, err := rueidisClient()
			if err != nil {
				return nil, nil, err
			}
			s, err := rstore.New(c, rstore.Options{})
			if err != nil {
				return nil, nil, err
			}
			return func(ctx context.Context, key string) error {
				_, err := s.Allow(ctx, h.Request(key, 1))
				return err
			}, c.Close, nil
		}})
	}
	impls = append(impls, storeImpl{name: "redis_rate v10 (go-redis)", open: func(callers int) (decider, func(), error) {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: callers})
		lim := redis_rate.NewLimiter(rdb)
		l := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: time.Second}
		return func(ctx context.Context, key string) error {
			_, err := lim.Allow(ctx, key, l)
			return err
		}, func() { rdb.Close() }, nil
	}})
	impls = append(impls, storeImpl{name: "plain token-bucket Lua (rueidis)", open: func(int) (decider, func(), error) {
		c, err := rueidisClient()
		if err != nil {
			return nil, nil, err
		}
		script := rueidis.NewLuaScript(plainTokenBucket)
		capacity, refill := strconv.Itoa(benchRate), strconv.Itoa(benchRate)
		return func(ctx context.Context, key string) error {
			now := strconv.FormatInt(time.Now().UnixMilli(), 10)
			return script.Exec(ctx, c, []string{"plain:" + key}, []string{capacity, refill, now, "1"}).Error()
		}, c.Close, nil
	}})
	return impls
}

func runStoreSuite(srv *redistest.Server, dur time.Duration) []storeRow {
	admin, err := srv.Client()
	if err != nil {
		fatal(err)
	}
	defer admin.Close()
	keySets := map[int][]string{1: {"hot"}, 100_000: makeKeys(100_000)}
	impls := storeImpls(srv.Addr)
	byImpl := make([][]storeRow, len(impls))
	// Cells outer, then rounds, then implementations: whatever else the
	// machine does during a cell hits every implementation alike, and each
	// figure is the median of its rounds.
	for _, callers := range []int{64, 512} {
		for _, nkeys := range []int{1, 100_000} {
			runs := make([][]storeRow, len(impls))
			for range repeats {
				for i, impl := range impls {
					runs[i] = append(runs[i], runStoreCell(admin, impl, callers, keySets[nkeys], dur))
				}
			}
			for i, rs := range runs {
				byImpl[i] = append(byImpl[i], medianStoreRow(rs))
			}
		}
	}
	var rows []storeRow
	for _, rs := range byImpl {
		rows = append(rows, rs...)
	}
	return rows
}

// runStoreCell measures one implementation with callers on keys.
func runStoreCell(admin rueidis.Client, impl storeImpl, callers int, keys []string, dur time.Duration) storeRow {
	d, closeFn, err := impl.open(callers)
	if err != nil {
		fatal(err)
	}
	ctx := context.Background()
	admin.Do(ctx, admin.B().Flushall().Build())
	runCallers(callers, keys, d, dur/5) // warm up: connections, scripts, keys
	admin.Do(ctx, admin.B().ConfigResetstat().Build())
	n, errs, lat, elapsed := runCallers(callers, keys, d, dur)
	usec := scriptUsec(ctx, admin)
	closeFn()
	row := storeRow{impl: impl.name, callers: callers, keys: len(keys), perSec: float64(n) / elapsed.Seconds(),
		lat: lat, usecPerDec: usec / float64(n), errors: errs}
	fmt.Fprintf(os.Stderr, "store: %-34s callers %3d keys %6d: %8.0f/s p99 %s ms, %.2f µs Redis CPU/decision, %d errors\n",
		row.impl, callers, len(keys), row.perSec, ms(lat.p99), row.usecPerDec, errs)
	return row
}

// medianStoreRow combines rounds of one cell: the median of each figure,
// and every round's errors.
func medianStoreRow(runs []storeRow) storeRow {
	row := runs[0]
	row.perSec = median(runs, func(r storeRow) float64 { return r.perSec })
	row.usecPerDec = median(runs, func(r storeRow) float64 { return r.usecPerDec })
	row.lat = medianLatency(runs, func(r storeRow) summary { return r.lat })
	for _, r := range runs[1:] {
		row.errors += r.errors
	}
	return row
}

// runCallers runs callers goroutines deciding for dur; it returns the
// decisions made, the errors, the latencies and the time taken.
func runCallers(callers int, keys []string, d decider, dur time.Duration) (int64, int64, summary, time.Duration) {
	var n, errs atomic.Int64
	var lats latencies
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			part := lats.part(4096)
			ctx := context.Background()
			i := g * 7919
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
			lats.add(part)
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	return n.Load(), errs.Load(), lats.summary(), time.Since(start)
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

func makeKeys(n int) []string {
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
