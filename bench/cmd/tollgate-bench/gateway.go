package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	vegeta "github.com/tsenart/vegeta/v12/lib"

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
	ok       int
	errors   int
	firstErr string
	cpu      float64 // the target process's CPU per successful request, µs
	redisCPU float64 // Redis' CPU per successful request, µs, less its idle rate (the Redis store's cells)
	calls    float64 // the gateway's calls to Redis per successful request (the Redis store's cells; under 1 while its breaker is open)
}

// gatewayResult is what the gateway suite measured.
type gatewayResult struct {
	rows      []gatewayRow
	sat       float64 // the plain proxy's peak achieved/s over the sweep
	half      int     // the offered rate at half of it
	past      []int   // the offered rates at 1.5x and 2x it
	redisIdle float64 // Redis' CPU at rest, µs per second, taken off its figures
	cap       capResult
}

// gatewayRates are the offered loads of the sweep, up to past saturation
// on 2 cores; cells at half, 1.5x and 2x the plain proxy's saturation
// follow it.
var gatewayRates = []int{1000, 2000, 3000, 4000, 6000, 8000, 10000}

// cpuRates are the offered rates the CPU per request is judged at.
var cpuRates = []int{1000, 2000}

func init() {
	if v := os.Getenv("BENCH_RATES"); v != "" {
		gatewayRates = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			gatewayRates = append(gatewayRates, n)
		}
	}
}

// gatewayConns is the most requests the load generator has in flight, and
// so connections open, against a target.
const gatewayConns = 64

// target is one server a suite loads.
type target struct{ name, url string }

// runGatewaySuite sweeps the offered rates over the plain proxy and the
// gateway on each store, then measures at half, 1.5x and 2x the plain
// proxy's saturation, then runs the connection cap's cell. With
// profileDir set it runs the sweep alone and writes a CPU profile of each
// target's process there.
func runGatewaySuite(srv *redistest.Server, dur time.Duration, profileDir string) *gatewayResult {
	prof := func(kind string) string {
		if profileDir == "" {
			return ""
		}
		return filepath.Join(profileDir, kind+".pprof")
	}
	up := startTarget("upstream", targetSpec{Kind: kindUpstream})
	defer up.stop()
	var targets []*targetProc
	for _, t := range []struct{ name, kind string }{
		{"plain httputil.ReverseProxy", kindPlain}, {"tollgate (memory store)", kindMemory}, {"tollgate (redis store)", kindRedis},
	} {
		p := startTarget(t.name, targetSpec{Kind: t.kind, Upstream: up.url, Redis: srv.Addr, CPUProfile: prof(t.kind)})
		defer p.stop()
		targets = append(targets, p)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		fatal(err)
	}
	defer rc.Close()
	ctx := context.Background()
	time.Sleep(500 * time.Millisecond) // let the Redis store connect
	r0, t0 := redisCPU(ctx, rc), time.Now()
	time.Sleep(time.Second)
	res := &gatewayResult{redisIdle: (redisCPU(ctx, rc) - r0) * 1e6 / time.Since(t0).Seconds()}

	cell := func(t *targetProc, rate int) gatewayRow {
		var calls0 float64
		if t.kind == kindRedis {
			calls0 = t.storeCalls()
		}
		cpu0, redis0, start := t.cpu(), redisCPU(ctx, rc), time.Now()
		row := attack(t.name, t.url+"/bench", rate, dur, "")
		cpu, redis, elapsed := t.cpu()-cpu0, redisCPU(ctx, rc)-redis0, time.Since(start)
		if row.ok > 0 {
			row.cpu = float64(cpu.Microseconds()) / float64(row.ok)
			if t.kind == kindRedis {
				row.redisCPU = (redis*1e6 - res.redisIdle*elapsed.Seconds()) / float64(row.ok)
				row.calls = (t.storeCalls() - calls0) / float64(row.ok)
			}
		}
		fmt.Fprintf(os.Stderr, "gateway: %-28s offered %5d/s: achieved %7.0f/s p50 %s p99 %s p99.9 %s ms, CPU %.1f+%.1f µs/req, %.2f Redis calls/req, %d errors %s\n",
			row.target, rate, row.achieved, ms(row.lat.p50), ms(row.lat.p99), ms(row.lat.p999), row.cpu, row.redisCPU, row.calls, row.errors, row.firstErr)
		time.Sleep(time.Second) // let the servers drop the cell's connections
		return row
	}
	// Rates outer, targets inner, each cell run repeats times in turn:
	// whatever else the machine does during a rate step hits every target
	// alike, and each figure is the median of its runs.
	measure := func(rates []int) {
		for _, r := range rates {
			if slices.ContainsFunc(res.rows, func(x gatewayRow) bool { return x.offered == r }) {
				continue
			}
			runs := make([][]gatewayRow, len(targets))
			for range repeats {
				for i, t := range targets {
					runs[i] = append(runs[i], cell(t, r))
				}
			}
			for _, rs := range runs {
				res.rows = append(res.rows, medianRow(rs))
			}
		}
	}
	measure(gatewayRates)
	for _, x := range res.rows {
		if x.target == targets[0].name {
			res.sat = max(res.sat, x.achieved)
		}
	}
	if profileDir == "" { // a profile is of the rates asked for alone
		round := func(f float64) int { return int(math.Round(f/100)) * 100 }
		res.half, res.past = round(res.sat/2), []int{round(1.5 * res.sat), round(2 * res.sat)}
		measure(append([]int{res.half}, res.past...))
	}
	sort.SliceStable(res.rows, func(i, j int) bool {
		a, b := res.rows[i], res.rows[j]
		if targetOrder(a.target) != targetOrder(b.target) {
			return targetOrder(a.target) < targetOrder(b.target)
		}
		return a.offered < b.offered
	})
	if profileDir == "" {
		res.cap = runCapCell(up.url, dur)
	}
	return res
}

