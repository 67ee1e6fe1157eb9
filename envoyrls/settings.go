package envoyrls

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Settings are what `tollgate rls` reads from the environment, under
// envoyproxy/ratelimit's variable names where they mean the same thing
// (see docs/integrations/envoy-rls.md, "Migrating from envoyproxy/ratelimit",
// for the whole table).
type Settings struct {
	// ConfigDir is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
	ConfigDir string
	Load      LoadOptions
	// GRPCAddr is GRPC_HOST:GRPC_PORT; HTTPAddr (HOST:PORT) serves
	// /healthcheck and /metrics; MetricsAddr (PROMETHEUS_ADDR, with
	// USE_PROMETHEUS) serves MetricsPath too.
	GRPCAddr, HTTPAddr, MetricsAddr, MetricsPath string
	// Backend is "redis" (BACKEND_TYPE) or "memory".
	Backend string
	// RedisURL is the Redis store as Tollgate's URL (see
	// policy.CheckRedisURL), from REDIS_SOCKET_TYPE, REDIS_URL,
	// REDIS_TYPE, REDIS_AUTH and REDIS_TLS, or TOLLGATE_REDIS_URL.
	RedisURL string
	// RedisMode is "standalone", "cluster" or "sentinel" (REDIS_TYPE).
	RedisMode string
	// RedisTimeout bounds each store call (TOLLGATE_STORE_TIMEOUT; zero:
	// the store's default, 20ms). REDIS_TIMEOUT, a connection timeout
	// of 10s there, is not this.
	RedisTimeout time.Duration
	// Server holds NEAR_LIMIT_RATIO, SHADOW_MODE and the headers.
	Server Options
	// TLS is the gRPC listener's (GRPC_SERVER_USE_TLS), nil for none.
	TLS *ServerTLS
	// ConfigType is CONFIG_TYPE: FILE (the files of ConfigDir) or
	// GRPC_XDS_SOTW (an xDS control plane, as XDS says; nil otherwise).
	ConfigType string
	XDS        *XDSSettings
	// Ignored lists the variables set that have no effect here, with why.
	Ignored []string
}

// ignoredVars are envoyproxy/ratelimit's variables that do not apply,
// and why.
var ignoredVars = map[string]string{
	"LOCAL_CACHE_SIZE_IN_BYTES":     "the engine's deny cache (100,000 refusals) is always on in front of Redis",
	"EXPIRATION_JITTER_MAX_SECONDS": "keys expire when their window ends",
	"CACHE_KEY_PREFIX":              "keys are rl:v3:{<domain>}:rls/...",
	"REDIS_POOL_SIZE":               "rueidis multiplexes one connection per node",
	"REDIS_PIPELINE_WINDOW":         "concurrent decisions are coalesced while Redis is busy, never on a timer",
	"REDIS_PIPELINE_LIMIT":          "see REDIS_PIPELINE_WINDOW",
	"REDIS_PERSECOND":               "one Redis for every unit",
	"USE_STATSD":                    "metrics are Prometheus only",
	"USE_DOG_STATSD":                "metrics are Prometheus only",
	"RUNTIME_WATCH_ROOT":            "a swap of RUNTIME_ROOT (or of any symlink on the way) and a change of the files are both followed",
	"RESPONSE_DYNAMIC_METADATA":     "not supported",
	"QUOTA_MODE":                    "not supported",
	"TRACING_ENABLED":               "not supported",
}

// envReader reads variables through getenv and gathers, in order, what
// is wrong with their values.
type envReader struct {
	getenv func(string) string
	errs   []string
}

// get is the variable name, or def when it is unset or empty.
func (e *envReader) get(name, def string) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	return def
}

// boolean is the variable name as a boolean, or def when it is unset or
// empty; a value that is not one is reported.
func (e *envReader) boolean(name string, def bool) bool {
	v := e.getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.failf("%s: want true or false, got %q", name, v)
	}
	return b
}

