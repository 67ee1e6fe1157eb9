package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/internal/redistest"
)

// The fleet suite: many gateways, each a process of its own with one store
// client at a few requests in flight, all sharing one redis-server. One
// busy gateway coalesces its concurrent requests into few script calls; a
// fleet of quiet ones cannot, so this is where Redis' cost per call shows.

// fleetKeys is the fleet's key set: users whose state stays live (see
// liveLimit), every gateway deciding for any of them.
const fleetKeys = 10_000

// fleetRow is one cell of the fleet table.
type fleetRow struct {
	impl       string
	procs      int // gateway processes
	inFlight   int // requests in flight in each
	perSec     float64
	lat        summary // over the whole fleet
	scriptUsec float64 // per decision: Redis' script time
	redisUsec  float64 // per decision: redis-server's CPU time
	calls      float64 // script calls per decision
	errors     int64
}

// runFleetSuite measures each fleet implementation with each number of
// processes at each number of requests in flight.
func runFleetSuite(srv *redistest.Server, m mode) []fleetRow {
	exe, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	admin, err := srv.Client()
	if err != nil {
		fatal(err)
	}
	defer admin.Close()
	flushAll(admin)
	impls := fleetImpls()
	for _, impl := range impls {
		fillFleetKeys(srv.Addr, impl)
	}
	var rows []fleetRow
	for _, procs := range m.fleetProcs {
		for _, inFlight := range m.fleetInFlight {
			runs := make([][]fleetRow, len(impls))
			for range m.fleetRepeats {
				for i, impl := range impls {
					runs[i] = append(runs[i], runFleetCell(admin, exe, fleetSpec(srv.Addr, impl.name, inFlight, m), procs))
				}
			}
			for _, rs := range runs {
				rows = append(rows, medianFleetRow(rs))
			}
		}
	}
	return rows
}

// fillFleetKeys decides once for every fleet key with impl, so that the
// cells find every key live.
func fillFleetKeys(addr string, impl storeImpl) {
	spec := workerSpec{Addr: addr, Impl: impl.name, Callers: 64, Keys: fleetKeys, Rate: liveLimit.Rate, Burst: liveLimit.Burst,
		Period: liveLimit.Period, Prefill: true, Warmup: time.Millisecond}
	l, err := prepareInProcess(impl, spec)
	if err != nil {
		fatal(err)
	}
	l.close()
}

// fleetSpec is the task of one gateway of a fleet cell.
func fleetSpec(addr, impl string, inFlight int, m mode) workerSpec {
	return workerSpec{Addr: addr, Impl: impl, Callers: inFlight, Keys: fleetKeys, Rate: liveLimit.Rate, Burst: liveLimit.Burst,
		Period: liveLimit.Period, Warmup: m.fleetDuration / 5, Duration: m.fleetDuration}
}

// runFleetCell starts procs workers of spec, lets them run at once, and
// merges what they measured.
func runFleetCell(admin rueidis.Client, exe string, spec workerSpec, procs int) fleetRow {
	loads := startFleet(exe, spec, procs)
	defer func() {
		for _, l := range loads {
			l.close()
		}
	}()
	results, use := measured(admin, loads)
	row := fleetRow{impl: spec.Impl, procs: procs, inFlight: spec.Callers}
	var n int64
	var lats [][]time.Duration
	for _, r := range results {
		n += r.Decisions
		row.errors += r.Errors
		row.perSec += r.perSec()
		lats = append(lats, r.Latencies)
	}
	row.lat = summarize(lats...)
	if n > 0 {
		row.scriptUsec, row.redisUsec, row.calls = use.scriptUsec/float64(n), use.cpuUsec/float64(n), float64(use.calls)/float64(n)
	}
	fmt.Fprintf(os.Stderr, "fleet: %-44s %2d procs x %d in flight: %7.0f/s p50 %s p99 %s ms, %.2f µs script, %.2f µs Redis CPU, %.3f calls per decision, %d errors\n",
		row.impl, procs, spec.Callers, row.perSec, ms(row.lat.p50), ms(row.lat.p99), row.scriptUsec, row.redisUsec, row.calls, row.errors)
	return row
}

// startFleet starts procs worker processes at once, each its own share of
// the callers (so they start on different keys), and returns them once all
// are ready.
func startFleet(exe string, spec workerSpec, procs int) []load {
	loads := make([]load, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := spec
			s.First = p * spec.Callers
			c, err := startChild(exe, s)
			if err == nil {
				loads[p] = c
			}
			errs[p] = err
		}()
	}
	wg.Wait()
	for p, err := range errs {
		if err != nil {
			for _, l := range loads {
				if l != nil {
					l.close()
				}
			}
			fatal(fmt.Errorf("fleet process %d: %w", p, err))
		}
	}
	return loads
}

