// Package gateway is Tollgate's reverse proxy: the httplimit middleware in
// front of httputil.ReverseProxy, on a public listener, with /healthz,
// /readyz and /metrics on a separate admin listener.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/logsample"
	"github.com/tollgate/tollgate/jwtauth"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// Options configures a Gateway. Policy is required; the zero value of every
// other field is the default.
type Options struct {
	Policy *policy.Policy
	// Store overrides the store the policy names; nil opens it.
	Store tollgate.Store
	// RedisURL, if set, overrides the policy's store with this Redis.
	RedisURL string
	// Logger receives JSON logs; nil means slog.Default(). Durations are
	// slog duration values (tollgate serve's logger writes them as text,
	// "10s").
	Logger *slog.Logger
	// ShutdownTimeout bounds how long in-flight requests may take to finish
	// after shutdown starts (default 30s).
	ShutdownTimeout time.Duration
	// Clock, if set, is the time every decision is made at, for tests that
	// walk time (daily quotas, lock expiry). Nil means the store's clock.
	Clock func() time.Time
	// StateFile, without Redis, is where admin changes (overrides,
	// rollbacks) are kept for the next run; empty keeps them in this
	// process only. With Redis they are kept there, for the whole fleet
	// (StateKey).
	StateFile string
	// Version is the release the binary was built as (tollgate version);
	// empty means the module's version from the build information.
	Version string
	// Public and Admin, if set, replace the policy file's listen addresses
	// whenever it is reloaded (tollgate serve --listen, --admin: see
	// policy.Env).
	Public, Admin string
	// HistoryInterval is the time between two samples of the dashboard's
	// history (default one second; it keeps the last 900).
	HistoryInterval time.Duration
	// RecordSize bounds the recording of recent calls served at
	// /recording for tollgate simulate (default
	// engine.DefaultRecordSize; negative: no recording), and RecordSample
	// keeps one subject in RecordSample (default every one).
	RecordSize, RecordSample int
	// SimulateBudget bounds the time, and so the CPU (one core), that one
	// POST /simulate may spend replaying (default DefaultSimulateBudget);
	// a replay past it is stopped and answered 503. One replay runs at a
	// time.
	SimulateBudget time.Duration
}

// DefaultSimulateBudget is the default Options.SimulateBudget: a
// replay of the default recording (engine.DefaultRecordSize calls) under
// two policies takes well under it.
const DefaultSimulateBudget = 2 * time.Second

// Gateway serves a policy, and can swap in a new one while it runs (see
// Reload). Create it with New and run it with Serve.
type Gateway struct {
	opts  Options
	pol   *policy.Policy // the policy it started with: store, listeners, admin token
	store tollgate.Store
	redis *rstore.Store // the Redis behind store; nil for another store
	// denyCache is the engine's deny cache size: refusals are answered
	// again without a store call in front of Redis, not of memory.
	denyCache  int
	closers    []func()
	past       history           // the dashboard's recent past
	recording  *engine.Recording // recent calls, for tollgate simulate
	limiters   *engine.Limiters  // the upstreams' adaptive limits, kept across reloads
	simulating sync.Mutex        // held while POST /simulate replays
	registry   *prometheus.Registry
	metrics    *httplimit.Metrics
	// keys are the JWKS of every policy the gateway serves, kept across
	// reloads; /readyz says when the active policy's cannot be fetched.
	keys     *jwtauth.Keys
	public   http.Handler
	admin    http.Handler
	log      *slog.Logger
	proxyLog *log.Logger // ReverseProxy's own errors, into log as JSON

	mu         sync.Mutex // serialises reloads, overrides and so builds
	transports map[time.Duration]*http.Transport
	overrides  policy.Overrides
	active     atomic.Pointer[served]
	// history holds the policies served before the active one, oldest
	// first (at most maxHistory): Rollback steps back through it.
	history []*served
	// backend keeps the runtime state (overrides, rollbacks) for the
	// fleet and the next run (nil: this process alone); state is what
	// this gateway has applied.
	backend stateBackend
	state   runtimeState

	reloads *prometheus.CounterVec
	info    *prometheus.GaugeVec
	conns   *connMetrics
	// requests are the public requests' metrics; access writes the access
	// log, unsampled by message (the policy sets its share).
	requests    *requestMetrics
	access      *slog.Logger
	accessLines atomic.Pointer[rate.Limiter]
	// tracer records the spans of public requests; nil when the policy
	// turns tracing off.
	tracer trace.Tracer
}

// served is one policy ready to serve: its middleware and proxies.
type served struct {
	base    *policy.Policy // as loaded from the file
	pol     *policy.Policy // with the runtime overrides laid over it
	handler http.Handler
	front   *httplimit.Front // for admin resets
	loaded  time.Time
}

