package envoyrls

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are envoyproxy/ratelimit's statistics as Prometheus counters,
// under the names its statsd exporter mapping gives them
// (ratelimit_service_rate_limit_total_hits and so on, labelled domain,
// key1 and key2: the first two levels of the descriptor), with the whole
// descriptor key as a fourth label, descriptor. The descriptor key is the
// configured path (key_value or key per level); a descriptor with
// detailed_metric (or a level with value_to_metric) puts the request's
// values in it, as envoyproxy/ratelimit does, and then its series grow
// with the values requests carry: up to maxDetailedKeys such keys, each
// of at most maxDetailedKeyLen bytes, after which a descriptor is counted
// under its configured key. A limit override is counted under its
// descriptor keys, in the same bound, and past it as "<domain>._other".
type Metrics struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode *prometheus.CounterVec
	// DomainNotFound counts the descriptors of requests for a domain not
	// configured (envoyproxy/ratelimit looks each up, and counts each).
	DomainNotFound *prometheus.CounterVec
	// ConfigLoads counts configuration loads by result (success, error).
	ConfigLoads *prometheus.CounterVec
	// XDSConfig is 1 for the version of the xDS configuration served
	// (tollgate_rls_xds_config_info{version}); it has no series while
	// none is.
	XDSConfig *prometheus.GaugeVec
	// Errors counts ShouldRateLimit calls answered with an error, by type
	// (service_error: a request that cannot be decided; store_error: the
	// store failed and the domain fails closed).
	Errors *prometheus.CounterVec
	// GlobalShadowMode counts requests SHADOW_MODE let through over a
	// limit.
	GlobalShadowMode prometheus.Counter

	cache    sync.Map     // descriptor key → *statCounters
	unknown  sync.Map     // domains not configured with a series of their own
	unknownN atomic.Int64 // how many
}

// maxUnknownDomains bounds the domain_not_found series: a domain is
// request data (Envoy names its own, but any gRPC caller may name any),
// so past the first this many, unknown domains are counted as one.
const maxUnknownDomains = 100

// notFoundLabel returns the domain_not_found label of domain: itself for
// the first maxUnknownDomains domains of at most maxDetailedKeyLen bytes,
// else "_other".
func (m *Metrics) notFoundLabel(domain string) string {
	if len(domain) > maxDetailedKeyLen {
		return "_other"
	}
	if _, ok := m.unknown.Load(domain); ok {
		return domain
	}
	if m.unknownN.Add(1) > maxUnknownDomains {
		m.unknownN.Add(-1)
		return "_other"
	}
	m.unknown.Store(domain, struct{}{})
	return domain
}

// The bounds of the names made of request data (a descriptor's values
// with detailed_metric or value_to_metric, a limit override's keys):
// a client sending new ones each time must not make a series of each,
// nor a budget label, nor counters kept here.
const (
	maxDetailedKeys   = 10_000
	maxDetailedKeyLen = 256
)

// requestNames bounds the names made of request data: the first
// maxDetailedKeys of them, each of at most maxDetailedKeyLen bytes, are
// theirs; any other is counted under a name of the configuration's.
type requestNames struct {
	seen sync.Map // name → struct{}
	n    atomic.Int64
}

// name returns key, a name made of request data, if it is one of the
// bounded set or may join it, else other. Concurrent first uses of one
// key may count it more than once: the bound holds, a little early.
func (r *requestNames) name(key, other string) string {
	if len(key) > maxDetailedKeyLen {
		return other
	}
	if _, ok := r.seen.Load(key); ok {
		return key
	}
	if r.n.Add(1) > maxDetailedKeys {
		r.n.Add(-1)
		return other
	}
	r.seen.Store(key, struct{}{})
	return key
}