// medianFleetRow combines runs of one fleet cell: the median of each
// figure, and every run's errors.
func medianFleetRow(runs []fleetRow) fleetRow {
	row := runs[0]
	row.perSec = median(runs, func(r fleetRow) float64 { return r.perSec })
	row.scriptUsec = median(runs, func(r fleetRow) float64 { return r.scriptUsec })
	row.redisUsec = median(runs, func(r fleetRow) float64 { return r.redisUsec })
	row.calls = median(runs, func(r fleetRow) float64 { return r.calls })
	row.lat = medianLatency(runs, func(r fleetRow) summary { return r.lat })
	for _, r := range runs[1:] {
		row.errors += r.errors
	}
	return row
}

// fleetMarkdown writes the fleet section.
func (r *report) fleetMarkdown(w func(string, ...any)) {
	w("## 5. A fleet of gateways on one Redis\n\n")
	w("N processes, each one gateway's store client with a fixed number of requests in flight (a closed loop), all deciding\n")
	w("at once against one redis-server for any of %s users whose keys stay live (the quota of 1,000 a day of section 1, every key\n", fmtInt(fleetKeys))
	w("decided once before the cells; nothing is refused). Tollgate's store is opened as the gateway opens it (`rstore.Open`,\n")
	w("rueidis, standalone) and decides by GCRA; redis_rate (GCRA too) runs on go-redis %s. Each process warms up, then all\n", goredisVersion())
	w("measure for %v at once; decisions/s is the fleet's sum, p50/p99 over every decision of the fleet, and Redis' figures\n", r.mode.fleetDuration)
	w("(script time, the server's whole CPU time, script calls) are per decision over the same window. At a few requests in\n")
	w("flight a gateway has little to coalesce, so its calls per decision stay near 1 and Redis' cost per call decides; the\n")
	w("server's CPU also carries each call's network work. The floor is the same fleet making calls that decide nothing (see\n")
	w("below). %d run(s) per cell, the implementations in turn; medians.\n\n", r.mode.fleetRepeats)
	w("| implementation | processes | in flight each | decisions/s | p50 ms | p99 ms | script µs | Redis CPU µs | calls | errors |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.fleet {
		w("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %d |\n", x.impl, x.procs, x.inFlight, fmtFloat(x.perSec, 0), ms(x.lat.p50), ms(x.lat.p99),
			fmtFloat(x.scriptUsec, 2), fmtFloat(x.redisUsec, 2), fmtFloat(x.calls, 3), x.errors)
	}
	w("\n")
	r.fleetRatios(w)
}

// fleetRatios writes Tollgate's Redis cost as a share of redis_rate's,
// cell by cell, against the target, beside the floor's.
func (r *report) fleetRatios(w func(string, ...any)) {
	w("Tollgate against redis_rate (go-redis %s), cell by cell. Target: Tollgate's Redis CPU per decision at most 80%% of\n", goredisVersion())
	w("redis_rate's in every fleet cell, with a p99 no worse. *floor* is the floor's Redis CPU per call as a share of\n")
	w("redis_rate's per decision: what a call costs Redis before its script does anything, which no script can go below.\n\n")
	w("| processes | in flight each | Redis CPU ratio | script CPU ratio | floor | decisions/s ratio | p99 Tollgate / redis_rate | target |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---|\n")
	met, cells := 0, 0
	for _, t := range r.fleet {
		if !strings.HasPrefix(t.impl, "tollgate") {
			continue
		}
		p, ok := r.fleetPeer(t, "redis_rate")
		if !ok {
			continue
		}
		floor := "-"
		if f, ok := r.fleetPeer(t, "floor"); ok {
			floor = pct(f.redisUsec, p.redisUsec)
		}
		verdict := "met"
		switch {
		case t.redisUsec > 0.8*p.redisUsec && t.lat.p99 > p.lat.p99:
			verdict = "**missed** (CPU and p99)"
		case t.redisUsec > 0.8*p.redisUsec:
			verdict = "**missed** (CPU)"
		case t.lat.p99 > p.lat.p99:
			verdict = "**missed** (p99)"
		}
		cells++
		if verdict == "met" {
			met++
		}
		w("| %d | %d | %s | %s | %s | %sx | %s / %s ms | %s |\n", t.procs, t.inFlight, pct(t.redisUsec, p.redisUsec), pct(t.scriptUsec, p.scriptUsec),
			floor, fmtFloat(t.perSec/p.perSec, 2), ms(t.lat.p99), ms(p.lat.p99), verdict)
	}
	w("\nThe target is met in %d of %d cells.\n\n", met, cells)
}

// fleetPeer returns the row of the implementation whose name starts with
// prefix in t's cell.
func (r *report) fleetPeer(t fleetRow, prefix string) (fleetRow, bool) {
	for _, x := range r.fleet {
		if strings.HasPrefix(x.impl, prefix) && x.procs == t.procs && x.inFlight == t.inFlight {
			return x, true
		}
	}
	return fleetRow{}, false
}
