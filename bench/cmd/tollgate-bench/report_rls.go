package main

import (
	"slices"
	"sort"
)

// rlsMarkdown writes the rate-limit service section.
func (r *report) rlsMarkdown(w func(string, ...any)) {
	x := r.rls
	rounds := len(x.runs[0])
	w("## 4. Envoy's rate-limit service\n\n")
	w("`ShouldRateLimit` over gRPC (loopback TCP, %d connections), %d callers in a closed loop for %v, one descriptor per request\n", rlsConns, rlsCallers, r.mode.duration)
	w("over 10,000 values under a limit no caller reaches (so every decision charges Redis). Each server runs in a process of its\n")
	w("own, apart from the load generator, on the same redis-server: one whose `ShouldRateLimit` answers OK at once (the gRPC\n")
	w("floor); one that answers the same after one Redis `PING` through rueidis (the floor of any service that consults Redis\n")
	w("per request); Tollgate's, wired as `tollgate rls` builds it from envoyproxy/ratelimit's environment variables (Redis\n")
	w("behind the breaker with the local fallback, the deny cache, the metrics); and envoyproxy/ratelimit ")
	if x.peerOK {
		w("%s, built from its module\n", x.peer)
		w("(bench/peers/ratelimit runs its service_cmd's runner). ")
	} else {
		w("— **not measured**: %s.\n", x.peer)
	}
	w("Tollgate's and envoyproxy/ratelimit's processes get the same environment and read the same\n")
	w("configuration file: `REDIS_SOCKET_TYPE=tcp`, `REDIS_URL`, `RUNTIME_ROOT` (`RUNTIME_SUBDIRECTORY=ratelimit`,\n")
	w("`RUNTIME_WATCH_ROOT=false`), the listeners on loopback ports, `USE_STATSD=false USE_PROMETHEUS=true`; everything else\n")
	w("at its default (envoyproxy/ratelimit: `REDIS_POOL_SIZE=10`, no pipeline window, no local cache).\n")
	w("*Process CPU* is the server process's CPU time (getrusage) per decision, *Redis CPU* redis-server's (INFO cpu, user and\n")
	w("system) less its idle rate measured before the cells (%s µs/s), *Redis calls* the calls Redis received per decision\n", fmtFloat(x.redisIdle, 0))
	w("(Tollgate's script calls, each deciding the decisions that queued meanwhile; envoyproxy/ratelimit's INCRBY and\n")
	w("EXPIRE, pipelined; the PINGs), *fallback* the share of Tollgate's decisions its local fallback made (a Redis call past\n")
	w("its 20 ms timeout, or the breaker open). %d rounds, the servers in turn in each; medians.\n\n", rounds)
	w("| server | callers | decisions/s | p50 ms | p99 ms | p99.9 ms | process CPU µs | Redis CPU µs | CPU µs in all | Redis calls | fallback | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, row := range x.rows {
		fb := "–"
		if x.kinds[i] == rlsTollgate {
			fb = fmtFloat(100*row.fallback, 1) + "%"
		}
		w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", row.target, row.callers, fmtFloat(row.perSec, 0), ms(row.lat.p50), ms(row.lat.p99), ms(row.lat.p999),
			fmtFloat(row.procUsec, 1), fmtFloat(row.redisUsec, 1), fmtFloat(row.procUsec+row.redisUsec, 1), fmtFloat(row.calls, 3), fb, row.errors)
	}
	w("\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	if q, ok := x.ratio(rlsTollgate, rlsPing); ok {
		w("- Tollgate / the PING server = **%s%%** of its decisions per second (the rounds' ratios, median; %s–%s%%), target at least 90%%: %s\n",
			fmtFloat(100*q[1], 0), fmtFloat(100*q[0], 0), fmtFloat(100*q[2], 0), verdict(q[1] >= 0.9))
	}
	if q, ok := x.ratio(rlsTollgate, rlsRatelimit); ok {
		w("- Tollgate / envoyproxy/ratelimit = **%sx** (%s–%sx), target at least 2x: %s\n", fmtFloat(q[1], 2), fmtFloat(q[0], 2), fmtFloat(q[2], 2), verdict(q[1] >= 2))
		t, p := x.row(rlsTollgate), x.row(rlsRatelimit)
		w("- CPU per decision, process and Redis: Tollgate %s µs, envoyproxy/ratelimit %s µs (%sx)\n",
			fmtFloat(t.procUsec+t.redisUsec, 1), fmtFloat(p.procUsec+p.redisUsec, 1), fmtFloat((p.procUsec+p.redisUsec)/(t.procUsec+t.redisUsec), 2))
	}
	if q, ok := x.ratio(rlsTollgate, rlsNoop); ok {
		w("- Tollgate / the gRPC floor = %s%% (%s–%s%%)", fmtFloat(100*q[1], 0), fmtFloat(100*q[0], 0), fmtFloat(100*q[2], 0))
		if p, ok := x.ratio(rlsPing, rlsNoop); ok {
			w("; the PING server's = %s%%: one Redis round trip per request, with Redis on the same two cores, costs that much", fmtFloat(100*p[1], 0))
		}
		w("\n")
	}
	w("\n")
}

// row returns the median row of the target kind.
func (x *rlsResult) row(kind string) rlsRow { return x.rows[slices.Index(x.kinds, kind)] }

// ratio returns the least, the median and the greatest of the rounds'
// ratios of a's decisions per second to b's, and whether both ran.
func (x *rlsResult) ratio(a, b string) ([3]float64, bool) {
	i, j := slices.Index(x.kinds, a), slices.Index(x.kinds, b)
	if i < 0 || j < 0 {
		return [3]float64{}, false
	}
	var q []float64
	for k := range x.runs[i] {
		if d := x.runs[j][k].perSec; d > 0 {
			q = append(q, x.runs[i][k].perSec/d)
		}
	}
	if len(q) == 0 {
		return [3]float64{}, false
	}
	sort.Float64s(q)
	return [3]float64{q[0], q[len(q)/2], q[len(q)-1]}, true
}