// statCounters are one descriptor key's counters.
type statCounters struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"domain", "key1", "key2", "descriptor"}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, labels)
	}
	m := &Metrics{
		TotalHits:   vec("total_hits", "Hits (hits_addend summed) on a descriptor's limit."),
		OverLimit:   vec("over_limit", "Hits over a descriptor's limit."),
		NearLimit:   vec("near_limit", "Hits within a descriptor's limit past NEAR_LIMIT_RATIO of it."),
		WithinLimit: vec("within_limit", "Hits within a descriptor's limit."),
		ShadowMode:  vec("shadow_mode", "Hits over a shadow_mode descriptor's limit, let through."),
		DomainNotFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_domain_not_found", Help: "Descriptors of requests for a domain not configured.",
		}, []string{"domain"}),
		ConfigLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_total", Help: "Configuration loads by result (success, error).",
		}, []string{"result"}),
		XDSConfig: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_rls_xds_config_info", Help: "The xDS configuration served (1) by version.",
		}, []string{"version"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error", Help: "ShouldRateLimit calls answered with an error, by type.",
		}, []string{"err_type"}),
		GlobalShadowMode: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_global_shadow_mode", Help: "Requests over a limit let through by SHADOW_MODE.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.TotalHits, m.OverLimit, m.NearLimit, m.WithinLimit, m.ShadowMode, m.DomainNotFound, m.ConfigLoads, m.XDSConfig, m.Errors, m.GlobalShadowMode} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering rate-limit service metrics: %w", err)
			}
		}
	}
	return m, nil
}

// counters returns the counters of a descriptor key ("<domain>.<path>").
func (m *Metrics) counters(domain, key string) *statCounters {
	if c, ok := m.cache.Load(key); ok {
		return c.(*statCounters)
	}
	path := strings.TrimPrefix(key, domain+".")
	parts := strings.SplitN(path, ".", 3)
	k1, k2 := parts[0], ""
	if len(parts) > 1 {
		k2 = parts[1]
	}
	lv := []string{domain, k1, k2, path}
	c := &statCounters{
		totalHits:   m.TotalHits.WithLabelValues(lv...),
		overLimit:   m.OverLimit.WithLabelValues(lv...),
		nearLimit:   m.NearLimit.WithLabelValues(lv...),
		withinLimit: m.WithinLimit.WithLabelValues(lv...),
		shadowMode:  m.ShadowMode.WithLabelValues(lv...),
	}
	got, _ := m.cache.LoadOrStore(key, c)
	return got.(*statCounters)
}

// record counts one descriptor's hits as envoyproxy/ratelimit does: with
// limit L, the near threshold N = floor(L × ratio) (see nearThreshold),
// and the count before
// and after the hits, over_limit gets the hits past L, near_limit those
// past N up to L, within_limit every hit of a descriptor within its
// limit, and shadow_mode the hits past L of a shadow descriptor. A
// request refused charges nothing, so after is what it would have made.
func (c *statCounters) record(hits, limit, before uint64, over, shadow bool, ratio float64) {
	near := nearThreshold(limit, ratio)
	after := before + hits
	c.totalHits.Add(float64(hits))
	if over {
		overHits := hits
		if before < limit {
			overHits = after - limit
			c.nearLimit.Add(float64(limit - max(near, before)))
		}
		c.overLimit.Add(float64(overHits))
		if shadow {
			c.shadowMode.Add(float64(overHits))
		}
		return
	}
	c.withinLimit.Add(float64(hits))
	if after > near {
		if before >= near {
			c.nearLimit.Add(float64(hits))
		} else {
			c.nearLimit.Add(float64(after - near))
		}
	}
}

// nearThreshold is the count past which hits are near_limit, computed as
// envoyproxy/ratelimit computes it: floor(L × ratio) in single precision,
// its NEAR_LIMIT_RATIO being a float32. In double precision the product
// differs for some limits (90 × 0.7 is 62.99…, 63 in single precision),
// and so would the near_limit counts of a migrated service.
func nearThreshold(limit uint64, ratio float64) uint64 {
	return uint64(math.Floor(float64(float32(limit) * float32(ratio))))
}
