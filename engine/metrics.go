package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the engine's Prometheus metrics. Every label value comes
// from the policy (budget, route group and plan names) or a fixed set
// (outcome, mode), never from a request, so cardinality is bounded by the
// configuration. The budget label is a budget's header name, as
// RateLimit-Policy lists it ("free.minute", "global.search"), or one of
// the checks that are not budgets ("concurrency.<group>", "login_lock",
// "login_body", "jwks": a bearer JWT its JWKS cannot check).
type Metrics struct {
	// Decisions counts decisions by budget, route group, plan and outcome
	// (allowed, refused, invalid_key, fail_open, fail_closed).
	Decisions *prometheus.CounterVec
	// StoreLatency observes the duration of store calls.
	StoreLatency prometheus.Histogram
	// StoreErrors counts failed store calls by budget.
	StoreErrors *prometheus.CounterVec
	// Fallbacks counts decisions taken without the store, by budget and
	// mode (fail_open: decided by the local fallback; fail_closed: refused).
	Fallbacks *prometheus.CounterVec
	// Shadow counts shadow decisions by budget, route group and outcome
	// (allowed, or refused: what the budget would have refused).
	Shadow *prometheus.CounterVec
	// DenyHits counts refusals answered from the deny cache without a
	// store call.
	DenyHits prometheus.Counter
	// Settles counts token calls' settles by route group, plan and
	// outcome (settled, exact, unreported, capped, impossible, fallback,
	// expired, repeated, failed).
	Settles *prometheus.CounterVec
	// Tokens counts token budgets' tokens by budget, route group, plan
	// and kind: estimated when charged, settled (what they came to),
	// refunded (estimated but not used) and debt (used beyond the
	// estimate).
	Tokens *prometheus.CounterVec
	// AdaptiveLimit, AdaptiveMinRTT and AdaptiveInFlight are each
	// upstream's adaptive concurrency limit, its measured minimum RTT
	// (seconds) and its requests in flight, by upstream (scheme and host,
	// from the policy); the limit's refusals are Decisions of budget
	// adaptive.<group>, by plan.
	AdaptiveLimit, AdaptiveMinRTT, AdaptiveInFlight *prometheus.GaugeVec
	// TopRefused tracks the most refused subjects (pseudonyms) for the
	// dashboard; it is not a Prometheus metric, so it adds no series.
	TopRefused *TopRefused
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_decisions_total",
			Help: "Rate-limit decisions by budget, route group, plan and outcome.",
		}, []string{"budget", "route_group", "plan", "outcome"}),
		StoreLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_store_duration_seconds",
			Help:    "Duration of rate-limit store calls.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_store_errors_total",
			Help: "Failed rate-limit store calls by budget.",
		}, []string{"budget"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_fallback_decisions_total",
			Help: "Decisions taken while the store was unavailable, by budget and mode.",
		}, []string{"budget", "mode"}),
		Shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_shadow_decisions_total",
			Help: "Decisions of shadow budgets (never enforced) by budget, route group and outcome.",
		}, []string{"budget", "route_group", "outcome"}),
		DenyHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_deny_cache_hits_total",
			Help: "Refusals answered from the local deny cache without a store call.",
		}),
		Settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_llm_settles_total",
			Help: "Settles of token calls by route group, plan and outcome.",
		}, []string{"route_group", "plan", "outcome"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_llm_tokens_total",
			Help: "Tokens of token budgets by budget, route group, plan and kind (estimated, settled, refunded, debt).",
		}, []string{"budget", "route_group", "plan", "kind"}),
		AdaptiveLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_adaptive_limit",
			Help: "The adaptive concurrency limit of each upstream.",
		}, []string{"upstream"}),
		AdaptiveMinRTT: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_adaptive_min_rtt_seconds",
			Help: "The minimum latency each upstream's adaptive limit measured.",
		}, []string{"upstream"}),
		AdaptiveInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_adaptive_in_flight",
			Help: "The requests in flight under each upstream's adaptive limit.",
		}, []string{"upstream"}),
		TopRefused: NewTopRefused(512),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Decisions, m.StoreLatency, m.StoreErrors, m.Fallbacks, m.Shadow, m.DenyHits, m.Settles, m.Tokens, m.AdaptiveLimit, m.AdaptiveMinRTT, m.AdaptiveInFlight} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering metrics: %w", err)
			}
		}
	}
	return m, nil
}
