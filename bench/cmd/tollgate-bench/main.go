// Command tollgate-bench measures Tollgate side by side with its peers and
// writes one markdown report (and a PNG chart), every figure from the same
// run on the same machine. It starts its own redis-server.
//
//	cd bench && go run ./cmd/tollgate-bench -out ../BENCHMARKS.md -png ../docs/latency.png
//
// The default run takes under ten minutes on two cores; -quick measures
// every suite more briefly, once, for CI-sized runs.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/redistest"
)

// mode is how much a run measures.
type mode struct {
	name          string
	duration      time.Duration // each cell of the store, memory, gateway and rls suites
	repeats       int           // runs of each cell of those suites
	storeCells    []storeCell
	fleetProcs    []int
	fleetInFlight []int
	fleetDuration time.Duration
	fleetRepeats  int
}

// defaultMode is `make bench`.
var defaultMode = mode{
	name: "default", duration: 1500 * time.Millisecond, repeats: 3,
	storeCells: []storeCell{{oneHotKey, 64}, {oneHotKey, 512}, {keysExpire, 64}, {keysStayLive, 64}, {keysStayLive, 512}},
	fleetProcs: []int{4, 8, 16}, fleetInFlight: []int{1, 2, 4}, fleetDuration: time.Second, fleetRepeats: 3,
}

// quickMode is -quick: the same tables, shorter cells, one run each.
var quickMode = mode{
	name: "quick", duration: time.Second, repeats: 1,
	storeCells: defaultMode.storeCells,
	fleetProcs: defaultMode.fleetProcs, fleetInFlight: defaultMode.fleetInFlight, fleetDuration: time.Second, fleetRepeats: 1,
}

func main() {
	out := flag.String("out", "", "write the markdown report here (default: stdout only)")
	png := flag.String("png", "", "write the gateway latency chart here")
	quick := flag.Bool("quick", false, "measure briefly, once per cell (a CI-sized run of a few minutes)")
	dur := flag.Duration("duration", 0, "how long each measured cell runs (default: 1.5s, the fleet's 1s; 1s with -quick)")
	reps := flag.Int("repeats", 0, "how many times each cell of the gateway, memory and LLM suites runs, the targets in turn (default: 3; 1 with -quick)")
	suites := flag.String("suites", "store,fleet,memory,gateway,rls,llm,overload", "which suites to run")
	peer := flag.String("peer", "peers/goredis902", "the source of the worker that runs redis_rate on go-redis v9.0.2 (empty: leave that row out)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	rlsPeer := flag.String("rls-peer", "peers/ratelimit", "the source of the program that runs envoyproxy/ratelimit for the rls suite (empty: leave that row out)")
	rlsProfiles := flag.String("rls-profiles", "", "write CPU profiles of the rls suite's tollgate rls and PING server processes into this directory (tollgate-rls.pprof, ping.pprof)")
	gatewayProfiles := flag.String("gateway-profiles", "", "run the gateway suite's sweep alone (BENCH_RATES) and write a CPU profile of each target's process into this directory (plain.pprof, memory.pprof, redis.pprof)")
	flag.Parse()
	if spec := os.Getenv(workerEnv); spec != "" {
		runWorker(spec)
		return
	}
	if spec := os.Getenv(targetEnv); spec != "" {
		runTarget(spec)
		return
	}
	if spec := os.Getenv(rlsTargetEnv); spec != "" {
		runRLSTarget(spec)
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	m := defaultMode
	if *quick {
		m = quickMode
	}
	if *dur > 0 {
		m.duration, m.fleetDuration = *dur, *dur
	}
	if *reps > 0 {
		m.repeats = *reps
	}
	repeats = m.repeats

	srv, err := redistest.StartServer()
	if err != nil {
		fatal(err)
	}
	defer srv.Close()

	r := &report{started: time.Now(), mode: m, redisAddr: srv.Addr}
	r.machine()
	for _, s := range strings.Split(*suites, ",") {
		t0 := time.Now()
		switch strings.TrimSpace(s) {
		case "store":
			exe, cleanup := peerProgram(*peer)
			r.store = runStoreSuite(srv, m.storeCells, m.duration, exe)
			cleanup()
		case "fleet":
			r.fleet = runFleetSuite(srv, m)
		case "memory":
			r.memory = runMemorySuite(m.duration)
		case "gateway":
			r.gateway = runGatewaySuite(srv, m.duration, *gatewayProfiles)
		case "rls":
			r.rls = runRLSSuite(srv, m.duration, *rlsPeer, *rlsProfiles)
		case "llm":
			r.llm = runLLMSuite(srv, m.duration)
		case "overload":
			r.overload = runOverloadSuite(m.duration)
		case "":
			continue
		default:
			fmt.Fprintf(os.Stderr, "unknown suite %q\n", s)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "suite %s took %v\n", strings.TrimSpace(s), time.Since(t0).Round(time.Second))
	}
	r.elapsed = time.Since(r.started)
	md := r.markdown(*png)
	fmt.Print(md)
	if *png != "" && r.gateway != nil {
		if err := r.chart(*png); err != nil {
			fatal(fmt.Errorf("chart: %w", err))
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fatal(err)
		}
	}
}

// peerProgram builds the go-redis v9.0.2 worker from src into a temporary
// directory and returns its path, or "" for none, and a function that
// removes it.
func peerProgram(src string) (string, func()) {
	if src == "" {
		return "", func() {}
	}
	dir, err := os.MkdirTemp("", "tollgate-bench-peer")
	if err != nil {
		fatal(err)
	}
	exe, err := buildPeer(src, dir)
	if err != nil {
		fatal(fmt.Errorf("%w (run from bench/, or set -peer; -peer '' leaves the row out)", err))
	}
	return exe, func() { os.RemoveAll(dir) }
}