// medianRow combines runs of one gateway cell: the median of each
// figure, and every run's errors.
func medianRow(runs []gatewayRow) gatewayRow {
	row := runs[0]
	row.achieved = median(runs, func(r gatewayRow) float64 { return r.achieved })
	row.cpu = median(runs, func(r gatewayRow) float64 { return r.cpu })
	row.redisCPU = median(runs, func(r gatewayRow) float64 { return r.redisCPU })
	row.calls = median(runs, func(r gatewayRow) float64 { return r.calls })
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
// omission) -- up to gatewayConns requests in flight, each on a
// connection of its own; past that the next request waits in the load
// generator. The connections come from local, if set.
func attack(name, u string, rate int, dur time.Duration, local string) gatewayRow {
	// A client of its own per cell, closed after it, so an overloaded cell
	// cannot leave its connections (and file descriptors) to the next.
	d := &net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	tr := &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: gatewayConns, MaxIdleConnsPerHost: gatewayConns, IdleConnTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	atk := vegeta.NewAttacker(vegeta.Client(&http.Client{Transport: tr, Timeout: 10 * time.Second}),
		vegeta.Workers(gatewayConns), vegeta.MaxWorkers(gatewayConns))
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: u})
	var lats latencies
	part := lats.part(rate * int(dur.Seconds()+1))
	row := gatewayRow{target: name, offered: rate}
	start := time.Now()
	for res := range atk.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, dur, name) {
		if res.Code == http.StatusOK {
			row.ok++
			part = append(part, res.Latency)
		} else {
			if row.errors == 0 {
				row.firstErr = fmt.Sprintf("%d %s", res.Code, res.Error)
			}
			row.errors++
		}
	}
	lats.add(part)
	row.achieved = float64(row.ok) / time.Since(start).Seconds()
	row.lat = lats.summary()
	return row
}

// The connection cap's cell: a gateway on the default cap per client
// address, one address opening more connections than that, and another
// address's load beside it.
const (
	floodAddr  = "127.0.0.2" // loopback is all of 127.0.0.0/8
	otherAddr  = "127.0.0.3"
	floodConns = policy.DefaultMaxConnsPerClient + 64
	otherRate  = 1000
)

// capResult is what the cap's cell measured.
type capResult struct {
	cap               int // the gateway's cap per client address
	opened            int // connections the flooding address opened
	accepted, refused int // of them, answered and reset
	firstRefusal      string
	stillServed       int        // accepted connections that answered again after the other address's load
	alone, beside     gatewayRow // the other address's load, alone and beside the flood
}

// runCapCell measures the connection cap on its own: the other address's
// load alone, then floodAddr opening floodConns connections one after
// another (each sends a request, and is held open once answered), then
// the other address's load again beside the held connections.
func runCapCell(upstream string, dur time.Duration) capResult {
	t := startTarget("tollgate (default cap)", targetSpec{Kind: kindCap, Upstream: upstream})
	defer t.stop()
	res := capResult{cap: policy.DefaultMaxConnsPerClient, opened: floodConns}
	res.alone = attack(otherAddr, t.url+"/bench", otherRate, dur, otherAddr)
	time.Sleep(time.Second)
	u, _ := url.Parse(t.url)
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(floodAddr)}}
	type held struct {
		c  net.Conn
		br *bufio.Reader
	}
	var conns []held
	get := func(h held) error {
		h.c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(h.c, "GET /bench HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(h.br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for range floodConns {
		c, err := d.Dial("tcp", u.Host)
		if err == nil {
			h := held{c, bufio.NewReader(c)}
			if err = get(h); err == nil {
				conns = append(conns, h)
				continue
			}
			c.Close()
		}
		if res.refused == 0 { // the error's last part: its addresses differ from run to run
			msg := err.Error()
			res.firstRefusal = msg[strings.LastIndex(msg, ": ")+2:]
		}
		res.refused++
	}
	res.accepted = len(conns)
	res.beside = attack(otherAddr, t.url+"/bench", otherRate, dur, otherAddr)
	for _, h := range conns {
		if get(h) == nil {
			res.stillServed++
		}
		h.c.Close()
	}
	fmt.Fprintf(os.Stderr, "gateway cap: %s opened %d: %d accepted, %d refused (%s), %d still served; %s at %d/s: alone %d ok %d errors p99 %s ms, beside %d ok %d errors p99 %s ms %s\n",
		floodAddr, res.opened, res.accepted, res.refused, res.firstRefusal, res.stillServed, otherAddr, otherRate,
		res.alone.ok, res.alone.errors, ms(res.alone.lat.p99), res.beside.ok, res.beside.errors, ms(res.beside.lat.p99), res.beside.firstErr)
	return res
}