// StateKey is the Redis key of a fleet's runtime state (see
// Options.StateFile).
const StateKey = "{tollgate-state}:v1"

// New builds a Gateway: it opens the store, the proxies and the metrics.
func New(opts Options) (*Gateway, error) {
	if opts.Policy == nil {
		return nil, errors.New("creating gateway: no policy")
	}
	g := &Gateway{opts: opts, pol: opts.Policy, log: opts.Logger, access: opts.Logger, registry: prometheus.NewRegistry(),
		recording: newRecording(opts), limiters: engine.NewLimiters()}
	// Every line is sampled per message: a failure repeated on every
	// request writes a few lines a second, with a count of the rest.
	g.log = logsample.Logger(g.log)
	g.proxyLog = slog.NewLogLogger(g.log.Handler().WithAttrs([]slog.Attr{slog.String("logger", "reverseproxy")}), slog.LevelWarn)
	if g.opts.ShutdownTimeout == 0 {
		g.opts.ShutdownTimeout = 30 * time.Second
	}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := g.openStore(); err != nil {
		g.Close()
		return nil, err
	}
	if err := g.openTracing(); err != nil {
		g.Close()
		return nil, err
	}
	if err := g.registerMetrics(); err != nil {
		g.Close()
		return nil, fmt.Errorf("creating gateway: %w", err)
	}
	sv, err := g.build(g.pol)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.activate(sv)
	if err := g.loadState(); err != nil {
		g.Close()
		return nil, fmt.Errorf("creating gateway: %w", err)
	}
	g.public = g.observe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A request runs to the end under the policy it started with.
		g.active.Load().handler.ServeHTTP(w, r)
	}))
	g.admin = g.adminHandler()
	return g, nil
}

// newRecording returns the recording of recent calls opts asks for: of
// opts.RecordSize calls (engine.DefaultRecordSize when 0), nil when that
// is negative.
func newRecording(opts Options) *engine.Recording {
	if opts.RecordSize < 0 {
		return nil
	}
	size := opts.RecordSize
	if size == 0 {
		size = engine.DefaultRecordSize
	}
	return engine.NewRecording(size, opts.RecordSample)
}

// registerMetrics makes the gateway's metrics (the middleware's, the
// JWKS fetches', the policy's reloads and version, the build,
// connections and requests) and registers them.
func (g *Gateway) registerMetrics() error {
	metrics, err := httplimit.NewMetrics(g.registry)
	if err != nil {
		return err
	}
	g.metrics = metrics
	if g.keys, err = jwtauth.NewKeys(jwtauth.KeysOptions{Logger: g.log}); err != nil {
		return err
	}
	g.closers = append(g.closers, g.keys.Close)
	g.registry.MustRegister(g.keys)
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_reloads_total",
		Help: "Policy reloads by result (ok, invalid, refused, rollback).",
	}, []string{"result"})
	g.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_info",
		Help: "The active policy (1) by version.",
	}, []string{"version"})
	for _, r := range []string{"ok", "invalid", "refused", "rollback"} {
		g.reloads.WithLabelValues(r) // at zero from the start, for alerts
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "The running build (1) by version, commit and Go version.",
	}, []string{"version", "revision", "goversion"})
	version, revision := buildInfo(g.opts.Version)
	build.WithLabelValues(version, revision, runtime.Version()).Set(1)
	g.registry.MustRegister(g.reloads, g.info, build)
	g.conns = newConnMetrics(g.registry)
	g.requests = newRequestMetrics(g.registry)
	return nil
}

