package main

import (
	"fmt"
	"os"
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
