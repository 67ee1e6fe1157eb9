package gateway

import (
	"embed"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate/policy"
)

//go:embed dashboard/index.html
var dashboardFS embed.FS

// dashboardData is what /dashboard/data returns: cumulative counters (the
// page turns them into rates) and current states.
type dashboardData struct {
	Time       time.Time          `json:"time"`
	Version    string             `json:"version"`
	Hash       string             `json:"hash"`
	Breaker    string             `json:"breaker"` // closed, half-open, open, or "" without a shared store
	Decisions  []labelled         `json:"decisions"`
	Shadow     []labelled         `json:"shadow"`
	Fallbacks  []labelled         `json:"fallbacks"`
	StoreCalls uint64             `json:"store_calls"`
	StoreP50   float64            `json:"store_p50_ms"`
	StoreP99   float64            `json:"store_p99_ms"`
	TopRefused []topRefusedEntry  `json:"top_refused"`
	Totals     map[string]float64 `json:"totals"`
	Tokens     []tokenGroup       `json:"tokens,omitempty"` // by route group; none without token routes
}

// A tokenGroup is a token route group's token budgets and settles, as
// cumulative counts. A call is charged to each of its plan's token
// budgets, which count the same tokens (a minute's and a day's) or a part
// of them (the input's, a model's): each kind of tokens is, for each
// plan, the largest of its budgets' counts, summed over the plans.
type tokenGroup struct {
	Group     string             `json:"route_group"`
	Estimated float64            `json:"estimated"`
	Settled   float64            `json:"settled"`
	Refunded  float64            `json:"refunded"`
	Debt      float64            `json:"debt"`
	Settles   map[string]float64 `json:"settles"` // by outcome
}

type labelled struct {
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value"`
}

type topRefusedEntry struct {
	Subject string `json:"subject"`
	Count   int64  `json:"count"`
}

func (g *Gateway) dashboardPage(w http.ResponseWriter, r *http.Request) {
	b, _ := dashboardFS.ReadFile("dashboard/index.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline'; "+noFraming)
	w.Write(b)
}