// loadState applies the changes admins made before this run (or on other
// gateways), from the state file when there is one and no store keeps
// the state. Only a state file that cannot be read is an error: with
// Redis not there yet (openRedis warned of it), Serve's watch applies
// them once it is.
func (g *Gateway) loadState() error {
	if g.backend == nil && g.opts.StateFile != "" {
		g.backend = &fileState{path: g.opts.StateFile}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := g.syncState(ctx); err != nil {
		if errors.Is(err, rstore.ErrNotConnected) {
			return nil
		}
		g.log.Warn("reading the runtime state (retried while serving)", slog.String("error", err.Error()))
		if _, ok := g.backend.(*fileState); ok {
			return err
		}
	}
	return nil
}

// build makes the handler that serves base with the runtime overrides
// that fit it (policy.Overrides.Fitting). One that does not (a tenant set
// to a plan only another gateway's version has, in a rolling deploy) is
// logged and left out, and applies once a version it fits is served
// here; the rest, a key's removal above all, waits on nothing.
func (g *Gateway) build(base *policy.Policy) (*served, error) {
	fit, left := g.overrides.Fitting(base)
	for _, err := range left {
		g.log.Error("a fleet override does not fit the policy served here; applying the others", slog.String("error", err.Error()))
	}
	p, err := base.Override(fit)
	if err != nil {
		return nil, err
	}
	// One engine decides for the middleware and forward-auth alike.
	eng, err := engine.New(engine.Options{Policy: p, Store: g.store, Logger: g.log, Metrics: g.metrics, Now: g.opts.Clock,
		DenyCacheSize: g.denyCache, Tracer: g.tracer, Recording: g.recording, JWKS: g.keys, Limiters: g.limiters})
	if err != nil {
		return nil, fmt.Errorf("building policy %s: %w", p.Version, err)
	}
	front, err := httplimit.New(httplimit.Options{Engine: eng, RequireRoute: true,
		CleanPathForwarded: true, // upstreams get Info.Path (see upstreams)
	})
	if err != nil {
		return nil, fmt.Errorf("building policy %s: %w", p.Version, err)
	}
	up, err := g.upstreams(p)
	if err != nil {
		return nil, err
	}
	g.requests.prime(p)
	return &served{base: base, pol: p, front: front, handler: withForwardAuth(front, front.Middleware(up)), loaded: time.Now()}, nil
}

// openStore opens the store the gateway decides on: Options.Store when
// set, else the policy's (Redis at Options.RedisURL when that is set),
// else a memory store.
func (g *Gateway) openStore() error {
	if g.opts.Store != nil {
		g.store = g.opts.Store
		return nil
	}
	spec := g.storeSpec()
	if spec.Type == "redis" {
		return g.openRedis(spec)
	}
	s := memory.New(memory.Options{MaxBytes: int64(spec.MaxBytes), MaxKeys: spec.MaxKeys, Now: g.opts.Clock})
	g.closers = append(g.closers, func() { s.Close() })
	g.registry.MustRegister(s)
	g.store = s
	return nil
}

// storeSpec is the store of the policy, or Redis at Options.RedisURL
// when that is set.
func (g *Gateway) storeSpec() policy.StoreSpec {
	spec := g.pol.Store
	if g.opts.RedisURL != "" {
		spec.Type, spec.URL = "redis", g.opts.RedisURL
	}
	return spec
}

// redisStartWait is how long a gateway waits for Redis when it opens it:
// before it serves, it is normal not to have reached Redis yet.
const redisStartWait = 2 * time.Second

// openRedis opens the Redis store spec describes, behind the resilience
// wrapper that falls back to a memory store while Redis fails, and keeps
// the fleet's runtime state in it. It waits up to redisStartWait for the
// first connection, and warns if there is none by then.
func (g *Gateway) openRedis(spec policy.StoreSpec) error {
	opt, err := rueidis.ParseURL(spec.URL)
	if err != nil {
		return fmt.Errorf("opening redis store: %w", err)
	}
	opt.DisableCache = true
	switch spec.Mode {
	case "standalone":
		opt.ForceSingleClient = true
	case "sentinel":
		if opt.Sentinel.MasterSet == "" {
			return errors.New("opening redis store: sentinel mode needs ?master_set=<name> in the url")
		}
	}
	// Open does not wait for Redis: the gateway serves (degraded, by
	// each route's failure policy) until Redis appears.
	rs, err := rstore.Open(opt, rstore.Options{Logger: g.log})
	if err != nil {
		return fmt.Errorf("opening redis store: %w", err)
	}
	g.closers = append(g.closers, func() { rs.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), redisStartWait)
	defer cancel()
	if err := rs.WaitConnected(ctx); err != nil {
		g.log.Warn("redis is not reachable: serving by each route's failure policy until it is",
			slog.String("url", redactURL(spec.URL)), slog.Duration("waited", redisStartWait), slog.String("error", err.Error()))
	}
	calendar, err := resilience.ParseCalendarFallback(spec.CalendarFallback)
	if err != nil {
		return fmt.Errorf("opening redis store: %w", err)
	}
	res := resilience.New(rs, memory.New(memory.Options{Now: g.opts.Clock}), resilience.Options{
		Timeout:          spec.Timeout,
		FailuresToOpen:   spec.Breaker.Failures,
		OpenFor:          spec.Breaker.OpenFor,
		Instances:        spec.Instances,
		CalendarFallback: calendar,
		Logger:           g.log,
		Now:              g.opts.Clock,
	})
	g.closers = append(g.closers, func() { res.Close() })
	g.registry.MustRegister(res)
	g.store, g.denyCache, g.redis = res, engine.DefaultDenyCacheSize, rs
	g.backend = &redisState{client: rs.Client, key: StateKey}
	return nil
}

// Close releases the store, and flushes the spans not yet sent.
func (g *Gateway) Close() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
	g.closers = nil
}

// Handler returns the public handler (middleware and proxy).
func (g *Gateway) Handler() http.Handler { return g.public }

// Registry returns the gateway's Prometheus registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.registry }

