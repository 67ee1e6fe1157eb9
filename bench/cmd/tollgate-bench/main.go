// Command tollgate-bench measures Tollgate side by side with its peers and
// writes one markdown report (and a PNG chart), every figure from the same
// run on the same machine. It starts its own redis-server.
//
//	cd bench && go run ./cmd/tollgate-bench -out ../BENCHMARKS.md -png ../docs/latency.png
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

func main() {
	out := flag.String("out", "", "write the markdown report here (default: stdout only)")
	png := flag.String("png", "", "write the gateway latency chart here")
	dur := flag.Duration("duration", 3*time.Second, "how long each measured cell runs")
	suites := flag.String("suites", "store,memory,gateway,rls", "which suites to run")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if addr := os.Getenv(targetsEnv); addr != "" {
		runTargets(addr)
		return
	}

	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()

	r := &report{started: time.Now(), duration: *dur, redisAddr: srv.Addr}
	r.machine()
	for _, s := range strings.Split(*suites, ",") {
		switch strings.TrimSpace(s) {
		case "store":
			r.store = runStoreSuite(srv, *dur)
		case "memory":
			r.memory = runMemorySuite(*dur)
		case "gateway":
			r.gateway = runGatewaySuite(srv, *dur)
		case "rls":
			r.rls = runRLSSuite(srv, *dur)
		case "":
		default:
			fmt.Fprintf(os.Stderr, "unknown suite %q\n", s)
			os.Exit(2)
		}
	}
	md := r.markdown(*png)
	fmt.Print(md)
	if *png != "" && len(r.gateway) > 0 {
		if err := r.chart(*png); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
			os.Exit(1)
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
