package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// gatewayRow is one cell of the gateway table: one target at one offered
// rate.
type gatewayRow struct {
	target   string
	offered  int
	achieved float64 // successful responses per second
	lat      summary
	errors   int
	firstErr string
}

const gatewayPolicy = `version: bench
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: open}
plans:
  open: {rate: 1000000, period: 1s}
routes:
  - {name: all, path: /, upstream: "UPSTREAM"}
`

// gatewayRates are the offered loads, up to past saturation on 2 cores.
var gatewayRates = []int{1000, 2000, 3000, 4000, 5000, 6000, 8000}

func init() {
	if v := os.Getenv("BENCH_RATES"); v != "" {
		gatewayRates = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			gatewayRates = append(gatewayRates, n)
		}
	}
}

// target is one server the gateway suite loads.
type target struct{ name, url string }

// targetsEnv, when set (to the Redis address), makes this program serve
// the gateway suite's targets instead of measuring: it prints one line per
// target, name and URL separated by a tab, and serves until its standard
// input closes. The load generator then runs in another process than the
// servers it loads, so neither's garbage collector pauses the other.
const targetsEnv = "TOLLGATE_BENCH_TARGETS"

// serveTargets starts the upstream, the plain proxy and a gateway on each
// store, all sending to that upstream, and returns them.
func serveTargets(redisAddr string) []target {
	upstream := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	u, _ := url.Parse(upstream)
	plain := serve(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, ErrorLog: log.New(io.Discard, "", 0)})
	targets := []target{{"plain httputil.ReverseProxy", plain}}
	for _, store := range []string{"memory", "redis"} {
		p, err := policy.Parse([]byte(strings.ReplaceAll(gatewayPolicy, "UPSTREAM", upstream)), "bench.yaml")
		if err != nil {
			fatal(err)
		}
		redisURL := ""
		if store == "redis" {
			redisURL = "redis://" + redisAddr + "/0"
		}
		g, err := gateway.New(gateway.Options{Policy: p, RedisURL: redisURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			fatal(err)
		}
		pub, adm := listen(), listen()
		go g.Serve(context.Background(), pub, adm)
		targets = append(targets, target{"tollgate (" + store + " store)", "http://" + pub.Addr().String()})
	}
	time.Sleep(500 * time.Millisecond) // let the Redis store connect
	return targets
}

// runTargets is the program when targetsEnv is set.
func runTargets(redisAddr string) {
	for _, t := range serveTargets(redisAddr) {
		fmt.Printf("%s\t%s\n", t.name, t.url)
	}
	io.Copy(io.Discard, os.Stdin)
}

// startTargets runs this program again as the targets' server and returns
// the targets and a function that stops it.
func startTargets(redisAddr string) ([]target, func()) {
	exe, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), targetsEnv+"="+redisAddr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	var targets []target
	sc := bufio.NewScanner(stdout)
	for len(targets) < 3 && sc.Scan() {
		name, u, _ := strings.Cut(sc.Text(), "\t")
		targets = append(targets, target{name, u})
	}
	if len(targets) < 3 {
		fatal(fmt.Errorf("the targets' server gave %d targets, want 3: %v", len(targets), sc.Err()))
	}
	return targets, func() { stdin.Close(); cmd.Wait() }
}

func runGatewaySuite(srv *redistest.Server, dur time.Duration) []gatewayRow {
	targets, stop := startTargets(srv.Addr)
	defer stop()
	// Rates outer, targets inner, each cell run gatewayRepeats times in
	// turn: whatever else the machine does during a rate step hits every
	// target alike, and each figure is the median of its runs.
	var rows []gatewayRow
	for _, r := range gatewayRates {
		runs := make([][]gatewayRow, len(targets))
		for range repeats {
			for i, t := range targets {
				row := attack(t.name, t.url+"/bench", r, dur)
				fmt.Fprintf(os.Stderr, "gateway: %-28s offered %5d/s: achieved %7.0f/s p50 %s p99 %s p99.9 %s ms, %d errors %s\n",
					row.target, r, row.achieved, ms(row.lat.p50), ms(row.lat.p99), ms(row.lat.p999), row.errors, row.firstErr)
				runs[i] = append(runs[i], row)
			}
		}
		for _, rs := range runs {
			rows = append(rows, medianRow(rs))
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return targetOrder(rows[i].target) < targetOrder(rows[j].target) })
	return rows
}

// medianRow combines runs of one gateway cell: the median of each
// figure, and every run's errors.
func medianRow(runs []gatewayRow) gatewayRow {
	row := runs[0]
	row.achieved = median(runs, func(r gatewayRow) float64 { return r.achieved })
	row.lat = medianLatency(runs, func(r gatewayRow) summary { return r.lat })
	for _, r := range runs[1:] {
		row.errors += r.errors
		if row.firstErr == "" {
			row.firstErr = r.firstErr
		}
	}
	return row
}

// targetOrder lists the plain proxy first, then memory, then Redis.
func targetOrder(name string) int {
	switch {
	case strings.HasPrefix(name, "plain"):
		return 0
	case strings.Contains(name, "memory"):
		return 1
	}
	return 2
}

// attack offers rate requests per second for dur, open loop: requests are
// sent on schedule whether or not earlier ones have answered, so a slow
// server cannot hide its latency by slowing the load (no coordinated
// omission).
func attack(name, u string, rate int, dur time.Duration) gatewayRow {
	// A client of its own per cell, closed after it, so an overloaded cell
	// cannot leave its connections (and file descriptors) to the next.
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	atk := vegeta.NewAttacker(vegeta.Client(&http.Client{Transport: tr, Timeout: 10 * time.Second}),
		vegeta.Workers(64), vegeta.MaxWorkers(1024))
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: u})
	var lats latencies
	part := lats.part(rate * int(dur.Seconds()+1))
	row := gatewayRow{target: name, offered: rate}
	start := time.Now()
	ok := 0
	for res := range atk.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, dur, name) {
		if res.Code == http.StatusOK {
			ok++
			part = append(part, res.Latency)
		} else {
			if row.errors == 0 {
				row.firstErr = fmt.Sprintf("%d %s", res.Code, res.Error)
			}
			row.errors++
		}
	}
	lats.add(part)
	row.achieved = float64(ok) / time.Since(start).Seconds()
	row.lat = lats.summary()
	time.Sleep(time.Second) // let the servers drop the cell's connections
	return row
}

func listen() net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err)
	}
	return l
}

func serve(h http.Handler) string {
	l := listen()
	go (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}).Serve(l)
	return "http://" + l.Addr().String()
}
