// Command goredis902 runs one cell of tollgate-bench's store suite with
// redis_rate v10.0.1 on go-redis v9.0.2, the version redis_rate's own
// go.mod names, so the benchmark can show it beside the current go-redis
// in the same run. One module holds one version of go-redis, hence this
// module of its own. tollgate-bench builds it and runs it as a worker: the
// task comes as JSON in TOLLGATE_BENCH_WORKER; it connects, decides once
// for every key if asked (prefill), warms up, prints "ready", waits until
// its standard input closes, measures, and prints its result as JSON (the
// fields of tollgate-bench's workerSpec and workerResult).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
)

// spec is tollgate-bench's workerSpec.
type spec struct {
	Addr     string        `json:"addr"`
	Impl     string        `json:"impl"`
	Callers  int           `json:"callers"`
	Keys     int           `json:"keys"`
	First    int           `json:"first"`
	Rate     int64         `json:"rate"`
	Burst    int64         `json:"burst"`
	Period   time.Duration `json:"period"`
	Prefill  bool          `json:"prefill"`
	Warmup   time.Duration `json:"warmup"`
	Duration time.Duration `json:"duration"`
}

// result is tollgate-bench's workerResult.
type result struct {
	Decisions int64           `json:"decisions"`
	Errors    int64           `json:"errors"`
	Elapsed   time.Duration   `json:"elapsed"`
	Latencies []time.Duration `json:"latencies"`
}

var errRefused = errors.New("refused")

func main() {
	var s spec
	if err := json.Unmarshal([]byte(os.Getenv("TOLLGATE_BENCH_WORKER")), &s); err != nil {
		fatal(fmt.Errorf("reading the task: %w", err))
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: s.Addr, PoolSize: s.Callers})
	defer rdb.Close()
	lim := redis_rate.NewLimiter(rdb)
	l := redis_rate.Limit{Rate: int(s.Rate), Burst: int(s.Burst), Period: s.Period}
	decide := func(ctx context.Context, key string) error {
		res, err := lim.Allow(ctx, key, l)
		if err == nil && res.Allowed == 0 {
			return errRefused
		}
		return err
	}
	keys := makeKeys(s.Keys)
	if s.Prefill {
		prefill(s.Callers, keys, decide)
	}
	if r := run(s, keys, decide, s.Warmup); r.Decisions == 0 {
		fatal(fmt.Errorf("warming up: no decision succeeded (%d errors)", r.Errors))
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	w := bufio.NewWriter(os.Stdout)
	if err := json.NewEncoder(w).Encode(run(s, keys, decide, s.Duration)); err != nil {
		fatal(err)
	}
	if err := w.Flush(); err != nil {
		fatal(err)
	}
}

// makeKeys returns tollgate-bench's key set: "hot" alone, or subject-0...
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

// prefill decides once for every key, callers at a time.
func prefill(callers int, keys []string, decide func(context.Context, string) error) {
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(keys); i += callers {
				decide(context.Background(), keys[i])
			}
		}()
	}
	wg.Wait()
}

// run is tollgate-bench's runCallers: s.Callers goroutines decide in a
// closed loop for dur, caller g starting at key (s.First+g)*7919.
func run(s spec, keys []string, decide func(context.Context, string) error, dur time.Duration) result {
	var n, errs atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for g := range s.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := make([]time.Duration, 0, 4096)
			i := (s.First + g) * 7919
			for time.Now().Before(deadline) {
				i++
				t0 := time.Now()
				if err := decide(context.Background(), keys[i%len(keys)]); err != nil {
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
	return result{Decisions: n.Load(), Errors: errs.Load(), Elapsed: time.Since(start), Latencies: all}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "goredis902:", err)
	os.Exit(1)
}
