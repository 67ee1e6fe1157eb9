// Package gateway is Tollgate's reverse proxy: the httplimit middleware in
// front of httputil.ReverseProxy, on a public listener, with /healthz,
// /readyz and /metrics on a separate admin listener.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/logsample"
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
	// Logger receives JSON logs; nil means slog.Default().
	Logger *slog.Logger
	// ShutdownTimeout bounds how long in-flight requests may take to finish
	// after shutdown starts (default 30s).
	ShutdownTimeout time.Duration
	// Clock, if set, is the time every decision is made at, for tests that
	// walk time (daily quotas, lock expiry). Nil means the store's clock.
	Clock func() time.Time
}

// Gateway serves a policy, and can swap in a new one while it runs (see
// Reload). Create it with New and run it with Serve.
type Gateway struct {
	opts     Options
	pol      *policy.Policy // the policy it started with: store, listeners, admin token
	store    tollgate.Store
	closers  []func()
	registry *prometheus.Registry
	metrics  *httplimit.Metrics
	public   http.Handler
	admin    http.Handler
	log      *slog.Logger
	proxyLog *log.Logger // ReverseProxy's own errors, into log as JSON

	mu         sync.Mutex // serialises reloads, overrides and so builds
	transports map[time.Duration]*http.Transport
	overrides  policy.Overrides
	active     atomic.Pointer[served]
	previous   atomic.Pointer[served]

	reloads *prometheus.CounterVec
	info    *prometheus.GaugeVec
	conns   *connMetrics
}

// served is one policy ready to serve: its middleware and proxies.
type served struct {
	base    *policy.Policy // as loaded from the file
	pol     *policy.Policy // with the runtime overrides laid over it
	handler http.Handler
	loaded  time.Time
}

// pinger is a store that can tell whether it is reachable.
type pinger interface{ Ping(context.Context) error }

// New builds a Gateway: it opens the store, the proxies and the metrics.
func New(opts Options) (*Gateway, error) {
	if opts.Policy == nil {
		return nil, errors.New("creating gateway: no policy")
	}
	g := &Gateway{opts: opts, pol: opts.Policy, log: opts.Logger, registry: prometheus.NewRegistry()}
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
	metrics, err := httplimit.NewMetrics(g.registry)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("creating gateway: %w", err)
	}
	g.metrics = metrics
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_reloads_total",
		Help: "Policy reloads by result (ok, invalid, refused, rollback).",
	}, []string{"result"})
	g.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_info",
		Help: "The active policy (1) by version.",
	}, []string{"version"})
	g.registry.MustRegister(g.reloads, g.info)
	g.conns = newConnMetrics(g.registry)
	sv, err := g.build(g.pol)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.activate(sv)
	g.public = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A request runs to the end under the policy it started with.
		g.active.Load().handler.ServeHTTP(w, r)
	})
	g.admin = g.adminHandler()
	return g, nil
}

// build makes the handler that serves base with the runtime overrides.
func (g *Gateway) build(base *policy.Policy) (*served, error) {
	p, err := base.Override(g.overrides)
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.Middleware(httplimit.Options{
		Policy: p, Store: g.store, Logger: g.log, Metrics: g.metrics, RequireRoute: true, Now: g.opts.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("building policy %s: %w", p.Version, err)
	}
	up, err := g.upstreams(p)
	if err != nil {
		return nil, err
	}
	return &served{base: base, pol: p, handler: mw(up), loaded: time.Now()}, nil
}

// Override applies a runtime change (API keys, tenant plans) over the
// active policy file, atomically; it persists across reloads of the file.
// An override that does not fit the policy is refused and changes nothing.
func (g *Gateway) Override(change policy.Overrides) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := policy.Overrides{Keys: map[string]*policy.KeySpec{}, Tenants: map[string]string{}}
	for k, v := range g.overrides.Keys {
		next.Keys[k] = v
	}
	for k, v := range g.overrides.Tenants {
		next.Tenants[k] = v
	}
	for k, v := range change.Keys {
		next.Keys[k] = v
	}
	for k, v := range change.Tenants {
		next.Tenants[k] = v
	}
	old := g.overrides
	g.overrides = next
	sv, err := g.build(g.active.Load().base)
	if err != nil {
		g.overrides = old
		return err
	}
	g.active.Store(sv) // the same version: no rollback point
	g.log.Info("runtime override applied", slog.Int("keys", len(change.Keys)), slog.Int("tenants", len(change.Tenants)))
	return nil
}

