package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
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
	// ownUsec is this process's CPU time per decision (the callers' and
	// the server's), redisUsec redis-server's (user and system) and
	// scriptUsec the time it spent in scripts, in microseconds; calls is
	// its script calls per decision.
	redisUsec  float64
	ownUsec    float64
	scriptUsec float64
	calls      float64
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
	redis rueidis.Client // when set, PINGed before answering
}

func (n *noopRLS) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if n.redis != nil {
		if err := n.redis.Do(ctx, n.redis.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
	}
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

func serveGRPC(register func(*grpc.Server), opts ...grpc.ServerOption) (string, func(), error) {
	g := grpc.NewServer(opts...)
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
		{name: "no-op ShouldRateLimit after a Redis PING", start: func() (string, func(), error) {
			// The floor of any service that consults Redis once per
			// request: the same answer, after one round trip.
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
			if err != nil {
				return "", nil, err
			}
			n := &noopRLS{limit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 4000000000, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}, redis: c}
			a, stop, err := serveGRPC(func(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, n) })
			return a, func() { stop(); c.Close() }, err
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
			runs[i] = append(runs[i], runRLSCell(admin, t, keys, dur))
		}
	}
	rows := make([]rlsRow, len(targets))
	for i, rs := range runs {
		row := rs[0]
		row.perSec = median(rs, func(r rlsRow) float64 { return r.perSec })
		row.ownUsec = median(rs, func(r rlsRow) float64 { return r.ownUsec })
		row.redisUsec = median(rs, func(r rlsRow) float64 { return r.redisUsec })
		row.scriptUsec = median(rs, func(r rlsRow) float64 { return r.scriptUsec })
		row.calls = median(rs, func(r rlsRow) float64 { return r.calls })
		row.lat = medianLatency(rs, func(r rlsRow) summary { return r.lat })
		for _, r := range rs[1:] {
			row.errors += r.errors
		}
		rows[i] = row
	}
	return rows
}

func runRLSCell(admin rueidis.Client, t rlsTarget, keys []string, dur time.Duration) rlsRow {
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
	runCallers(0, rlsCallers, keys, d, dur/5) // warm up
	ctx := context.Background()
	admin.Do(ctx, admin.B().ConfigResetstat().Build())
	cpu0, own0 := redisCPU(ctx, admin), ownCPU()
	res := runCallers(0, rlsCallers, keys, d, dur)
	n, errs, lat := res.Decisions, res.Errors, summarize(res.Latencies)
	cpu, own := redisCPU(ctx, admin)-cpu0, ownCPU()-own0
	row := rlsRow{target: t.name, callers: rlsCallers, keys: len(keys), perSec: res.perSec(), lat: lat, errors: errs}
	if n > 0 {
		row.redisUsec = cpu * 1e6 / float64(n)
		row.ownUsec = own.Seconds() * 1e6 / float64(n)
		row.calls = float64(scriptCalls(ctx, admin)) / float64(n)
		row.scriptUsec = scriptUsec(ctx, admin) / float64(n)
	}
	fmt.Fprintf(os.Stderr, "rls: %-40s %8.0f/s p50 %s p99 %s ms, %d errors, bench process %.1f µs, Redis %.1f µs (scripts %.1f) and %.3f calls per decision\n", row.target, row.perSec, ms(lat.p50), ms(lat.p99), errs, row.ownUsec, row.redisUsec, row.scriptUsec, row.calls)
	return row
}

// ownCPU returns the CPU time this process has used, user and system.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rlsMarkdown writes the rate-limit service section.
func (r *report) rlsMarkdown(w func(string, ...any)) {
	w("## 4. Envoy's rate-limit service\n\n")
	w("`ShouldRateLimit` over gRPC (loopback TCP, %d connections), %d callers in a closed loop for %v, one descriptor per request\n", rlsConns, rlsCallers, r.mode.duration)
	w("over 10,000 values under a limit no caller reaches (so every decision charges Redis). Three servers on the same machine:\n")
	w("one whose `ShouldRateLimit` answers OK at once (the gRPC floor), one that answers the same after one Redis `PING`\n")
	w("through rueidis (the floor of any service that consults Redis per request), and Tollgate's, wired as `tollgate rls`\n")
	w("runs it: Redis behind the breaker with the local fallback, the deny cache, the metrics. The load generator runs in the\n")
	w("servers' process: *process CPU* is that process's CPU time (client and server) per decision, *Redis CPU* redis-server's,\n")
	w("*calls* its script calls per decision. %d runs, the servers in turn; medians.\n\n", repeats)
	w("| server | callers | decisions/s | p50 ms | p99 ms | p99.9 ms | process CPU µs | Redis CPU µs | calls | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.rls {
		w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.target, x.callers, fmtFloat(x.perSec, 0), ms(x.lat.p50), ms(x.lat.p99), ms(x.lat.p999),
			fmtFloat(x.ownUsec, 1), fmtFloat(x.redisUsec, 1), fmtFloat(x.calls, 3), x.errors)
	}
	w("\n")
	if n := len(r.rls); n >= 2 && r.rls[0].perSec > 0 {
		t := r.rls[n-1]
		w("- Tollgate / gRPC floor = **%s%%** of the floor's throughput (target: at least 80%%)\n", fmtFloat(100*t.perSec/r.rls[0].perSec, 0))
		if n == 3 && r.rls[1].perSec > 0 {
			w("- Tollgate / PING floor = **%s%%**\n", fmtFloat(100*t.perSec/r.rls[1].perSec, 0))
		}
		w("\n")
	}
}
