package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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

// The rate-limit service suite. Every server it loads runs in a process of
// its own, apart from the load generator (as the gateway suite's targets
// do, and speaking their protocol: see targetProc): the two no-op servers
// and Tollgate's are this program run again (rlsTargetEnv), and
// envoyproxy/ratelimit is its own service_cmd built from its module
// (peers/ratelimit). Tollgate's and envoyproxy/ratelimit's processes get
// the same environment (rlsEnv), which both read.

// rlsRow is one cell of the rate-limit service table.
type rlsRow struct {
	target  string
	callers int
	keys    int
	perSec  float64
	lat     summary
	errors  int64
	// procUsec is the target process's CPU time per decision, redisUsec
	// redis-server's (user and system, less its idle rate), in
	// microseconds; calls is the commands Redis ran per decision.
	procUsec  float64
	redisUsec float64
	calls     float64
	// loadUsec is the load generator's (this process's) CPU time per
	// decision: the same work for every target.
	loadUsec float64
	// fallback is the share of Tollgate's decisions its local fallback
	// made (Redis' calls timed out, or its breaker was open).
	fallback float64
}

// rlsResult is the suite's outcome.
type rlsResult struct {
	kinds     []string   // the targets' kinds, in the table's order
	rows      []rlsRow   // the medians, one per target
	runs      [][]rlsRow // each target's runs, round by round
	redisIdle float64    // Redis' CPU at rest, µs per second, taken off its figures
	peer      string     // envoyproxy/ratelimit's version, or why it is missing
	peerOK    bool
}

// rlsCallers is how many callers ask at once, over rlsConns connections
// (Envoy keeps a few connections to its rate-limit service).
const (
	rlsCallers = 64
	rlsConns   = 4
)

// rlsStoreTimeout bounds Tollgate's store calls in the suite
// (TOLLGATE_STORE_TIMEOUT).
const rlsStoreTimeout = time.Second