// duration is the variable name as a positive duration, 0 when it is
// unset or empty; a value that is not one is reported.
func (e *envReader) duration(name string) time.Duration {
	v := e.getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.failf("%s: want a duration such as 20ms, got %q", name, v)
	}
	return d
}

// failf reports a problem with a variable.
func (e *envReader) failf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// SettingsFromEnv reads the settings through getenv (os.Getenv).
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	e := &envReader{getenv: getenv}
	s := Settings{
		GRPCAddr:    net.JoinHostPort(e.get("GRPC_HOST", "0.0.0.0"), e.get("GRPC_PORT", "8081")),
		HTTPAddr:    net.JoinHostPort(e.get("HOST", "0.0.0.0"), e.get("PORT", "8080")),
		MetricsPath: e.get("PROMETHEUS_PATH", "/metrics"),
	}
	s.readConfig(e)
	s.readConfigType(e)
	s.TLS = readServerTLS(e)
	if e.boolean("USE_PROMETHEUS", false) {
		s.MetricsAddr = e.get("PROMETHEUS_ADDR", ":9090")
	}
	s.readServer(e)
	s.RedisTimeout = e.duration("TOLLGATE_STORE_TIMEOUT")
	s.readBackend(e)
	s.readIgnored(e)
	if len(e.errs) > 0 {
		return s, fmt.Errorf("reading the environment: %s", strings.Join(e.errs, "; "))
	}
	return s, nil
}

// readConfig reads where the configuration is and how it is loaded
// (RUNTIME_*, MERGE_DOMAIN_CONFIG, TOLLGATE_RLS_ON_STORE_FAILURE).
func (s *Settings) readConfig(e *envReader) {
	root := e.get("RUNTIME_ROOT", "/srv/runtime_data/current")
	s.ConfigDir = filepath.Join(root, e.getenv("RUNTIME_SUBDIRECTORY"), e.get("RUNTIME_APPDIRECTORY", "config"))
	s.Load.IgnoreDotFiles = e.boolean("RUNTIME_IGNOREDOTFILES", false)
	s.Load.MergeDomains = e.boolean("MERGE_DOMAIN_CONFIG", false)
	switch f := e.get("TOLLGATE_RLS_ON_STORE_FAILURE", "fail_open"); f {
	case "fail_open":
	case "fail_closed":
		s.Load.FailClosed = true
	default:
		e.failf("TOLLGATE_RLS_ON_STORE_FAILURE: want fail_open or fail_closed, got %q", f)
	}
}

// readServer reads the server's options: NEAR_LIMIT_RATIO, SHADOW_MODE
// and the response headers.
func (s *Settings) readServer(e *envReader) {
	if v := e.getenv("NEAR_LIMIT_RATIO"); v != "" {
		// A float32, as envoyproxy/ratelimit reads it: the near_limit
		// threshold is computed in its precision (see Options).
		r, err := strconv.ParseFloat(v, 32)
		if err != nil || r <= 0 || r > 1 {
			e.failf("NEAR_LIMIT_RATIO: want a number in (0, 1], got %q", v)
		}
		s.Server.NearLimitRatio = r
	}
	s.Server.ShadowMode = e.boolean("SHADOW_MODE", false)
	s.Server.Headers = e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false)
	s.Server.LimitHeader = e.getenv("LIMIT_LIMIT_HEADER")
	s.Server.RemainingHeader = e.getenv("LIMIT_REMAINING_HEADER")
	s.Server.ResetHeader = e.getenv("LIMIT_RESET_HEADER")
	s.Server.IETFHeaders = e.boolean("TOLLGATE_RLS_RATELIMIT_HEADERS", false)
}

// readIgnored lists the variables set that Tollgate reads as
// envoyproxy/ratelimit does not, or not at all, and why.
func (s *Settings) readIgnored(e *envReader) {
	if !e.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", true) {
		s.Ignored = append(s.Ignored, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: a request over any limit charges none, always")
	}
	for name, why := range ignoredVars {
		if e.getenv(name) != "" {
			s.Ignored = append(s.Ignored, name+": "+why)
		}
	}
}