// Serve serves public traffic on pub and the admin endpoints on adm until
// ctx is done, then shuts down gracefully: listeners close at once and
// in-flight requests get up to ShutdownTimeout to finish.
//
// Both listeners serve under the policy's connection bounds
// (policy.ConnLimits): header, body, idle and send timeouts, a cap on the
// public connections of each client address (trusted proxies exempt) and
// in all, and a separate cap on the admin connections.
func (g *Gateway) Serve(ctx context.Context, pub, adm net.Listener) error {
	cl := g.pol.Conns
	maxConns, derived := g.maxConns(cl)
	trusted := func(a netip.Addr) bool { return g.Policy().Trusted.Contains(a) }
	pub = newConnLimiter(pub, "public", maxConns, cl.MaxConnsPerClient, trusted, g.conns, g.log)
	adm = newConnLimiter(adm, "admin", cl.AdminMaxConns, 0, nil, g.conns, g.log)
	server := func(h http.Handler, listener string) *http.Server {
		return &http.Server{Handler: bounded(h, cl, g.conns, listener),
			// The body's deadline is set per request (bounded): no
			// ReadTimeout, which would run from the headers and cut off a
			// request the gateway holds to shape it.
			ReadHeaderTimeout: cl.HeaderTimeout,
			IdleTimeout:       cl.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)}
	}
	servers := []*http.Server{server(g.public, "public"), server(g.admin, "admin")}
	go g.watchState(ctx)
	go g.sampleHistory(ctx)
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	for i, l := range []net.Listener{pub, adm} {
		wg.Add(1)
		go func(s *http.Server, l net.Listener) {
			defer wg.Done()
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}(servers[i], l)
	}
	g.log.Info("serving", slog.String("public", pub.Addr().String()), slog.String("admin", adm.Addr().String()),
		slog.String("policy_version", g.Policy().Version), g.storeAttr(),
		slog.Int("max_conns", maxConns), slog.Bool("max_conns_from_file_limit", derived),
		slog.Int("max_conns_per_client", cl.MaxConnsPerClient), slog.Int("admin_max_conns", cl.AdminMaxConns),
		slog.Duration("header_timeout", cl.HeaderTimeout), slog.Duration("body_timeout", cl.BodyTimeout),
		slog.Duration("idle_timeout", cl.IdleTimeout), slog.Duration("send_timeout", cl.SendTimeout))
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	g.log.Info("shutting down")
	if serr := g.shutdown(servers); err == nil {
		err = serr
	}
	wg.Wait()
	return err
}

// storeAttr describes the store for the serving line: its type and, for
// Redis, the mode it answered in (the policy's until it has) and its URL
// without the password.
func (g *Gateway) storeAttr() slog.Attr {
	if g.opts.Store != nil {
		return slog.Group("store", slog.String("type", fmt.Sprintf("%T", g.opts.Store)))
	}
	spec := g.storeSpec()
	if g.redis == nil {
		return slog.Group("store", slog.String("type", spec.Type))
	}
	mode := spec.Mode
	if c, err := g.redis.Client(); err == nil {
		mode = string(c.Mode())
	}
	return slog.Group("store", slog.String("type", spec.Type), slog.String("mode", cmp.Or(mode, "not known until connected")),
		slog.String("url", redactURL(spec.URL)))
}

// redactURL returns the Redis URL u without its password: it is replaced
// by xxxxx, and so is a user without a password, which may be one.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable url)"
	}
	if p.User == nil {
		return u
	}
	if _, has := p.User.Password(); !has {
		p.User = url.User("xxxxx")
	}
	return p.Redacted()
}

// shutdown shuts the servers down gracefully, giving the requests in
// flight up to ShutdownTimeout in all, and returns the first error.
func (g *Gateway) shutdown(servers []*http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.ShutdownTimeout)
	defer cancel()
	var err error
	for _, s := range servers {
		if serr := s.Shutdown(ctx); serr != nil && err == nil {
			err = fmt.Errorf("shutting down: %w", serr)
		}
	}
	return err
}

// maxConns returns the cap on public connections: cl's, or when it sets
// none what the file limit can hold beside the admin connections (derived
// true). A cap above that is kept, and warned of.
func (g *Gateway) maxConns(cl policy.ConnLimits) (n int, derived bool) {
	fit := defaultMaxConns(cl.AdminMaxConns)
	if cl.MaxConns == 0 {
		return fit, true
	}
	if cl.MaxConns > fit {
		g.log.Warn("listeners.max_conns is more than the file limit can hold; raise the limit (ulimit -n) or lower max_conns",
			slog.Int("max_conns", cl.MaxConns), slog.Int("fits", fit))
	}
	return cl.MaxConns, false
}

// buildInfo returns the release (version, or the main module's version)
// and the commit the binary was built from.
func buildInfo(version string) (string, string) {
	revision := "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orUnknown(version), revision
	}
	if version == "" {
		version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	return orUnknown(version), revision
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
