package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// newRLSServer returns the rate-limit service for cfg under set: its
// store, engine and metrics (registered with reg), and how to close the
// store.
func newRLSServer(set envoyrls.Settings, cfg *envoyrls.Config, reg *prometheus.Registry, log *slog.Logger) (*envoyrls.Server, *envoyrls.Metrics, func(), error) {
	store, denyCache, closeStore, err := openRLSStore(set, reg, log)
	if err != nil {
		return nil, nil, nil, err
	}
	srv, m, err := rlsService(set, cfg, store, denyCache, reg, log)
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	return srv, m, closeStore, nil
}

// rlsService returns the rate-limit service for cfg deciding through
// store, and its metrics.
func rlsService(set envoyrls.Settings, cfg *envoyrls.Config, store tollgate.Store, denyCache int, reg *prometheus.Registry, log *slog.Logger) (*envoyrls.Server, *envoyrls.Metrics, error) {
	em, err := engine.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	eng, err := engine.New(engine.Options{Store: store, Logger: log, Metrics: em, DenyCacheSize: denyCache})
	if err != nil {
		return nil, nil, err
	}
	m, err := envoyrls.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	opts := set.Server
	opts.Engine, opts.Metrics, opts.Logger = eng, m, log
	srv, err := envoyrls.New(cfg, opts)
	return srv, m, err
}