// rlsConfig is one domain with one descriptor whose limit no caller
// reaches: every decision takes the store's write path.
const rlsConfig = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 4000000000
`

// The targets, in the table's order; the ratios are of rlsTollgate to
// the others.
const (
	rlsNoop      = "noop"      // answers OK at once: the gRPC floor
	rlsPing      = "ping"      // the same after one Redis PING
	rlsTollgate  = "tollgate"  // wired as `tollgate rls` is, from rlsEnv
	rlsRatelimit = "ratelimit" // envoyproxy/ratelimit (peers/ratelimit)
)

var rlsNames = map[string]string{
	rlsNoop:      "no-op ShouldRateLimit (the gRPC floor)",
	rlsPing:      "no-op ShouldRateLimit after a Redis PING",
	rlsTollgate:  "tollgate rls on Redis",
	rlsRatelimit: "envoyproxy/ratelimit on Redis",
}

// rlsTargetEnv, when set (to an rlsSpec as JSON), makes this program serve
// one RLS target instead of measuring, as targetEnv does for the gateway
// suite: it prints the target's gRPC address, then answers each line on
// its standard input with the CPU time it has used so far (Tollgate's
// answers "fallbacks" with the decisions its fallback has made), and
// exits when its standard input closes.
const rlsTargetEnv = "TOLLGATE_BENCH_RLS_TARGET"

// rlsSpec is one RLS target process's task.
type rlsSpec struct {
	Kind       string `json:"kind"`
	Redis      string `json:"redis,omitempty"`      // the Redis address (rlsPing)
	CPUProfile string `json:"cpuprofile,omitempty"` // write a CPU profile of the process's whole life here
}

// runRLSTarget is the program when rlsTargetEnv is set.
func runRLSTarget(js string) {
	var spec rlsSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fatal(fmt.Errorf("reading the RLS target's spec: %w", err))
	}
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	addr, fallbacks := serveRLSTarget(spec)
	fmt.Println(addr)
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		if sc.Text() == "fallbacks" && fallbacks != nil {
			fmt.Println(fallbacks())
			continue
		}
		fmt.Println(int64(cpuTime()))
	}
}

// serveRLSTarget starts the target spec asks for and returns its address
// and, for Tollgate's, how many decisions its fallback has made.
func serveRLSTarget(spec rlsSpec) (string, func() uint64) {
	limit := &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 4000000000, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}
	switch spec.Kind {
	case rlsNoop:
		return serveGRPC("127.0.0.1:0", func(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, &noopRLS{limit: limit}) }), nil
	case rlsPing:
		// The floor of any service that consults Redis once per request:
		// the same answer, after one round trip.
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{spec.Redis}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			fatal(err)
		}
		return serveGRPC("127.0.0.1:0", func(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, &noopRLS{limit: limit, redis: c}) }), nil
	case rlsTollgate:
		set, err := envoyrls.SettingsFromEnv(os.Getenv)
		if err != nil {
			fatal(err)
		}
		srv, res, err := tollgateRLS(set)
		if err != nil {
			fatal(fmt.Errorf("starting tollgate rls: %w", err))
		}
		return serveGRPC(set.GRPCAddr, srv.Register), func() uint64 { return res.Stats().Fallbacks }
	}
	fatal(fmt.Errorf("unknown RLS target %q", spec.Kind))
	return "", nil
}

// tollgateRLS returns the rate-limit service as `tollgate rls` builds it
// from set (cmd/tollgate's newRLSServer): the files' configuration, Redis
// as one client behind the breaker with the local fallback, the engine's
// deny cache, the metrics. It returns the breaker's store too.
func tollgateRLS(set envoyrls.Settings) (*envoyrls.Server, *resilience.Store, error) {
	cfg, err := envoyrls.Load(set.ConfigDir, set.Load)
	if err != nil {
		return nil, nil, err
	}
	opt, err := rueidis.ParseURL(set.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	opt.DisableCache, opt.ForceSingleClient = true, set.RedisMode == "standalone"
	rs, err := rstore.Open(opt, rstore.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("opening redis store: %w", err)
	}
	res := resilience.New(rs, memory.New(memory.Options{}), resilience.Options{Timeout: set.RedisTimeout})
	em, _ := engine.NewMetrics(nil)
	eng, err := engine.New(engine.Options{Store: res, Metrics: em, DenyCacheSize: engine.DefaultDenyCacheSize})
	if err != nil {
		return nil, nil, err
	}
	m, _ := envoyrls.NewMetrics(nil)
	opts := set.Server
	opts.Engine, opts.Metrics = eng, m
	srv, err := envoyrls.New(cfg, opts)
	return srv, res, err
}

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

// serveGRPC serves a gRPC server with what register adds on addr, and
// returns the address it listens on. Every server of the suite but
// envoyproxy/ratelimit's is built with the options `tollgate rls` serves
// with: the floors measure the same gRPC server doing less.
func serveGRPC(addr string, register func(*grpc.Server)) string {
	g := grpc.NewServer(envoyrls.ServerOptions()...)
	register(g)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fatal(err)
	}
	go g.Serve(ln)
	return ln.Addr().String()
}

// rlsEnv returns the environment of Tollgate's and envoyproxy/ratelimit's
// processes: envoyproxy/ratelimit's variables, the same for both. Redis
// over TCP at addr, the configuration in root/ratelimit/config, every
// listener on a free loopback port, Prometheus metrics (Tollgate's only
// kind; envoyproxy/ratelimit's default, statsd, would need a statsd).
func rlsEnv(addr, root string) []string {
	return []string{
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + addr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + freePort(),
		"HOST=127.0.0.1", "PORT=" + freePort(),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + freePort(),
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + freePort(),
	}
}

// freePort returns a loopback TCP port free a moment ago.
func freePort() string {
	l := listen()
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startRLSProc starts cmd, one of the targets, and reads its address.
func startRLSProc(kind string, cmd *exec.Cmd) *targetProc {
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(fmt.Errorf("starting the target %s: %w", kind, err))
	}
	p := &targetProc{kind: kind, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if !p.out.Scan() {
		fatal(fmt.Errorf("starting the target %s: no address: %v", kind, p.out.Err()))
	}
	p.target = target{rlsNames[kind], p.out.Text()}
	return p
}

// startRLSTarget runs this program again as the target kind.
func startRLSTarget(kind string, spec rlsSpec, env []string) *targetProc {
	exe, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	spec.Kind = kind
	js, _ := json.Marshal(spec)
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), env...), rlsTargetEnv+"="+string(js))
	return startRLSProc(kind, cmd)
}

// fallbacks returns the decisions Tollgate's fallback has made (0 for
// the other targets).
func fallbacks(p *targetProc) uint64 {
	if p.kind != rlsTollgate {
		return 0
	}
	fmt.Fprintln(p.stdin, "fallbacks")
	if !p.out.Scan() {
		fatal(fmt.Errorf("reading the fallbacks of %s: %v", p.name, p.out.Err()))
	}
	n, err := strconv.ParseUint(p.out.Text(), 10, 64)
	if err != nil {
		fatal(fmt.Errorf("reading the fallbacks of %s: %w", p.name, err))
	}
	return n
}

// buildRatelimit builds envoyproxy/ratelimit's service (peers/ratelimit,
// from src) into dir, and returns the program and the module's version.
func buildRatelimit(src, dir string) (exe, version string, err error) {
	exe = filepath.Join(dir, "ratelimit")
	build := exec.Command("go", "build", "-o", exe, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return "", "", fmt.Errorf("building %s: %w", src, err)
	}
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/envoyproxy/ratelimit")
	list.Dir = src
	out, err := list.Output()
	if err != nil {
		return "", "", fmt.Errorf("reading the version of envoyproxy/ratelimit in %s: %w", src, err)
	}
	return exe, strings.TrimSpace(string(out)), nil
}

// runRLSSuite measures ShouldRateLimit at rlsCallers callers against each
// target, in turn, round after round (at least seven in the default mode),
// with envoyproxy/ratelimit built from peerSrc (none if empty). With
// profileDir, Tollgate's process and the PING server's write their CPU
// profiles there (tollgate-rls.pprof, ping.pprof).
func runRLSSuite(srv *redistest.Server, dur time.Duration, peerSrc, profileDir string) *rlsResult {
	admin, err := srv.Client()
	if err != nil {
		fatal(err)
	}
	defer admin.Close()
	dir, err := os.MkdirTemp("", "tollgate-bench-rls")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(rlsConfig), 0o644); err != nil {
		fatal(err)
	}

	res := &rlsResult{peer: "not measured (-rls-peer '')"}
	var procs []*targetProc
	start := func(p *targetProc) { procs = append(procs, p) }
	start(startRLSTarget(rlsNoop, rlsSpec{}, nil))
	prof := func(name string) string {
		if profileDir == "" {
			return ""
		}
		return filepath.Join(profileDir, name+".pprof")
	}
	start(startRLSTarget(rlsPing, rlsSpec{Redis: srv.Addr, CPUProfile: prof("ping")}, nil))
	// Every decision on Redis, as the table says: at the default timeout
	// of a store call (20 ms), this loaded machine's stalls open the
	// breaker, and a quarter to a half of the decisions were the local
	// fallback's.
	start(startRLSTarget(rlsTollgate, rlsSpec{CPUProfile: prof("tollgate-rls")}, append(rlsEnv(srv.Addr, root), "TOLLGATE_STORE_TIMEOUT="+rlsStoreTimeout.String())))
	if peerSrc != "" {
		exe, version, err := buildRatelimit(peerSrc, dir)
		if err != nil {
			res.peer = err.Error()
			fmt.Fprintf(os.Stderr, "rls: envoyproxy/ratelimit left out: %v\n", err)
		} else {
			res.peer, res.peerOK = version, true
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), rlsEnv(srv.Addr, root)...)
			start(startRLSProc(rlsRatelimit, cmd))
		}
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()

	ctx := context.Background()
	time.Sleep(500 * time.Millisecond) // let the clients connect
	r0, t0 := redisCPU(ctx, admin), time.Now()
	time.Sleep(time.Second)
	res.redisIdle = (redisCPU(ctx, admin) - r0) * 1e6 / time.Since(t0).Seconds()

	keys := makeKeys(10_000)
	rounds := repeats
	if rounds > 1 {
		rounds = max(rounds, 7)
	}
	res.runs = make([][]rlsRow, len(procs))
	for _, p := range procs {
		res.kinds = append(res.kinds, p.kind)
	}
	for range rounds {
		for i, p := range procs {
			flushAll(admin)
			res.runs[i] = append(res.runs[i], runRLSCell(admin, p, keys, dur, res.redisIdle))
		}
	}
	for _, rs := range res.runs {
		row := rs[0]
		row.perSec = median(rs, func(r rlsRow) float64 { return r.perSec })
		row.procUsec = median(rs, func(r rlsRow) float64 { return r.procUsec })
		row.loadUsec = median(rs, func(r rlsRow) float64 { return r.loadUsec })
		row.redisUsec = median(rs, func(r rlsRow) float64 { return r.redisUsec })
		row.calls = median(rs, func(r rlsRow) float64 { return r.calls })
		row.fallback = median(rs, func(r rlsRow) float64 { return r.fallback })
		row.lat = medianLatency(rs, func(r rlsRow) summary { return r.lat })
		for _, r := range rs[1:] {
			row.errors += r.errors
		}
		res.rows = append(res.rows, row)
	}
	return res
}

// runRLSCell measures one target: rlsCallers callers over rlsConns
// connections for dur, after a warm-up of a fifth of it.
func runRLSCell(admin rueidis.Client, p *targetProc, keys []string, dur time.Duration, redisIdle float64) rlsRow {
	clients := make([]rlspb.RateLimitServiceClient, rlsConns)
	for i := range clients {
		conn, err := grpc.NewClient(p.url, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fatal(err)
		}
		defer conn.Close()
		clients[i] = rlspb.NewRateLimitServiceClient(conn)
	}
	reqs := make(map[string]*rlspb.RateLimitRequest, len(keys))
	for _, k := range keys {
		reqs[k] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: k}}}}}
	}
	var next atomic.Int64
	d := func(ctx context.Context, key string) error {
		resp, err := clients[next.Add(1)%rlsConns].ShouldRateLimit(ctx, reqs[key])
		if err == nil && resp.OverallCode != rlspb.RateLimitResponse_OK {
			return fmt.Errorf("refused")
		}
		return err
	}
	runCallers(0, rlsCallers, keys, d, dur/5) // warm up
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
		fatal(err)
	}
	fb0, cpu0, redis0, load0, start := fallbacks(p), p.cpu(), redisCPU(ctx, admin), cpuTime(), time.Now()
	res := runCallers(0, rlsCallers, keys, d, dur)
	load := cpuTime() - load0
	cpu, redis, elapsed := p.cpu()-cpu0, redisCPU(ctx, admin)-redis0, time.Since(start)
	fb := fallbacks(p) - fb0
	n, lat := res.Decisions, summarize(res.Latencies)
	row := rlsRow{target: p.name, callers: rlsCallers, keys: len(keys), perSec: res.perSec(), lat: lat, errors: res.Errors}
	if n > 0 {
		row.procUsec = cpu.Seconds() * 1e6 / float64(n)
		row.loadUsec = load.Seconds() * 1e6 / float64(n)
		row.redisUsec = (redis*1e6 - redisIdle*elapsed.Seconds()) / float64(n)
		row.calls = redisCalls(ctx, admin) / float64(n)
		row.fallback = float64(fb) / float64(n)
	}
	fmt.Fprintf(os.Stderr, "rls: %-42s %8.0f/s p50 %s p99 %s ms, %d errors, CPU per decision: process %.1f µs, Redis %.1f µs, load generator %.1f µs, %.3f Redis calls, %.1f%% on the fallback\n",
		row.target, row.perSec, ms(lat.p50), ms(lat.p99), row.errors, row.procUsec, row.redisUsec, row.loadUsec, row.calls, 100*row.fallback)
	return row
}

// redisAdminCommands are the commands the suite itself sends Redis,
// which redisCalls leaves out.
var redisAdminCommands = []string{"info", "config|resetstat", "flushall", "hello", "client|setinfo"}

// redisCalls counts the calls Redis received since the last CONFIG
// RESETSTAT (INFO commandstats) but the suite's own: its script calls
// (EVALSHA, EVAL, FCALL) if it ran any, as commandstats counts the
// commands a script runs too, else every command.
func redisCalls(ctx context.Context, c rueidis.Client) float64 {
	if n := scriptCalls(ctx, c); n > 0 {
		return float64(n)
	}
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || slices.Contains(redisAdminCommands, name) {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return float64(total)
}
