package main

import (
	"fmt"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type report struct {
	started   time.Time
	elapsed   time.Duration
	mode      mode
	redisAddr string
	cpu       string
	redis     string
	store     []storeRow
	fleet     []fleetRow
	memory    []memoryRow
	gateway   *gatewayResult
	rls       *rlsResult
	llm       []llmRow
	overload  []overloadRow
}

func (r *report) machine() {
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				r.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		r.redis = strings.TrimSpace(string(out))
	}
}

func fmtFloat(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }

func (r *report) markdown(png string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks\n\n")
	w("Every figure below was measured in one run of `tollgate-bench` on one machine,\n")
	w("peers and baselines side by side, so read the ratios rather than the absolutes.\n\n")
	w("- when: %s\n- machine: %d cores (%s), GOMAXPROCS %d\n- %s\n- %s\n", r.started.UTC().Format(time.RFC3339),
		runtime.NumCPU(), r.cpu, runtime.GOMAXPROCS(0), runtime.Version(), r.redis)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/rueidis", "github.com/go-redis/redis_rate/v10", "github.com/tsenart/vegeta/v12":
				w("- %s %s\n", d.Path, d.Version)
			case "github.com/redis/go-redis/v9":
				w("- %s %s (and v9.0.2, the version redis_rate's go.mod names, in a worker of its own: bench/peers/goredis902)\n", d.Path, d.Version)
			}
		}
	}
	w("- each cell runs %v after a warm-up; the load generator, the gateway, the upstream and Redis share the machine\n", r.mode.duration)
	w("- mode: **%s** (%d run(s) of each cell), the whole run took %s\n", r.mode.name, r.mode.repeats, r.elapsed.Round(time.Second))
	w("- reproduce: `make bench` (the default mode, under ten minutes on two cores; or `cd bench && go run ./cmd/tollgate-bench -out ../BENCHMARKS.md -png ../docs/latency.png`);\n")
	w("  add `-quick` for a CI-sized run of a few minutes (%v cells, one run each), `-suites store,fleet` for some suites only\n\n", quickMode.duration)

	if len(r.store) > 0 {
		r.storeMarkdown(w)
	}
	if len(r.memory) > 0 {
		w("## 2. In-memory store\n\n")
		w("GOMAXPROCS goroutines deciding for %v on keys created beforehand; %d runs, the two in turn, medians reported.\n\n", r.mode.duration, repeats)
		w("| implementation | keys | decisions/s | allocs/decision |\n|---|---:|---:|---:|\n")
		for _, x := range r.memory {
			w("| %s | %d | %s | %s |\n", x.impl, x.keys, fmtFloat(x.perSec, 0), fmtFloat(x.allocsPer, 1))
		}
		w("\n")
		for _, k := range []int{1, 100_000} {
			tg, xr := r.memoryAt("tollgate", k), r.memoryAt("x/time/rate", k)
			if tg != nil && xr != nil {
				w("- %d key(s): Tollgate / x/time/rate = **%sx** (target on 100,000 keys: at least 2x, 0 allocs)\n", k, fmtFloat(tg.perSec/xr.perSec, 2))
			}
		}
		w("\n")
	}
	if r.gateway != nil {
		r.gatewayMarkdown(w, png)
	}
	if r.rls != nil {
		r.rlsMarkdown(w)
	}
	if len(r.fleet) > 0 {
		r.fleetMarkdown(w)
	}
	if len(r.llm) > 0 {
		r.llmMarkdown(w)
	}
	if len(r.overload) > 0 {
		r.overloadMarkdown(w)
	}
	return b.String()
}

func relTo(p string) string {
	if strings.HasPrefix(p, "../") {
		return strings.TrimPrefix(p, "../")
	}
	return p
}

func (r *report) memoryAt(prefix string, keys int) *memoryRow {
	for i, x := range r.memory {
		if strings.Contains(x.impl, prefix) && x.keys == keys {
			return &r.memory[i]
		}
	}
	return nil
}

// chart draws p99 latency against offered rate for each gateway target.
func (r *report) chart(path string) error {
	p := plot.New()
	p.Title.Text = "Gateway p99 latency against offered rate"
	p.X.Label.Text = "offered requests/s"
	p.Y.Label.Text = "p99 latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	series := map[string]plotter.XYs{}
	var names []string
	for _, x := range r.gateway.rows {
		if _, ok := series[x.target]; !ok {
			names = append(names, x.target)
		}
		series[x.target] = append(series[x.target], plotter.XY{X: float64(x.offered), Y: max(0.01, float64(x.lat.p99.Microseconds())/1000)})
	}
	for i, n := range names {
		l, pts, err := plotter.NewLinePoints(series[n])
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(n, l, pts)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.BackgroundColor = color.White
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
