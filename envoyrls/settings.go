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
// (see README.md, "Envoy's rate-limit service", for the whole table).
type Settings struct {
	// ConfigDir is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
	ConfigDir string
	// WatchDir is what is watched: RUNTIME_ROOT (a symlink swapped on
	// deployment) with RUNTIME_WATCH_ROOT, else ConfigDir.
	WatchDir string
	Load     LoadOptions
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
	"CONFIG_TYPE":                   "configuration is read from files only (no xDS)",
	"RESPONSE_DYNAMIC_METADATA":     "not supported",
	"QUOTA_MODE":                    "not supported",
	"TRACING_ENABLED":               "not supported",
	"GRPC_SERVER_USE_TLS":           "not supported: terminate TLS in front",
}

// SettingsFromEnv reads the settings through getenv (os.Getenv).
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	get := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var errs []string
	boolean := func(name string, def bool) bool {
		v := getenv(name)
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: want true or false, got %q", name, v))
		}
		return b
	}
	s := Settings{
		GRPCAddr:    net.JoinHostPort(get("GRPC_HOST", "0.0.0.0"), get("GRPC_PORT", "8081")),
		HTTPAddr:    net.JoinHostPort(get("HOST", "0.0.0.0"), get("PORT", "8080")),
		MetricsPath: get("PROMETHEUS_PATH", "/metrics"),
	}
	root := get("RUNTIME_ROOT", "/srv/runtime_data/current")
	s.ConfigDir = filepath.Join(root, getenv("RUNTIME_SUBDIRECTORY"), get("RUNTIME_APPDIRECTORY", "config"))
	s.WatchDir = s.ConfigDir
	if boolean("RUNTIME_WATCH_ROOT", true) {
		s.WatchDir = root
	}
	s.Load.IgnoreDotFiles = boolean("RUNTIME_IGNOREDOTFILES", false)
	s.Load.MergeDomains = boolean("MERGE_DOMAIN_CONFIG", false)
	switch f := get("TOLLGATE_RLS_ON_STORE_FAILURE", "fail_open"); f {
	case "fail_open":
	case "fail_closed":
		s.Load.FailClosed = true
	default:
		errs = append(errs, fmt.Sprintf("TOLLGATE_RLS_ON_STORE_FAILURE: want fail_open or fail_closed, got %q", f))
	}
	if boolean("USE_PROMETHEUS", false) {
		s.MetricsAddr = get("PROMETHEUS_ADDR", ":9090")
	}
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		// A float32, as envoyproxy/ratelimit reads it: the near_limit
		// threshold is computed in its precision (see Options).
		r, err := strconv.ParseFloat(v, 32)
		if err != nil || r <= 0 || r > 1 {
			errs = append(errs, fmt.Sprintf("NEAR_LIMIT_RATIO: want a number in (0, 1], got %q", v))
		}
		s.Server.NearLimitRatio = r
	}
	s.Server.ShadowMode = boolean("SHADOW_MODE", false)
	s.Server.Headers = boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false)
	s.Server.LimitHeader = getenv("LIMIT_LIMIT_HEADER")
	s.Server.RemainingHeader = getenv("LIMIT_REMAINING_HEADER")
	s.Server.ResetHeader = getenv("LIMIT_RESET_HEADER")
	s.Server.IETFHeaders = boolean("TOLLGATE_RLS_RATELIMIT_HEADERS", false)
	if v := getenv("TOLLGATE_STORE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Sprintf("TOLLGATE_STORE_TIMEOUT: want a duration such as 20ms, got %q", v))
		}
		s.RedisTimeout = d
	}
	if !boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", true) {
		s.Ignored = append(s.Ignored, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: a request over any limit charges none, always")
	}
	switch b := strings.ToLower(get("BACKEND_TYPE", "redis")); b {
	case "redis":
		s.Backend = "redis"
		if err := s.redis(getenv, get); err != nil {
			errs = append(errs, err.Error())
		}
	case "memory":
		s.Backend = "memory"
	default:
		errs = append(errs, fmt.Sprintf("BACKEND_TYPE: want redis or memory, got %q (memcache is not supported)", b))
	}
	for name, why := range ignoredVars {
		if getenv(name) != "" {
			s.Ignored = append(s.Ignored, name+": "+why)
		}
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("reading the environment: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

// redis reads the Redis settings into a Tollgate store URL.
func (s *Settings) redis(getenv func(string) string, get func(string, string) string) error {
	if u := getenv("TOLLGATE_REDIS_URL"); u != "" {
		s.RedisURL = u
		return nil
	}
	scheme := "redis"
	if b, _ := strconv.ParseBool(getenv("REDIS_TLS")); b {
		scheme = "rediss"
	}
	var user *url.Userinfo
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if u, p, ok := strings.Cut(auth, ":"); ok {
			user = url.UserPassword(u, p)
		} else {
			user = url.UserPassword("", auth)
		}
	}
	addrs := strings.Split(get("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	q := url.Values{}
	switch t := strings.ToUpper(get("REDIS_TYPE", "SINGLE")); t {
	case "SINGLE":
		s.RedisMode = "standalone"
	case "CLUSTER":
		s.RedisMode = "cluster"
	case "SENTINEL":
		// "<master set>,<sentinel>,<sentinel>…"
		s.RedisMode = "sentinel"
		if len(addrs) < 2 {
			return fmt.Errorf("REDIS_URL: a sentinel setting is <master set>,<host:port>[,<host:port>…], got %q", getenv("REDIS_URL"))
		}
		q.Set("master_set", addrs[0])
		addrs = addrs[1:]
	default:
		return fmt.Errorf("REDIS_TYPE: want SINGLE, CLUSTER or SENTINEL, got %q", t)
	}
	if strings.ToLower(get("REDIS_SOCKET_TYPE", "unix")) == "unix" {
		if s.RedisMode != "standalone" {
			return fmt.Errorf("REDIS_SOCKET_TYPE unix takes REDIS_TYPE SINGLE")
		}
		u := url.URL{Scheme: "unix", Path: addrs[0], User: user}
		s.RedisURL = u.String()
		return nil
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := url.URL{Scheme: scheme, Host: addrs[0], User: user, RawQuery: q.Encode()}
	s.RedisURL = u.String()
	return nil
}
