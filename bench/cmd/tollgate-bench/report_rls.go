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
	w("at its default (envoyproxy/ratelimit: `REDIS_POOL_SIZE=10`, no pipeline window, no local cache), but Tollgate's\n")
	w("`TOLLGATE_STORE_TIMEOUT=%v` (envoyproxy/ratelimit has no such bound): at the default, 20 ms, this loaded machine's stalls\n", rlsStoreTimeout)
	w("open the breaker and the local fallback makes a quarter to a half of the decisions, which is not the service on Redis.\n")
	w("*Process CPU* is the server process's CPU time (getrusage) per decision, *Redis CPU* redis-server's (INFO cpu, user and\n")
	w("system) less its idle rate measured before the cells (%s µs/s), *Redis calls* the calls Redis received per decision\n", fmtFloat(x.redisIdle, 0))
	w("(Tollgate's script calls, each deciding the decisions that queued meanwhile; envoyproxy/ratelimit's INCRBY and\n")
	w("EXPIRE, pipelined; the PINGs), *fallback* the share of Tollgate's decisions its local fallback made (a Redis call past\n")
	w("its timeout, or the breaker open). %d rounds, the servers in turn in each; medians.\n\n", rounds)
	w("| server | callers | decisions/s | p50 ms | p99 ms | p99.9 ms | process CPU µs | Redis CPU µs | CPU µs in all | load generator CPU µs | Redis calls | fallback | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, row := range x.rows {
		fb := "–"
		if x.kinds[i] == rlsTollgate {
			fb = fmtFloat(100*row.fallback, 1) + "%"
		}
		w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", row.target, row.callers, fmtFloat(row.perSec, 0), ms(row.lat.p50), ms(row.lat.p99), ms(row.lat.p999),
			fmtFloat(row.procUsec, 1), fmtFloat(row.redisUsec, 1), fmtFloat(row.procUsec+row.redisUsec, 1), fmtFloat(row.loadUsec, 1), fmtFloat(row.calls, 3), fb, row.errors)
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
			w("; the PING server / the gRPC floor = %s%%", fmtFloat(100*p[1], 0))
		}
		w("\n")
	}
	w("\n")
	x.rlsReading(w)
}

// rlsReading writes what the table's CPU figures say of the targets.
func (x *rlsResult) rlsReading(w func(string, ...any)) {
	if !slices.Contains(x.kinds, rlsTollgate) || !slices.Contains(x.kinds, rlsPing) {
		return
	}
	t, p := x.row(rlsTollgate), x.row(rlsPing)
	all := func(r rlsRow) float64 { return r.procUsec + r.redisUsec }
	// need is the process and Redis CPU per decision at which Tollgate
	// would reach share of r's rate, its load generator's as measured.
	need := func(r rlsRow, share float64) float64 { return (r.loadUsec+all(r))/share - t.loadUsec }
	w("Reading. Every process here shares the two cores, so once they are busy the decisions per second go as one over the\n")
	w("CPU per decision of the load generator (the client's gRPC work: ~%s µs beside Tollgate, more beside a server that answers\n", fmtFloat(t.loadUsec, 0))
	w("more slowly, as each wake-up then carries fewer answers), the server and Redis. Tollgate's decision costs %s µs more than\n", fmtFloat(all(t)-all(p), 1))
	w("the PING server's answer: %s µs in its process and %s µs in Redis (a decision script, coalesced, against a PING).\n",
		fmtFloat(t.procUsec-p.procUsec, 1), fmtFloat(t.redisUsec-p.redisUsec, 1))
	w("90%% of the PING server's rate asks for at most %s µs of process and Redis CPU per decision", fmtFloat(need(p, 0.9), 0))
	bound := need(p, 0.9)
	if slices.Contains(x.kinds, rlsRatelimit) {
		w(", twice envoyproxy/ratelimit's for at most %s µs", fmtFloat(need(x.row(rlsRatelimit), 2), 0))
		bound = max(bound, need(x.row(rlsRatelimit), 2))
	}
	w(", against Tollgate's %s and the PING server's own %s", fmtFloat(all(t), 0), fmtFloat(all(p), 0))
	if bound < 1.3*all(p) {
		w(": on this machine the targets ask Tollgate to decide on Redis for about what a bare PING costs")
	}
	w(".\n")
	w("Where Tollgate's process spends it (pprof, `-rls-profiles`, issue 34): the gRPC server and transport about as much per\n")
	w("decision as in the PING server (~40%% of the process); the store path about a third (~19 µs of ~58 in that run), half\n")
	w("of it the breaker layer (package resilience: a goroutine, a timer and a context per store call, its memo of decisions)\n")
	w("and half the Redis store's coalescing and rueidis, against ~10 µs for the PING server's round trip; envoyrls and the\n")
	w("engine ~9%% (~5 µs).\n")
	w("Serving calls on gRPC stream workers (`envoyrls.ServerOptions`, every server here but envoyproxy/ratelimit's) took the\n")
	w("goroutine stack growth from 18%% of Tollgate's process to 5%%.\n\n")
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