func (g *Gateway) activate(sv *served) {
	if old := g.active.Swap(sv); old != nil {
		g.previous.Store(old)
		g.info.DeleteLabelValues(old.pol.Version)
	}
	g.info.WithLabelValues(sv.pol.Version).Set(1)
}

// Policy returns the active policy.
func (g *Gateway) Policy() *policy.Policy { return g.active.Load().pol }

// Reload validates p completely and swaps it in atomically: requests in
// flight finish under the old policy, new ones get p. Settings that need a
// restart (listeners, store, admin token) must not change. On error the
// active policy stays, and the failure is logged and counted.
func (g *Gateway) Reload(p *policy.Policy) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.pol
	if p.Public != cur.Public || p.Admin != cur.Admin || p.AdminToken != cur.AdminToken || p.Conns != cur.Conns ||
		p.Store.Type != cur.Store.Type || p.Store.URL != cur.Store.URL || p.Store.Mode != cur.Store.Mode {
		g.reloads.WithLabelValues("refused").Inc()
		err := errors.New("reloading policy: listeners (and their timeouts and caps), store and admin token need a restart to change")
		g.log.Error("policy reload refused", slog.String("version", p.Version), slog.String("error", err.Error()))
		return err
	}
	sv, err := g.build(p)
	if err != nil {
		g.reloads.WithLabelValues("invalid").Inc()
		g.log.Error("policy reload failed", slog.String("error", err.Error()))
		return err
	}
	g.activate(sv)
	g.reloads.WithLabelValues("ok").Inc()
	for _, w := range p.Warnings {
		g.log.Warn("policy warning", slog.String("warning", w.Msg), slog.String("file", w.File), slog.Int("line", w.Line), slog.String("path", w.Path))
	}
	g.log.Info("policy reloaded", slog.String("version", p.Version), slog.String("hash", p.Hash))
	return nil
}

// ReloadFile loads the policy file at path and reloads it. An invalid file
// is refused (logged and counted) and the active policy keeps serving.
func (g *Gateway) ReloadFile(path string) error {
	p, err := policy.Load(path)
	if err != nil {
		g.reloads.WithLabelValues("invalid").Inc()
		g.log.Error("policy file refused, keeping the active policy", slog.String("file", path),
			slog.String("active_version", g.Policy().Version), slog.String("error", err.Error()))
		return err
	}
	return g.Reload(p)
}

// Rollback restores the policy that was active before the last reload.
func (g *Gateway) Rollback() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.previous.Load()
	if prev == nil {
		return errors.New("rolling back: no previous policy")
	}
	g.activate(prev)
	g.reloads.WithLabelValues("rollback").Inc()
	g.log.Info("policy rolled back", slog.String("version", prev.pol.Version), slog.String("hash", prev.pol.Hash))
	return nil
}

// Watch reloads the policy file at path whenever it, or the keys file it
// names, changes (it watches their directories, so editors that replace a
// file are seen), until ctx ends. API keys and their plans thus change
// without a restart.
func (g *Gateway) Watch(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching policy: %w", err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return fmt.Errorf("watching policy: %w", err)
	}
	watched := func(name string) bool {
		name = filepath.Clean(name)
		if name == filepath.Clean(path) {
			return true
		}
		kp := g.Policy().KeysPath
		return kp != "" && name == filepath.Clean(kp)
	}
	if kp := g.Policy().KeysPath; kp != "" && filepath.Dir(kp) != filepath.Dir(path) {
		if err := w.Add(filepath.Dir(kp)); err != nil {
			g.log.Warn("not watching the keys file; SIGHUP still reloads it", slog.String("error", err.Error()))
		}
	}
	go func() {
		defer w.Close()
		var debounce <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if watched(ev.Name) && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
					debounce = time.After(100 * time.Millisecond)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				g.log.Warn("watching policy", slog.String("error", err.Error()))
			case <-debounce:
				debounce = nil
				g.ReloadFile(path)
			}
		}
	}()
	return nil
}