// readBackend reads BACKEND_TYPE and, for Redis, the store's URL.
func (s *Settings) readBackend(e *envReader) {
	switch b := strings.ToLower(e.get("BACKEND_TYPE", "redis")); b {
	case "redis":
		s.Backend = "redis"
		if err := s.redis(e); err != nil {
			e.errs = append(e.errs, err.Error())
		}
	case "memory":
		s.Backend = "memory"
	default:
		e.failf("BACKEND_TYPE: want redis or memory, got %q (memcache is not supported)", b)
	}
}

// redisModes are REDIS_TYPE's values and the store modes they name.
var redisModes = map[string]string{"SINGLE": "standalone", "CLUSTER": "cluster", "SENTINEL": "sentinel"}

// redis reads the Redis settings into a Tollgate store URL.
func (s *Settings) redis(e *envReader) error {
	if u := e.getenv("TOLLGATE_REDIS_URL"); u != "" {
		s.RedisURL = u
		return nil
	}
	scheme := "redis"
	if b, _ := strconv.ParseBool(e.getenv("REDIS_TLS")); b {
		scheme = "rediss"
	}
	user := redisUser(e.getenv("REDIS_AUTH"))
	addrs := strings.Split(e.get("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), ",")
	t := strings.ToUpper(e.get("REDIS_TYPE", "SINGLE"))
	mode, ok := redisModes[t]
	if !ok {
		return fmt.Errorf("REDIS_TYPE: want SINGLE, CLUSTER or SENTINEL, got %q", t)
	}
	s.RedisMode = mode
	q := url.Values{}
	if mode == "sentinel" {
		// "<master set>,<sentinel>,<sentinel>…"
		if len(addrs) < 2 {
			return fmt.Errorf("REDIS_URL: a sentinel setting is <master set>,<host:port>[,<host:port>…], got %q", e.getenv("REDIS_URL"))
		}
		q.Set("master_set", strings.TrimSpace(addrs[0]))
		addrs = addrs[1:]
	}
	if strings.ToLower(e.get("REDIS_SOCKET_TYPE", "unix")) == "unix" {
		if s.RedisMode != "standalone" {
			return fmt.Errorf("REDIS_SOCKET_TYPE unix (the default) takes REDIS_TYPE SINGLE: set REDIS_SOCKET_TYPE=tcp for %s", t)
		}
		path := strings.TrimSpace(addrs[0])
		if hostPort(path) {
			return fmt.Errorf("REDIS_URL: REDIS_SOCKET_TYPE unix (the default) wants the socket's path, as /var/run/redis.sock, got %q, "+
				"a TCP address: set REDIS_SOCKET_TYPE=tcp to connect to it", path)
		}
		// A relative path is the working directory's, as a dialer reads
		// it; a URL holds an absolute one.
		path, err := filepath.Abs(path)
		if err != nil {
			return fmt.Errorf("REDIS_URL: finding the socket's path: %w", err)
		}
		u := url.URL{Scheme: "unix", Path: path, User: user}
		s.RedisURL = u.String()
		return nil
	}
	for _, a := range addrs[1:] {
		q.Add("addr", strings.TrimSpace(a))
	}
	u := url.URL{Scheme: scheme, Host: strings.TrimSpace(addrs[0]), User: user, RawQuery: q.Encode()}
	s.RedisURL = u.String()
	return nil
}

// hostPort reports whether a is a TCP address, host:port with a port
// number, rather than a socket's path (which has a slash, or no port).
func hostPort(a string) bool {
	if strings.Contains(a, "/") {
		return false
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// redisUser is REDIS_AUTH, "password" or "user:password", as a URL's
// user; nil when it is empty.
func redisUser(auth string) *url.Userinfo {
	if auth == "" {
		return nil
	}
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return url.UserPassword(u, p)
	}
	return url.UserPassword("", auth)
}
