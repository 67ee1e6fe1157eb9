package main

import "strings"

// storeMarkdown writes the store section: every cell, then Tollgate
// against redis_rate on the current go-redis.
func (r *report) storeMarkdown(w func(string, ...any)) {
	w("## 1. Redis store: decisions per second\n\n")
	w("Each caller loops: decide, record the latency, repeat. Three kinds of cell, side by side:\n\n")
	w("- *one hot key* and *keys expire between touches* (100,000 keys): a generous limit (1,000,000/s, burst the same), so every\n")
	w("  decision takes the write path, but a key's state is spent a microsecond after each touch. A key then lives: for\n")
	w("  Tollgate's GCRA and token bucket, exactly until the bucket is full again (that microsecond), so on 100,000 keys nearly\n")
	w("  every decision creates its key afresh; for redis_rate one second, as it rounds its TTL up to whole seconds (`EX`), and\n")
	w("  Redis then expires it, at a cost in the server's CPU but not in the script time; for Tollgate's sliding counter (the\n")
	w("  window and the one before it) and the plain script (twice the refill time) about two seconds. A key's touches are one\n")
	w("  to four seconds apart here, so the buckets' keys are all gone by their next touch and the others' in part.\n")
	w("- *keys stay live* (100,000 keys): a per-user quota of 1,000 a day, burst 1,000, that the users' traffic keeps partly\n")
	w("  spent: every key is decided once before the cells, each decision adds 86.4 s to its key's debt, and no key comes near\n")
	w("  1,000 decisions in the run, so nothing is refused (a refusal would count as an error) and every decision updates a live key.\n\n")
	w("*script µs* is the `usec` of `EVALSHA`/`EVAL`/`FCALL` in `INFO commandstats` per decision, *Redis CPU µs* redis-server's\n")
	w("CPU time (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`) per decision, *calls* its script calls per decision (Tollgate\n")
	w("coalesces concurrent requests into one call). Redis measures a script's time on the wall clock, so where Redis is\n")
	w("descheduled mid-script (two cores, shared with the callers) script µs can exceed the CPU it used. redis_rate runs on the\n")
	w("current go-redis (%s) and, in a process of its own, on v9.0.2, the version its go.mod names (and earlier reports used):\n", goredisVersion())
	w("**every ratio against redis_rate in this report is against the current go-redis**, the v9.0.2 row is for comparison.\n")
	w("Each cell ran %d time(s), the implementations in turn; every figure is the median of its runs.\n\n", repeats)
	w("| implementation | callers | keys | decisions/s | p50 ms | p99 ms | p99.9 ms | script µs | Redis CPU µs | calls | errors |\n")
	w("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.store {
		w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.impl, x.callers, keysLabel(x.set), fmtFloat(x.perSec, 0),
			ms(x.lat.p50), ms(x.lat.p99), ms(x.lat.p999), fmtFloat(x.scriptUsec, 2), fmtFloat(x.redisUsec, 2), fmtFloat(x.calls, 3), x.errors)
	}
	w("\n")
	r.storeRatios(w)
	r.goredisVersions(w)
}

// keysLabel names a key set in the tables.
func keysLabel(s storeKeySet) string {
	if s.keys == 1 {
		return s.label
	}
	return fmtInt(s.keys) + ", " + s.label
}

// fmtInt writes n with thousands separators.
func fmtInt(n int) string {
	s := fmtFloat(float64(n), 0)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// storeAt returns the rows of implementations named with prefix in one
// cell.
func (r *report) storeAt(prefix string, callers int, set storeKeySet) []storeRow {
	var out []storeRow
	for _, x := range r.store {
		if strings.HasPrefix(x.impl, prefix) && x.callers == callers && x.set == set {
			out = append(out, x)
		}
	}
	return out
}

// storeCellsRun lists the cells of the store table in the order they ran.
func (r *report) storeCellsRun() []storeCell {
	var cells []storeCell
	for _, x := range r.store {
		c := storeCell{x.set, x.callers}
		if !containsCell(cells, c) {
			cells = append(cells, c)
		}
	}
	return cells
}

func containsCell(cells []storeCell, c storeCell) bool {
	for _, x := range cells {
		if x == c {
			return true
		}
	}
	return false
}

// storeRatios writes Tollgate against redis_rate on the current go-redis,
// cell by cell.
func (r *report) storeRatios(w func(string, ...any)) {
	peerName := redisRateName(goredisVersion())
	w("Against redis_rate on the current go-redis (%s), cell by cell (targets, at 64 callers: at least 2.5x its decisions/s,\n", goredisVersion())
	w("a p99 no worse, at most 40%% of its script CPU per decision):\n\n")
	w("| callers | keys | Tollgate algorithm | decisions/s ratio | p99 Tollgate / redis_rate | script CPU ratio | Redis CPU ratio |\n")
	w("|---:|---|---|---:|---:|---:|---:|\n")
	for _, c := range r.storeCellsRun() {
		peer := r.storeAt(peerName, c.callers, c.set)
		if len(peer) == 0 {
			continue
		}
		p := peer[0]
		for _, t := range r.storeAt("tollgate", c.callers, c.set) {
			w("| %d | %s | %s | %sx | %s / %s ms | %s | %s |\n", c.callers, keysLabel(c.set), strings.TrimPrefix(t.impl, "tollgate "),
				fmtFloat(t.perSec/p.perSec, 2), ms(t.lat.p99), ms(p.lat.p99), pct(t.scriptUsec, p.scriptUsec), pct(t.redisUsec, p.redisUsec))
		}
	}
	w("\n")
}

// goredisVersions writes redis_rate on the current go-redis against v9.0.2.
func (r *report) goredisVersions(w func(string, ...any)) {
	cur, old := redisRateName(goredisVersion()), redisRateName("v9.0.2")
	var lines []string
	for _, c := range r.storeCellsRun() {
		a, b := r.storeAt(cur, c.callers, c.set), r.storeAt(old, c.callers, c.set)
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		lines = append(lines, "| "+itoa(c.callers)+" | "+keysLabel(c.set)+" | "+fmtFloat(a[0].perSec/b[0].perSec, 2)+"x | "+
			ms(a[0].lat.p99)+" / "+ms(b[0].lat.p99)+" ms | "+pct(a[0].redisUsec, b[0].redisUsec)+" |")
	}
	if len(lines) == 0 {
		return
	}
	w("redis_rate on go-redis %s against v9.0.2 (the same script; only the client differs):\n\n", goredisVersion())
	w("| callers | keys | decisions/s ratio | p99 current / v9.0.2 | Redis CPU ratio |\n|---:|---|---:|---:|---:|\n")
	for _, l := range lines {
		w("%s\n", l)
	}
	w("\n")
}

// pct writes a as a percentage of b.
func pct(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmtFloat(100*a/b, 0) + "%"
}

func itoa(n int) string { return fmtFloat(float64(n), 0) }