func (g *Gateway) openStore() error {
	if g.opts.Store != nil {
		g.store = g.opts.Store
		return nil
	}
	spec := g.pol.Store
	if g.opts.RedisURL != "" {
		spec.Type, spec.URL = "redis", g.opts.RedisURL
	}
	switch spec.Type {
	case "redis":
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
		rs, err := rstore.Open(opt, 0)
		if err != nil {
			return fmt.Errorf("opening redis store: %w", err)
		}
		g.closers = append(g.closers, rs.Close)
		calendar, err := resilience.ParseCalendarFallback(spec.CalendarFallback)
		if err != nil {
			return fmt.Errorf("opening redis store: %w", err)
		}
		res := resilience.New(rs, resilience.Options{
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
		g.store = res
	default:
		s := memory.New(memory.Options{MaxBytes: int64(spec.MaxBytes), MaxKeys: spec.MaxKeys, Now: g.opts.Clock})
		g.closers = append(g.closers, func() { s.Close() })
		g.registry.MustRegister(s)
		g.store = s
	}
	return nil
}

// Close releases the store.
func (g *Gateway) Close() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
	g.closers = nil
}

// Handler returns the public handler (middleware and proxy).
func (g *Gateway) Handler() http.Handler { return g.public }

// AdminHandler returns the admin handler: /healthz, /readyz, /metrics, the
// policy and override endpoints and the dashboard, behind the checks of
// guardAdmin (Host without a token, the token, and for state-changing
// requests same-origin and Content-Type: application/json).
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// Registry returns the gateway's Prometheus registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.registry }

func (g *Gateway) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// A gateway whose store is down still serves, by each route's
		// failure policy: it is ready, but says it is degraded.
		status, detail := "ready", "store ok"
		if p, ok := g.store.(pinger); ok {
			ctx, cancel := context.WithTimeout(r.Context(), time.Second)
			defer cancel()
			if err := p.Ping(ctx); err != nil {
				status, detail = "degraded", "store unavailable: "+err.Error()
			}
		}
		if d, ok := g.store.(interface{ Degraded() bool }); ok && d.Degraded() && status == "ready" {
			status, detail = "degraded", "store circuit breaker not closed"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"status": status, "detail": detail, "policy_version": g.Policy().Version})
	})
	mux.HandleFunc("GET /dashboard", g.dashboardPage)
	mux.HandleFunc("GET /dashboard/data", g.dashboardData)
	mux.HandleFunc("GET /policy", func(w http.ResponseWriter, r *http.Request) {
		a := g.active.Load()
		out := map[string]any{"version": a.pol.Version, "hash": a.pol.Hash, "source": a.pol.Source, "loaded_at": a.loaded.UTC()}
		if p := g.previous.Load(); p != nil {
			out["previous"] = map[string]any{"version": p.pol.Version, "hash": p.pol.Hash}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	override := func(w http.ResponseWriter, change policy.Overrides) {
		if err := g.Override(change); err != nil {
			httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-override", Status: http.StatusUnprocessableEntity, Detail: err.Error()})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
	mux.HandleFunc("GET /overrides", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		out := g.overrides
		g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("PUT /keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		var k policy.KeySpec
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&k); err != nil {
			httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-override", Status: http.StatusBadRequest, Detail: "want a JSON key: digest, tenant, user, plan"})
			return
		}
		override(w, policy.Overrides{Keys: map[string]*policy.KeySpec{r.PathValue("id"): &k}})
	})
	mux.HandleFunc("DELETE /keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		override(w, policy.Overrides{Keys: map[string]*policy.KeySpec{r.PathValue("id"): nil}})
	})
	mux.HandleFunc("PUT /tenants/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		var t struct{ Plan string }
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&t); err != nil || t.Plan == "" {
			httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-override", Status: http.StatusBadRequest, Detail: `want {"plan": "<name>"}`})
			return
		}
		override(w, policy.Overrides{Tenants: map[string]string{r.PathValue("tenant"): t.Plan}})
	})
	mux.HandleFunc("DELETE /tenants/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		override(w, policy.Overrides{Tenants: map[string]string{r.PathValue("tenant"): ""}})
	})
	mux.HandleFunc("POST /policy/rollback", func(w http.ResponseWriter, r *http.Request) {
		if err := g.Rollback(); err != nil {
			httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:no-previous-policy", Status: http.StatusConflict, Detail: err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"version": g.Policy().Version, "hash": g.Policy().Hash})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	return guardAdmin(mux, g.pol.AdminToken)
}

// transport returns the upstream transport for a response-header timeout,
// made once and shared by every policy (and reload) that uses the timeout,
// so reloads reuse its connection pool. Builds run one at a time.
func (g *Gateway) transport(timeout time.Duration) *http.Transport {
	if t, ok := g.transports[timeout]; ok {
		return t
	}
	t := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	if g.transports == nil {
		g.transports = map[time.Duration]*http.Transport{}
	}
	g.transports[timeout] = t
	g.closers = append(g.closers, t.CloseIdleConnections)
	return t
}

// upstreams returns the handler that sends an admitted request to its
// route's upstream.
func (g *Gateway) upstreams(p *policy.Policy) (http.Handler, error) {
	transport := g.transport(p.UpstreamTimeout)
	echo := Echo()
	proxies := map[string]http.Handler{}
	for _, r := range p.Routes {
		if r.Upstream == policy.BuiltinEcho || proxies[r.Upstream] != nil {
			continue
		}
		target, err := url.Parse(r.Upstream)
		if err != nil {
			return nil, fmt.Errorf("creating gateway: route %s: %w", r.Name, err)
		}
		proxies[r.Upstream] = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				if info, ok := httplimit.FromContext(pr.In.Context()); ok {
					pr.Out.URL.Path, pr.Out.URL.RawPath = info.Path, ""
					// The client charged, and the chain vouched for; the
					// peer is appended below.
					if ff := info.Subject.ForwardedFor(); ff != "" {
						pr.Out.Header.Set("X-Forwarded-For", ff)
					}
					if a := info.Subject.Addr; a.IsValid() {
						pr.Out.Header.Set("X-Real-Ip", a.String())
					}
				}
				pr.SetURL(target)
				pr.SetXForwarded()
			},
			Transport:    transport,
			ErrorHandler: g.upstreamError,
			ErrorLog:     g.proxyLog,
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := httplimit.FromContext(r.Context())
		if !ok || info.Route == nil {
			httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemNotFound, Status: http.StatusNotFound})
			return
		}
		if info.Route.Upstream == policy.BuiltinEcho {
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath = info.Path, ""
			echo.ServeHTTP(w, r2)
			return
		}
		proxies[info.Route.Upstream].ServeHTTP(w, r)
	}), nil
}

