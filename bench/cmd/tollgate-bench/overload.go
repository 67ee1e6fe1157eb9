package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/capacity"
	"github.com/tollgate/tollgate/policy"
)

// overloadRow is one run of the overload suite: the gateway, with or
// without the adaptive limit, before an upstream of fixed capacity
// offered 3 times it.
type overloadRow struct {
	target   string
	capacity float64 // C, requests/s
	offered  float64
	sum      capacity.Summary
}

// overloadPolicy is the gateway test's (gateway/overload_test.go): pro
// is guaranteed half the limit, free a fifth, their rates above any
// load; ADAPTIVE is the route's adaptive block, or nothing.
const overloadPolicy = `version: bench-overload
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: free}
plans:
  free: {rate: 10000000, period: 1m}
  pro: {rate: 10000000, period: 1m}
api_keys:
  - {id: free-demo, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", plan: free}
  - {id: pro-demo, digest: "sha256:ff83448544d92a31f29f045bb4b32f207b8e8358882135d71cd07e235d682936", plan: pro}
routes:
  - {name: work, path: /work, upstream: "UPSTREAM"ADAPTIVE}
`

const overloadAdaptive = `, adaptive: {sample_window: 500ms, min_rtt_samples: 20, rtt_buffer: 0.1, shares: {pro: 0.5, free: 0.2}}`

// overloadTimeout is the clients' deadline: an answer later than this is
// an error, as it is to a client that gave up.
const overloadTimeout = 2 * time.Second

// runOverloadSuite offers an upstream of 16 workers of 160 ms (C = 100
// requests/s, the rest queued) 3 C through the gateway, half pro and
// half free, open loop, for 3 s and then dur × 6, first with the adaptive
// limit and then without, each on a fresh upstream.
func runOverloadSuite(dur time.Duration) []overloadRow {
	var rows []overloadRow
	for _, adaptive := range []string{overloadAdaptive, ""} {
		up := capacity.New(16, 160*time.Millisecond)
		C := up.Capacity()
		src := strings.NewReplacer("UPSTREAM", serve(up), "ADAPTIVE", adaptive).Replace(overloadPolicy)
		p, err := policy.Parse([]byte(src), "bench.yaml")
		if err != nil {
			fatal(err)
		}
		g, err := gateway.New(gateway.Options{Policy: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		pub, adm := listen(), listen()
		go func() { done <- g.Serve(ctx, pub, adm) }()
		c := &http.Client{Timeout: overloadTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
		url := "http://" + pub.Addr().String() + "/work"
		// The limit measures the upstream's minimum latency unloaded.
		capacity.Offer(ctx, c, url, 0.3*C, 3*time.Second, overloadMix)
		run := 6 * dur
		shots := capacity.Offer(ctx, c, url, 3*C, run, overloadMix)
		target := "without the adaptive limit"
		if adaptive != "" {
			target = "with the adaptive limit"
		}
		rows = append(rows, overloadRow{target: target, capacity: C, offered: 3 * C, sum: capacity.Summarize(shots, run/4, run)})
		up.Stop()
		c.CloseIdleConnections()
		cancel()
		<-done
		g.Close()
	}
	return rows
}

// overloadMix is half the requests from pro, half from free.
func overloadMix(i int) (string, http.Header) {
	if i%2 == 0 {
		return "pro", http.Header{"X-Api-Key": {"pro-demo-key"}}
	}
	return "free", http.Header{"X-Api-Key": {"free-demo-key"}}
}

func (r *report) overloadMarkdown(w func(string, ...any)) {
	w("## 7. An upstream past its capacity: the adaptive limit\n\n")
	if len(r.overload) > 0 {
		x := r.overload[0]
		w("An upstream in this process serves 16 requests at once, 160 ms each (C = %.0f requests/s), and queues the rest; it is offered %.0f/s (3 C) through the gateway, half from a pro key and half from a free key, open loop, with a %v client deadline (a later answer is an error). The adaptive limit (`%s`) is against none; the figures are of the last three quarters of the run, after the limit settled.\n\n",
			x.capacity, x.offered, overloadTimeout, strings.TrimPrefix(overloadAdaptive, ", "))
	}
	w("| target | goodput (2xx/s) | of C | p50 ms (2xx) | p99 ms (2xx) | pro's share of 2xx | shed (503) | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.overload {
		s := x.sum
		w("| %s | %.0f | %.0f%% | %s | %s | %.2f | %d | %d |\n", x.target, s.Goodput(), 100*s.Goodput()/x.capacity,
			ms(s.P50), ms(s.P99), s.Share("pro"), s.Shed, s.Errors)
	}
	w("\nThe targets: goodput at least 90%% of C, the p99 of the requests admitted at most twice the unloaded p99 (160 ms and a little), pro's share at least its 0.5 (see docs/guides/adaptive-concurrency.md).\n\n")
}