// rlsHTTPServers returns the HTTP servers of the rate-limit service: the
// health check and metrics, and metrics on their own address if set.
func rlsHTTPServers(set envoyrls.Settings, srv *envoyrls.Server, reg *prometheus.Registry) []*http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", rlsHealthcheck(srv))
	mux.Handle(set.MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	servers := []*http.Server{{Addr: set.HTTPAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	if set.MetricsAddr != "" && set.MetricsAddr != set.HTTPAddr {
		pm := http.NewServeMux()
		pm.Handle(set.MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		servers = append(servers, &http.Server{Addr: set.MetricsAddr, Handler: pm, ReadHeaderTimeout: 10 * time.Second})
	}
	return servers
}

// rlsHealthcheck answers OK once srv has a configuration, 503 before.
func rlsHealthcheck(srv *envoyrls.Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if srv.Config() == nil {
			http.Error(w, "no configuration", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "OK")
	}
}

// rls runs Envoy's rate-limit service, configured as envoyproxy/ratelimit
// is: by its environment variables (see envoyrls.SettingsFromEnv).
func rls(args []string, stdout, stderr io.Writer) int {
	fs := rlsFlags()
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "rls: takes no arguments; it reads envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, GRPC_PORT, REDIS_URL, ...)")
		return 2
	}
	if err := serveRLS(slog.New(slog.NewJSONHandler(stderr, logOptions(slog.LevelInfo)))); err != nil {
		return exitCode(stderr, fmt.Errorf("rls: %w", err))
	}
	return 0
}

// rlsFlags returns rls's flags: none, its help listing the environment
// instead.
func rlsFlags() *flag.FlagSet {
	fs := flags("rls", "rls")
	fs.Usage = func() { fmt.Fprint(fs.Output(), "usage: tollgate rls\n", rlsEnvUsage()) }
	return fs
}

// An rlsVar is an environment variable rls reads.
type rlsVar struct {
	name, def, meaning string // def: the value when unset, "" for none
}

// rlsVars are the environment variables rls reads, as
// envoyrls.SettingsFromEnv does, but rlsIgnored; envoyproxy/ratelimit's
// names, and TOLLGATE_* for what it lacks. Its help and the CLI
// reference list them.
var rlsVars = []rlsVar{
	{"RUNTIME_ROOT", "/srv/runtime_data/current", "the configuration's root"},
	{"RUNTIME_SUBDIRECTORY", "", "the directory under it"},
	{"RUNTIME_APPDIRECTORY", "config", "the directory under that whose files are read"},
	{"RUNTIME_IGNOREDOTFILES", "false", "skip files and directories named .*"},
	{"MERGE_DOMAIN_CONFIG", "false", "merge the files configuring one domain"},
	{"TOLLGATE_RLS_ON_STORE_FAILURE", "fail_open", "fail_open or fail_closed while the store cannot decide, for domains that do not set on_store_failure"},
	{"CONFIG_TYPE", "FILE", "FILE (the files above) or GRPC_XDS_SOTW (RateLimitConfig resources from an xDS control plane, as Envoy Gateway sends them)"},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", "the xDS control plane's address"},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", "the node this service is to the control plane"},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", "the node's metadata, as key=value[,key=value...]"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", "headers sent to the control plane, as name:value[,name:value...]"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", "the wait before connecting again to a lost control plane, doubled after each attempt it does not answer"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "the longest wait before connecting again"},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", "wait a random time between half the wait and all of it"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", "the largest response taken from the control plane (gRPC's 4 MiB)"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "serve before the control plane sends a configuration (every domain unknown until then)"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", "connect to the control plane over TLS"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", "the client certificate's file, with TLS"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", "its key's file"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", "a CA's file trusted beside the system's, with TLS"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", "the name the control plane's certificate must hold (else the address's host)"},
	{"GRPC_HOST", "0.0.0.0", "the gRPC listener's host"},
	{"GRPC_PORT", "8081", "the gRPC listener's port"},
	{"GRPC_SERVER_USE_TLS", "false", "serve gRPC over TLS"},
	{"GRPC_SERVER_TLS_CERT", "", "the listener's certificate chain file, with TLS (read again when it changes)"},
	{"GRPC_SERVER_TLS_KEY", "", "its key's file"},
	{"GRPC_CLIENT_TLS_CACERT", "", "require a client certificate this CA's file signed (mutual TLS)"},
	{"GRPC_CLIENT_TLS_SAN", "", "require the client certificate to name this, with GRPC_CLIENT_TLS_CACERT"},
	{"HOST", "0.0.0.0", "the host of /healthcheck and /metrics"},
	{"PORT", "8080", "the port of /healthcheck and /metrics"},
	{"USE_PROMETHEUS", "false", "serve metrics on PROMETHEUS_ADDR too"},
	{"PROMETHEUS_ADDR", ":9090", "the metrics' own address, with USE_PROMETHEUS"},
	{"PROMETHEUS_PATH", "/metrics", "the metrics' path"},
	{"NEAR_LIMIT_RATIO", "0.8", "the share of a limit, in (0, 1], past which hits count as near_limit"},
	{"SHADOW_MODE", "false", "answer OK whatever the limits say"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", "add the most restrictive descriptor's headers"},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", "the name of the limit's header"},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", "the name of the remaining count's header"},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", "the name of the reset time's header"},
	{"TOLLGATE_RLS_RATELIMIT_HEADERS", "false", "add RateLimit-Policy and RateLimit as the gateway writes them"},
	{"BACKEND_TYPE", "redis", "redis, or memory (one process)"},
	{"REDIS_SOCKET_TYPE", "unix", "unix or tcp"},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "the socket's path (unix), or host:port[,host:port...] (tcp; SENTINEL: <master set>,host:port[,...])"},
	{"REDIS_TYPE", "SINGLE", "SINGLE, CLUSTER or SENTINEL"},
	{"REDIS_AUTH", "", "password or user:password"},
	{"REDIS_TLS", "false", "connect over TLS (tcp)"},
	{"TOLLGATE_REDIS_URL", "", "the store as Tollgate's Redis URL, in place of REDIS_*"},
	{"TOLLGATE_STORE_TIMEOUT", "20ms", "each store call's deadline, as 20ms"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "always true here; false is ignored with a warning"},
}

// rlsIgnored are envoyproxy/ratelimit's variables that rls reads only to
// warn that they take no effect.
var rlsIgnored = []string{"LOCAL_CACHE_SIZE_IN_BYTES", "EXPIRATION_JITTER_MAX_SECONDS", "CACHE_KEY_PREFIX",
	"REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND", "USE_STATSD", "USE_DOG_STATSD",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "RUNTIME_WATCH_ROOT", "RESPONSE_DYNAMIC_METADATA", "QUOTA_MODE", "TRACING_ENABLED"}

