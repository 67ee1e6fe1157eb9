package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// rlsRow is one cell of the rate-limit service table.
type rlsRow struct {
	target  string
	callers int
	keys    int
	perSec  float64
	lat     summary
	errors  int64
}

// rlsCallers is how many callers ask at once, over rlsConns connections
// (Envoy keeps a few connections to its rate-limit service).
const (
	rlsCallers = 64
	rlsConns   = 4
)

// rlsConfig is one domain with one descriptor whose limit no caller
// reaches: every decision takes the store's write path.
const rlsConfig = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 4000000000
`

// noopRLS answers every request OK with one status, without deciding:
// the gRPC floor.
type noopRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	limit *rlspb.RateLimitResponse_RateLimit
}

func (n *noopRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: n.limit, LimitRemaining: 1, DurationUntilReset: &durationpb.Duration{Seconds: 1}}
	}
	return resp, nil
}

// rlsTarget starts one server and returns its address and how to stop it.
type rlsTarget struct {
	name  string
	start func() (string, func(), error)
}

func serveGRPC(register func(*grpc.Server)) (string, func(), error) {
	g := grpc.NewServer()
	register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go g.Serve(ln)
	return ln.Addr().String(), g.Stop, nil
}

func rlsTargets(addr string) []rlsTarget {
	return []rlsTarget{
		{name: "no-op ShouldRateLimit (the gRPC floor)", start: func() (string, func(), error) {
			n := &noopRLS{limit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 4000000000, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}}
			return serveGRPC(func(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, n) })
		}},
		{name: "tollgate rls on Redis", start: func() (string, func(), error) {
			// As `tollgate rls` runs: Redis behind the breaker with the
			// local fallback, the engine's deny cache, the metrics.
			dir, err := os.MkdirTemp("", "rls-bench")
			if err != nil {
				return "", nil, err
			}
			if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(rlsConfig), 0o644); err != nil {
				return "", nil, err
			}
			cfg, err := envoyrls.Load(dir, envoyrls.LoadOptions{})
			if err != nil {
				return "", nil, err
			}
			opt := rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true}
			rs, err := rstore.Open(opt, rstore.Options{})
			if err != nil {
				return "", nil, err
			}
			res := resilience.New(rs, memory.New(memory.Options{}), resilience.Options{})
			em, _ := engine.NewMetrics(nil)
			eng, err := engine.New(engine.Options{Store: res, Metrics: em, DenyCacheSize: engine.DefaultDenyCacheSize})
			if err != nil {
				return "", nil, err
			}
			m, _ := envoyrls.NewMetrics(nil)
			srv, err := envoyrls.New(cfg, envoyrls.Options{Engine: eng, Metrics: m})
			if err != nil {
				return "", nil, err
			}
			a, stop, err := serveGRPC(srv.Register)
			return a, func() { stop(); res.Close(); rs.Close(); os.RemoveAll(dir) }, err
		}},
	}
}

// runRLSSuite measures ShouldRateLimit at 64 callers against the no-op
// server and Tollgate's, in turn, three times.
func runRLSSuite(srv *redistest.Server, dur time.Duration) []rlsRow {
	admin, err := srv.Client()
	if err != nil {
		fatal(err)
	}
	defer admin.Close()
	keys := makeKeys(10_000)
	targets := rlsTargets(srv.Addr)
	runs := make([][]rlsRow, len(targets))
	for range repeats {
		for i, t := range targets {
			admin.Do(context.Background(), admin.B().Flushall().Build())
			runs[i] = append(runs[i], runRLSCell(t, keys, dur))
		}
	}
	rows := make([]rlsRow, len(targets))
	for i, rs := range runs {
		row := rs[0]
		row.perSec = median(rs, func(r rlsRow) float64 { return r.perSec })
		row.lat = medianLatency(rs, func(r rlsRow) summary { return r.lat })
		for _, r := range rs[1:] {
			row.errors += r.errors
		}
		rows[i] = row
	}
	return rows
}

func runRLSCell(t rlsTarget, keys []string, dur time.Duration) rlsRow {
	addr, stop, err := t.start()
	if err != nil {
		fatal(err)
	}
	defer stop()
	conns := make([]*grpc.ClientConn, rlsConns)
	clients := make([]rlspb.RateLimitServiceClient, rlsConns)
	for i := range conns {
		if conns[i], err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			fatal(err)
		}
		defer conns[i].Close()
		clients[i] = rlspb.NewRateLimitServiceClient(conns[i])
	}
	reqs := make([]*rlspb.RateLimitRequest, len(keys))
	for i, k := range keys {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: k}}}}}
	}
	var next atomic.Int64
	index := map[string]int{}
	for i, k := range keys {
		index[k] = i
	}
	d := func(ctx context.Context, key string) error {
		c := clients[next.Add(1)%rlsConns]
		resp, err := c.ShouldRateLimit(ctx, reqs[index[key]])
		if err == nil && resp.OverallCode != rlspb.RateLimitResponse_OK {
			return fmt.Errorf("refused")
		}
		return err
	}
	runCallers(rlsCallers, keys, d, dur/5) // warm up
	n, errs, lat, elapsed := runCallers(rlsCallers, keys, d, dur)
	row := rlsRow{target: t.name, callers: rlsCallers, keys: len(keys), perSec: float64(n) / elapsed.Seconds(), lat: lat, errors: errs}
	fmt.Fprintf(os.Stderr, "rls: %-40s %8.0f/s p50 %s p99 %s ms, %d errors\n", row.target, row.perSec, ms(lat.p50), ms(lat.p99), errs)
	return row
}

// rlsMarkdown writes the rate-limit service section.
func (r *report) rlsMarkdown(w func(string, ...any)) {
	w("## 4. Envoy's rate-limit service\n\n")
	w("`ShouldRateLimit` over gRPC (loopback TCP, %d connections), %d callers in a closed loop for %v, one descriptor per request\n", rlsConns, rlsCallers, r.duration)
	w("over 10,000 values under a limit no caller reaches (so every decision charges Redis), against a server on the same machine\n")
	w("whose `ShouldRateLimit` answers OK at once (the gRPC floor). Tollgate's is wired as `tollgate rls` runs it: Redis\n")
	w("behind the breaker with the local fallback, the deny cache, the metrics. %d runs, the two in turn; medians.\n\n", repeats)
	w("| server | callers | decisions/s | p50 ms | p99 ms | p99.9 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.rls {
		w("| %s | %d | %s | %s | %s | %s | %d |\n", x.target, x.callers, fmtFloat(x.perSec, 0), ms(x.lat.p50), ms(x.lat.p99), ms(x.lat.p999), x.errors)
	}
	w("\n")
	if len(r.rls) == 2 && r.rls[0].perSec > 0 {
		w("- Tollgate / floor = **%s%%** of the floor's throughput (target: at least 80%%)\n\n", fmtFloat(100*r.rls[1].perSec/r.rls[0].perSec, 0))
	}
}
