package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// Workers. A cell's load comes from a worker: goroutines of this process,
// or another process (a fleet of gateways, or redis_rate on an older
// go-redis). Either way it connects, warms up, decides once for every key
// if asked (prefill), and then waits; the cell resets Redis' statistics,
// lets every worker run for the cell's duration, and reads them again, so
// Redis' figures cover exactly the measured decisions.

// workerEnv, when set (to a workerSpec as JSON), makes this program a
// worker process: it prints "ready" once warmed up, waits until its
// standard input closes, measures, prints its workerResult as JSON and
// exits. peers/goredis902 speaks the same protocol.
const workerEnv = "TOLLGATE_BENCH_WORKER"

// workerSpec is one worker's task.
type workerSpec struct {
	Addr     string        `json:"addr"`     // Redis
	Impl     string        `json:"impl"`     // the implementation's name
	Callers  int           `json:"callers"`  // requests in flight
	Keys     int           `json:"keys"`     // 1: "hot"; more: subject-0...
	First    int           `json:"first"`    // the index of the worker's first caller, over the fleet: caller g starts at key (First+g)*7919
	Rate     int64         `json:"rate"`     // the limit: Rate per Period, Burst at once
	Burst    int64         `json:"burst"`    //
	Period   time.Duration `json:"period"`   //
	Prefill  bool          `json:"prefill"`  // decide once for every key before warming up
	Warmup   time.Duration `json:"warmup"`   // how long to warm up (longer if no decision succeeded yet)
	Duration time.Duration `json:"duration"` // how long to measure
}

// workerResult is what one worker measured.
type workerResult struct {
	Decisions int64           `json:"decisions"` // successful decisions
	Errors    int64           `json:"errors"`    // failed or refused
	Elapsed   time.Duration   `json:"elapsed"`
	Latencies []time.Duration `json:"latencies"` // one per successful decision
}

// perSec returns the worker's decisions per second.
func (r workerResult) perSec() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// errRefused is a decision that said no: the benchmark's limits never
// should, so it counts as an error.
var errRefused = errors.New("refused")

// load is a worker that has connected and warmed up, waiting to run once.
type load interface {
	run() workerResult
	close()
}

// prepare starts a worker for impl: in this process, or impl.exe's.
func prepare(impl storeImpl, spec workerSpec) (load, error) {
	if impl.exe != "" {
		return startChild(impl.exe, spec)
	}
	return prepareInProcess(impl, spec)
}

// inProcess is a worker of goroutines in this process.
type inProcess struct {
	spec    workerSpec
	keys    []string
	d       decider
	closeFn func()
}

// prepareInProcess opens impl, warms up and prefills.
func prepareInProcess(impl storeImpl, spec workerSpec) (*inProcess, error) {
	d, closeFn, err := impl.open(spec)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", impl.name, err)
	}
	l := &inProcess{spec: spec, keys: makeKeys(spec.Keys), d: d, closeFn: closeFn}
	if err := l.warmUp(); err != nil {
		closeFn()
		return nil, fmt.Errorf("%s: %w", impl.name, err)
	}
	if spec.Prefill {
		prefill(spec.Callers, l.keys, d)
	}
	return l, nil
}

// warmUp decides for spec.Warmup, and on until one decision succeeds (a
// store from rstore.Open connects in the background), at most ten seconds.
func (l *inProcess) warmUp() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := runCallers(l.spec.First, l.spec.Callers, l.keys, l.d, l.spec.Warmup)
		if r.Decisions > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warming up: no decision succeeded (%d errors)", r.Errors)
		}
	}
}

func (l *inProcess) run() workerResult {
	return runCallers(l.spec.First, l.spec.Callers, l.keys, l.d, l.spec.Duration)
}

func (l *inProcess) close() { l.closeFn() }

// prefill decides once for every key, callers at a time.
func prefill(callers int, keys []string, d decider) {
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(keys); i += callers {
				d(context.Background(), keys[i])
			}
		}()
	}
	wg.Wait()
}

// child is a worker process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startChild runs exe as a worker for spec and returns once it is ready.
// The child is killed if this process dies.
func startChild(exe string, spec workerSpec) (*child, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a worker: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20)}
	if line, err := c.out.ReadString('\n'); err != nil || line != "ready\n" {
		c.close()
		return nil, fmt.Errorf("starting a worker for %s: got %q, %v", spec.Impl, line, err)
	}
	return c, nil
}

// run lets the child measure and returns its result.
func (c *child) run() workerResult {
	c.stdin.Close()
	var r workerResult
	if err := json.NewDecoder(c.out).Decode(&r); err != nil {
		fatal(fmt.Errorf("reading a worker's result: %w", err))
	}
	if err := c.cmd.Wait(); err != nil {
		fatal(fmt.Errorf("a worker: %w", err))
	}
	return r
}

// close kills the child if it still runs.
func (c *child) close() {
	if c.cmd.ProcessState == nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
	}
}

// runWorker is the program when workerEnv is set.
func runWorker(js string) {
	var spec workerSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fatal(fmt.Errorf("reading the worker's task: %w", err))
	}
	impl, ok := implNamed(spec.Impl)
	if !ok {
		fatal(fmt.Errorf("no implementation %q", spec.Impl))
	}
	l, err := prepareInProcess(impl, spec)
	if err != nil {
		fatal(err)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	w := bufio.NewWriter(os.Stdout)
	if err := json.NewEncoder(w).Encode(l.run()); err != nil {
		fatal(err)
	}
	if err := w.Flush(); err != nil {
		fatal(err)
	}
	l.close()
}

// redisUse is what Redis spent on a cell: script time and calls from INFO
// commandstats, and the server's CPU time (user and system) from INFO cpu.
type redisUse struct {
	scriptUsec float64
	calls      int64
	cpuUsec    float64
}

// measured runs loads at once, between two readings of Redis' statistics,
// and returns their results and what Redis spent meanwhile.
func measured(admin rueidis.Client, loads []load) ([]workerResult, redisUse) {
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
		fatal(err)
	}
	cpu0 := redisCPU(ctx, admin)
	results := make([]workerResult, len(loads))
	var wg sync.WaitGroup
	for i, l := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = l.run()
		}()
	}
	wg.Wait()
	use := redisUse{cpuUsec: (redisCPU(ctx, admin) - cpu0) * 1e6, scriptUsec: scriptUsec(ctx, admin), calls: scriptCalls(ctx, admin)}
	return results, use
}