// rlsEnvUsage describes the environment variables rls reads, with their
// defaults, for its help.
func rlsEnvUsage() string {
	var b strings.Builder
	b.WriteString("Envoy's rate-limit service, configured as envoyproxy/ratelimit is, by the\nenvironment (defaults in brackets):\n")
	const indent = "                                   "
	for _, v := range rlsVars {
		text := v.meaning
		if v.def != "" {
			text += " [" + v.def + "]"
		}
		lines := wrap(text, 92-len(indent))
		if len(v.name) > len(indent)-4 {
			fmt.Fprintf(&b, "  %s\n", v.name)
		} else {
			fmt.Fprintf(&b, "  %-*s", len(indent)-2, v.name)
			b.WriteString(lines[0] + "\n")
			lines = lines[1:]
		}
		for _, l := range lines {
			b.WriteString(indent + l + "\n")
		}
	}
	for _, l := range wrap("Ignored with a warning: "+strings.Join(rlsIgnored, ", ")+".", 92) {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// wrap breaks text into lines of at most width bytes, between words (a
// longer word has a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// serveRLS runs the rate-limit service the environment configures until
// stopped (see runRLS), logging to log.
func serveRLS(log *slog.Logger) error {
	set, err := rlsSettings(log)
	if err != nil {
		return err
	}
	load := func() (*envoyrls.Config, error) { return envoyrls.Load(set.ConfigDir, set.Load) }
	var cfg *envoyrls.Config // from xDS: none until the control plane sends it
	if set.XDS == nil {
		if cfg, err = load(); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, m, closeStore, err := newRLSServer(set, cfg, reg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	if cfg != nil {
		m.ConfigLoads.WithLabelValues("success").Inc()
	}
	return runRLS(set, srv, reg, load, log)
}

// rlsSettings reads the service's settings from the environment, and
// logs those it has set that take no effect.
func rlsSettings(log *slog.Logger) (envoyrls.Settings, error) {
	set, err := envoyrls.SettingsFromEnv(os.Getenv)
	if err != nil {
		return set, err
	}
	for _, w := range set.Ignored {
		log.Warn("setting without effect", slog.String("setting", w))
	}
	return set, nil
}

// runRLS serves srv on the settings' addresses until SIGTERM or SIGINT,
// keeping its configuration current (see watchRLSConfig), then stops it
// gracefully. An error serving is logged (errStopped).
func runRLS(set envoyrls.Settings, srv *envoyrls.Server, reg *prometheus.Registry, load func() (*envoyrls.Config, error), log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopHUP, err := watchRLSConfig(ctx, set, srv, load, log)
	if err != nil {
		return err
	}
	defer stopHUP()
	if ctx.Err() != nil {
		return nil
	}

	gopts := envoyrls.ServerOptions()
	if set.TLS != nil {
		tc, err := set.TLS.Config(func(err error) { log.Warn("gRPC TLS", slog.String("error", err.Error())) })
		if err != nil {
			return err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	g := grpc.NewServer(gopts...)
	srv.Register(g)
	servers := rlsHTTPServers(set, srv, reg)
	errc, err := startRLS(g, set.GRPCAddr, servers)
	if err != nil {
		return err
	}
	config := set.ConfigDir
	if set.XDS != nil {
		config = "xds://" + set.XDS.ServerURL
	}
	var domains []string
	if cfg := srv.Config(); cfg != nil {
		domains = cfg.Domains()
	}
	log.Info("rate-limit service started", slog.String("grpc", set.GRPCAddr), slog.String("http", set.HTTPAddr),
		slog.String("config", config), slog.Any("domains", domains), slog.String("backend", set.Backend))
	runErr := awaitRLS(ctx, errc)
	stopRLS(srv, g, servers)
	if runErr != nil {
		log.Error("rate-limit service stopped", slog.String("error", runErr.Error()))
		return errStopped
	}
	return nil
}

// watchRLSConfig keeps srv's configuration current until ctx ends, and
// returns how to stop handling SIGHUP. From files: reloaded with load
// when they change and on SIGHUP. From an xDS control plane: as it sends
// it, the first one waited for (until ctx ends) unless
// FORCE_START_WITHOUT_INITIAL_CONFIG; SIGHUP only logs.
func watchRLSConfig(ctx context.Context, set envoyrls.Settings, srv *envoyrls.Server, load func() (*envoyrls.Config, error), log *slog.Logger) (func(), error) {
	if set.XDS == nil {
		if err := srv.Watch(ctx, set.ConfigDir, set.Load); err != nil {
			log.Warn("not watching the rate-limit configuration; SIGHUP still reloads", slog.String("error", err.Error()))
		}
		return onHUP(func() { srv.Reload(load) }), nil
	}
	opts, err := set.XDS.Options(set.Load)
	if err != nil {
		return nil, err
	}
	ready, err := srv.WatchXDS(ctx, opts)
	if err != nil {
		return nil, err
	}
	stop := onHUP(func() { log.Info("SIGHUP: the rate-limit configuration comes from xDS, not reloaded") })
	if !set.XDS.ForceStart {
		log.Info("waiting for the rate-limit configuration from xDS", slog.String("server", set.XDS.ServerURL), slog.String("node", set.XDS.NodeID))
		select {
		case <-ready:
		case <-ctx.Done():
		}
	}
	return stop, nil
}

// awaitRLS waits for ctx to end or a server of the rate-limit service
// to stop (its end on errc), and returns the server's error, if it did
// not stop by being closed.
func awaitRLS(ctx context.Context, errc <-chan error) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	}
}

// startRLS listens on grpcAddr for g and on each HTTP server's address,
// and serves them; the channel receives each one's end. It returns the
// first error listening, once the gRPC listener is closed.
func startRLS(g *grpc.Server, grpcAddr string, servers []*http.Server) (<-chan error, error) {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1+len(servers))
	for _, hs := range servers {
		ln, err := net.Listen("tcp", hs.Addr)
		if err != nil {
			gl.Close()
			return nil, err
		}
		go func() { errc <- hs.Serve(ln) }()
	}
	go func() { errc <- g.Serve(gl) }()
	return errc, nil
}

// stopRLS stops the rate-limit service: srv first, then the gRPC server
// gracefully (for 30s at most), then the HTTP servers (5s each).
func stopRLS(srv *envoyrls.Server, g *grpc.Server, servers []*http.Server) {
	srv.Shutdown()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		g.Stop()
	}
	for _, hs := range servers {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hs.Shutdown(sctx)
		cancel()
	}
}

// openRLSStore opens the store the settings name: Redis behind the
// circuit breaker with the local fallback (as the gateway does), or
// memory. It returns the deny cache size that suits it.
func openRLSStore(set envoyrls.Settings, reg prometheus.Registerer, log *slog.Logger) (tollgate.Store, int, func(), error) {
	if set.Backend == "memory" {
		s := memory.New(memory.Options{})
		reg.MustRegister(s)
		return s, 0, func() { s.Close() }, nil
	}
	if err := policy.CheckRedisURL(set.RedisURL); err != nil {
		return nil, 0, nil, err
	}
	rs, err := openRLSRedis(set, log)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("opening redis store: %w", err)
	}
	res := resilience.New(rs, memory.New(memory.Options{}), resilience.Options{Timeout: set.RedisTimeout, Logger: log})
	reg.MustRegister(res)
	return res, engine.DefaultDenyCacheSize, func() { res.Close(); rs.Close() }, nil
}

// openRLSRedis opens the Redis store at the settings' URL, as one client
// in the standalone mode, without client-side caching.
func openRLSRedis(set envoyrls.Settings, log *slog.Logger) (*rstore.Store, error) {
	opt, err := rueidis.ParseURL(set.RedisURL)
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true
	if set.RedisMode == "standalone" {
		opt.ForceSingleClient = true
	}
	return rstore.Open(opt, rstore.Options{Logger: log})
}