func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if bodyTimedOut(r.Context()) {
		// The client, not the upstream, was too slow: its body did not
		// arrive in time. (net/http has cancelled the request's context.)
		w.Header().Set("Connection", "close")
		httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemBodyTimeout, Status: http.StatusRequestTimeout,
			Detail: "the request body did not arrive in time"})
		return
	}
	if r.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemUpstreamSlow, Status: http.StatusGatewayTimeout,
			Detail: "the upstream did not answer in time"})
		return
	}
	g.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream failed", slog.String("error", err.Error()))
	httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemBadGateway, Status: http.StatusBadGateway,
		Detail: "the upstream could not be reached"})
}

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
	maxConns, derived := cl.MaxConns, cl.MaxConns == 0
	if derived {
		maxConns = defaultMaxConns(cl.AdminMaxConns)
	} else if fit := defaultMaxConns(cl.AdminMaxConns); maxConns > fit {
		g.log.Warn("listeners.max_conns is more than the file limit can hold; raise the limit (ulimit -n) or lower max_conns",
			slog.Int("max_conns", maxConns), slog.Int("fits", fit))
	}
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
		slog.String("policy_version", g.Policy().Version),
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
	sctx, cancel := context.WithTimeout(context.Background(), g.opts.ShutdownTimeout)
	defer cancel()
	for _, s := range servers {
		if serr := s.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("shutting down: %w", serr)
		}
	}
	wg.Wait()
	return err
}