func (g *Gateway) dashboardData(w http.ResponseWriter, r *http.Request) {
	a := g.active.Load()
	d := dashboardData{Time: time.Now().UTC(), Version: a.pol.Version, Hash: a.pol.Hash, Totals: map[string]float64{}, Tokens: tokenGroups(a.pol)}
	if b, ok := g.store.(interface{ State() string }); ok {
		d.Breaker = b.State()
	}
	mfs, _ := g.registry.Gather()
	for _, mf := range mfs {
		if take, ok := dashboardReaders[mf.GetName()]; ok {
			take(&d, mf)
		}
	}
	for _, t := range g.metrics.TopRefused.Top(10) {
		d.TopRefused = append(d.TopRefused, topRefusedEntry{t.Subject, t.Count})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(d)
}

// dashboardReaders take each metric family the dashboard shows into its
// data, by the family's name.
var dashboardReaders = map[string]func(*dashboardData, *dto.MetricFamily){
	"tollgate_decisions_total":          (*dashboardData).takeDecisions,
	"tollgate_shadow_decisions_total":   (*dashboardData).takeShadow,
	"tollgate_fallback_decisions_total": (*dashboardData).takeFallbacks,
	"tollgate_store_calls_total":        (*dashboardData).takeStoreCalls,
	"tollgate_store_duration_seconds":   (*dashboardData).takeStoreLatency,
	"tollgate_llm_settles_total":        (*dashboardData).takeSettles,
	"tollgate_llm_tokens_total":         (*dashboardData).takeTokens,
}

// tokenGroups returns a tokenGroup at zero for each route group of p
// with a token route, by name.
func tokenGroups(p *policy.Policy) []tokenGroup {
	var out []tokenGroup
	seen := map[string]bool{}
	for _, r := range p.Routes {
		if r.Tokens != nil && !seen[r.Group] {
			seen[r.Group] = true
			out = append(out, tokenGroup{Group: r.Group, Settles: map[string]float64{}})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// tokensOf returns the token route group named group, nil if the
// policy has none (a group of an earlier policy).
func (d *dashboardData) tokensOf(group string) *tokenGroup {
	for i := range d.Tokens {
		if d.Tokens[i].Group == group {
			return &d.Tokens[i]
		}
	}
	return nil
}

// takeSettles takes the token calls' settles, by route group and outcome.
func (d *dashboardData) takeSettles(mf *dto.MetricFamily) {
	for _, m := range mf.GetMetric() {
		l := labels(m)
		if tg := d.tokensOf(l["route_group"]); tg != nil {
			tg.Settles[l["outcome"]] += m.GetCounter().GetValue()
		}
	}
}

// takeTokens takes the token budgets' tokens by route group and kind:
// for each plan its largest budget's (see tokenGroup).
func (d *dashboardData) takeTokens(mf *dto.MetricFamily) {
	largest := map[[3]string]float64{} // by route group, plan and kind
	for _, m := range mf.GetMetric() {
		l := labels(m)
		k := [3]string{l["route_group"], l["plan"], l["kind"]}
		largest[k] = max(largest[k], m.GetCounter().GetValue())
	}
	for k, v := range largest {
		tg := d.tokensOf(k[0])
		if tg == nil {
			continue
		}
		switch k[2] {
		case "estimated":
			tg.Estimated += v
		case "settled":
			tg.Settled += v
		case "refunded":
			tg.Refunded += v
		case "debt":
			tg.Debt += v
		}
	}
}

// takeDecisions takes the decisions, and totals them by outcome.
func (d *dashboardData) takeDecisions(mf *dto.MetricFamily) {
	d.Decisions = counters(mf)
	for _, c := range d.Decisions {
		d.Totals[c.Labels["outcome"]] += c.Value
	}
}

// takeShadow takes the shadow decisions.
func (d *dashboardData) takeShadow(mf *dto.MetricFamily) { d.Shadow = counters(mf) }

// takeFallbacks takes the decisions of the fallback store.
func (d *dashboardData) takeFallbacks(mf *dto.MetricFamily) { d.Fallbacks = counters(mf) }

// takeStoreCalls takes the count of store calls.
func (d *dashboardData) takeStoreCalls(mf *dto.MetricFamily) {
	if m := mf.GetMetric(); len(m) > 0 {
		d.StoreCalls = uint64(m[0].GetCounter().GetValue())
	}
}

// takeStoreLatency takes the store latency's median and 99th percentile,
// in milliseconds.
func (d *dashboardData) takeStoreLatency(mf *dto.MetricFamily) {
	if m := mf.GetMetric(); len(m) > 0 {
		h := m[0].GetHistogram()
		d.StoreP50, d.StoreP99 = quantile(h, 0.5)*1000, quantile(h, 0.99)*1000
	}
}

// counters returns the metric family's counters with their labels, the
// largest first.
func counters(mf *dto.MetricFamily) []labelled {
	var out []labelled
	for _, m := range mf.GetMetric() {
		l := labelled{Labels: map[string]string{}, Value: m.GetCounter().GetValue()}
		for _, lp := range m.GetLabel() {
			l.Labels[lp.GetName()] = lp.GetValue()
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value > out[j].Value })
	return out
}

// quantile estimates a quantile from histogram buckets (the upper bound of
// the bucket it falls in), 0 without observations.
func quantile(h *dto.Histogram, q float64) float64 {
	n := float64(h.GetSampleCount())
	if n == 0 {
		return 0
	}
	for _, b := range h.GetBucket() {
		if float64(b.GetCumulativeCount()) >= q*n {
			if math.IsInf(b.GetUpperBound(), 1) {
				break
			}
			return b.GetUpperBound()
		}
	}
	bs := h.GetBucket()
	if len(bs) > 0 {
		return bs[len(bs)-1].GetUpperBound()
	}
	return 0
}
