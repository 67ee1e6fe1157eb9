package main

import (
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// gatewayMarkdown writes the gateway section: every cell, the targets
// met or missed, and the connection cap's cell.
func (r *report) gatewayMarkdown(w func(string, ...any), png string) {
	g := r.gateway
	w("## 3. Gateway\n\n")
	w("Open-loop constant-rate load (vegeta, in the bench's own process) against each target for %v per rate, **at %d\n", r.mode.duration, gatewayConns)
	w("connections**: at most %d requests in flight, each on a connection of its own (vegeta `MaxWorkers(%d)`, the client's\n", gatewayConns, gatewayConns)
	w("`MaxConnsPerHost` %d). A request is sent on schedule unless %d are in flight already, when it waits in the load generator:\n", gatewayConns, gatewayConns)
	w("past saturation the offered rate is not reached, and that wait is not in the latency. Latency is per request as sent, so a\n")
	w("saturated server shows its queueing up to %d deep. The gateways here set `listeners.max_conns_per_client: %d` for the\n", gatewayConns, benchConnsPerClient)
	w("load generator's one address, so the cells measure the proxy, not the cap per client (the default, 256, has its own\n")
	w("cell below); they log each request, to a handler that discards it.\n\n")
	w("Each target runs in a process of its own and the upstream (which answers `ok` at once) in another, so *CPU µs/req* is\n")
	w("the target's process alone: its user + system CPU time over the cell (getrusage, read by the process itself before and\n")
	w("after) per successful request. *Redis µs/req* is redis-server's (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`) over the\n")
	w("Redis store's cells, less Redis' idle rate measured before them (%s µs/s); *Redis calls/req* the gateway's calls to\n", fmtFloat(g.redisIdle, 0))
	w("Redis (`tollgate_store_calls_total`) per request: 1 when every decision was Redis', less while its breaker was open and\n")
	w("the gateway decided on its memory fallback (a cell that measures the fallback, not Redis). Each cell ran %d time(s), the targets in turn;\n", repeats)
	w("every figure is the median of its runs (errors are summed).")
	if len(g.past) == 0 {
		w("\n\n")
		r.gatewayRows(w)
		return // a profiling run: the sweep alone
	}
	w(" The sweep's rates come first, then cells at half, 1.5x\n")
	w("and 2x the plain proxy's saturation in the sweep (%s/s: %d, %d and %d/s).\n\n", fmtFloat(g.sat, 0), g.half, g.past[0], g.past[1])
	if top := slices.Max(gatewayRates); g.sat >= 0.95*float64(top) {
		w("**The sweep did not saturate the plain proxy** (it served %s of %d/s offered at the top): the cells at half, 1.5x and 2x its\n", fmtFloat(g.sat, 0), top)
		w("saturation are at half, 1.5x and 2x that rate instead, and the targets on them mean little.\n\n")
	}
	r.gatewayRows(w)
	r.gatewayTargets(w)
	r.capMarkdown(w)
	if png != "" {
		w("![p99 latency against offered rate](%s)\n\n", filepath.ToSlash(relTo(png)))
	}
}

// gatewayRows writes every cell of the gateway section.
func (r *report) gatewayRows(w func(string, ...any)) {
	w("| target | offered/s | achieved/s | p50 ms | p99 ms | p99.9 ms | errors | CPU µs/req | Redis µs/req | Redis calls/req |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.gateway.rows {
		redis, calls := "–", "–"
		if strings.Contains(x.target, "redis") {
			redis, calls = fmtFloat(x.redisCPU, 1), fmtFloat(x.calls, 2)
		}
		w("| %s | %d | %s | %s | %s | %s | %d | %s | %s | %s |\n", x.target, x.offered, fmtFloat(x.achieved, 0),
			ms(x.lat.p50), ms(x.lat.p99), ms(x.lat.p999), x.errors, fmtFloat(x.cpu, 1), redis, calls)
	}
	w("\n")
}

// gatewayTargets writes each target of the gateway section, met or
// missed.
func (r *report) gatewayTargets(w func(string, ...any)) {
	g := r.gateway
	at := func(target string, offered int) *gatewayRow {
		for i, x := range g.rows {
			if x.target == target && x.offered == offered {
				return &g.rows[i]
			}
		}
		return nil
	}
	var names []string
	peak := map[string]float64{}
	for _, x := range g.rows {
		if _, ok := peak[x.target]; !ok {
			names = append(names, x.target)
		}
		peak[x.target] = max(peak[x.target], x.achieved)
	}
	plain := names[0]
	met, checks := 0, 0
	check := func(target, what, measured, want string, ok bool) {
		verdict := "**missed**"
		if ok {
			verdict, met = "met", met+1
		}
		checks++
		w("| %s | %s | %s | %s | %s |\n", target, what, measured, want, verdict)
	}
	w("Targets, at %d connections: CPU per request at most 1.25x the plain proxy's (memory store) and 1.4x including Redis'\n", gatewayConns)
	w("(Redis store) at 1,000 and 2,000/s offered; peak at least 90%% of the plain proxy's (over every cell); added p99 under 1 ms\n")
	w("at half the plain proxy's saturation; at 1.5x and 2x it, achieved at least 90%% of the target's own peak (no collapse).\n\n")
	w("| target | measure | measured | target | |\n|---|---|---:|---:|---|\n")
	for _, n := range names[1:] {
		limit, incl := 1.25, ""
		if strings.Contains(n, "redis") {
			limit, incl = 1.4, " incl. Redis"
		}
		for _, rate := range cpuRates {
			x, p := at(n, rate), at(plain, rate)
			if x == nil || p == nil || p.cpu == 0 {
				continue
			}
			cpu, measured := x.cpu+x.redisCPU, ""
			if incl != "" && x.calls < 0.99 {
				measured = " (" + fmtFloat(x.calls, 2) + " Redis calls/req: the fallback, in part)"
			}
			check(n, "CPU/request at "+itoa(rate)+"/s"+incl+", vs plain's "+fmtFloat(p.cpu, 1)+" µs",
				fmtFloat(cpu, 1)+" µs = "+fmtFloat(cpu/p.cpu, 2)+"x"+measured, "≤ "+fmtFloat(limit, 2)+"x", cpu <= limit*p.cpu && measured == "")
		}
		check(n, "peak achieved, vs plain's "+fmtFloat(peak[plain], 0)+"/s", fmtFloat(peak[n], 0)+"/s = "+fmtFloat(100*peak[n]/peak[plain], 0)+"%",
			"≥ 90%", peak[n] >= 0.9*peak[plain])
		if x, p := at(n, g.half), at(plain, g.half); x != nil && p != nil {
			added := x.lat.p99 - p.lat.p99
			check(n, "added p99 at "+itoa(g.half)+"/s, over plain's "+ms(p.lat.p99)+" ms", ms(added)+" ms", "< 1 ms", added < time.Millisecond)
		}
	}
	for _, n := range names {
		for _, rate := range g.past {
			if x := at(n, rate); x != nil {
				check(n, "achieved at "+itoa(rate)+"/s, vs its peak", fmtFloat(x.achieved, 0)+"/s = "+fmtFloat(100*x.achieved/peak[n], 0)+"%",
					"≥ 90%", x.achieved >= 0.9*peak[n])
			}
		}
	}
	w("\nMet %d of %d.\n\n", met, checks)
}

// capMarkdown writes the connection cap's cell.
func (r *report) capMarkdown(w func(string, ...any)) {
	c := r.gateway.cap
	w("### The cap on connections per client address\n\n")
	w("A gateway on the default `listeners.max_conns_per_client` (%d; memory store). %s sends %d/s for %v (at %d\n", c.cap, otherAddr, otherRate, r.mode.duration, gatewayConns)
	w("connections) alone; then %s opens %d connections one after another, each sending one request and held open once\n", floodAddr, c.opened)
	w("answered; then %s's load again, beside them; then each held connection sends a second request.\n\n", otherAddr)
	w("| client | | |\n|---|---|---|\n")
	w("| %s | connections opened | %d |\n", floodAddr, c.opened)
	w("| | answered and held open | %d |\n", c.accepted)
	w("| | refused (reset as accepted) | %d (%s) |\n", c.refused, c.firstRefusal)
	w("| | held ones answering again, after | %d |\n", c.stillServed)
	for _, l := range []struct {
		what string
		row  gatewayRow
	}{{"alone", c.alone}, {"beside the held connections", c.beside}} {
		w("| %s | %d/s %s: ok, errors, p50, p99 | %d ok, %d errors, %s ms, %s ms |\n", otherAddr, otherRate, l.what, l.row.ok, l.row.errors, ms(l.row.lat.p50), ms(l.row.lat.p99))
	}
	verdict := "**missed**"
	if c.accepted == c.cap && c.refused == c.opened-c.cap && c.beside.errors == 0 && c.beside.ok > 0 {
		verdict = "met"
	}
	w("\nTarget: the flooding address is refused past its %d connections while the other address is served: %s.\n\n", c.cap, verdict)
}
