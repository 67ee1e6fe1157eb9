package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/simulate"
)

// historySamples is how many samples the dashboard's history keeps: 15
// minutes at the default interval of one second.
const historySamples = 900

// defaultHistoryInterval is the time between two samples when
// Options.HistoryInterval is zero.
const defaultHistoryInterval = time.Second

// historyTop is how many of the most refused subjects a sample keeps.
const historyTop = 5

// A history keeps the dashboard's recent past in a bounded ring: every
// interval, what the gateway's counters moved by since the last sample,
// as rates, and the states at that time. Its size is fixed (at most
// historySamples samples, each bounded by the policy's route groups, plans
// and shadow budgets, and historyTop subjects), whatever the traffic: the
// gateway's request path never touches it; a goroutine reads the metrics
// registry once an interval.
type history struct {
	mu      sync.Mutex
	ring    []sample // oldest first once full: ring[next:] then ring[:next]
	next    int
	last    counts // the counters at the last sample
	started bool
}

// A sample is the gateway over one interval ending at T (Unix ms). Rates
// are per second; keys of Allowed and Refused are "route group · plan".
type sample struct {
	T        int64              `json:"t"`
	Allowed  map[string]float64 `json:"allowed"`
	Refused  map[string]float64 `json:"refused"`
	Shadow   map[string]float64 `json:"shadow"` // would-refuse by shadow budget
	Fallback float64            `json:"fallback"`
	P50      float64            `json:"p50_ms"` // store latency over the interval
	P99      float64            `json:"p99_ms"`
	Breaker  string             `json:"breaker"` // "" without a shared store
	Top      []topRefusedEntry  `json:"top"`     // most refused in the interval
}

// counts are the cumulative counters a sample is the difference of.
type counts struct {
	t         time.Time
	allowed   map[string]float64
	refused   map[string]float64
	shadow    map[string]float64
	fallback  float64
	latency   []uint64 // the store latency histogram's cumulative bucket counts
	bounds    []float64
	refusedBy map[string]int64 // the top-refused tracker's counts
}

// read collects the counters from the gathered metrics and the
// top-refused tracker's leaders.
func read(now time.Time, mfs []*dto.MetricFamily, top []topRefusedEntry) counts {
	c := counts{t: now, allowed: map[string]float64{}, refused: map[string]float64{}, shadow: map[string]float64{}, refusedBy: map[string]int64{}}
	for _, mf := range mfs {
		if add, ok := countReaders[mf.GetName()]; ok {
			add(&c, mf)
		}
	}
	for _, e := range top {
		c.refusedBy[e.Subject] = e.Count
	}
	return c
}

// countReaders add each metric family read takes to the counts, by the
// family's name.
var countReaders = map[string]func(*counts, *dto.MetricFamily){
	"tollgate_decisions_total":          (*counts).addDecisions,
	"tollgate_shadow_decisions_total":   (*counts).addShadow,
	"tollgate_fallback_decisions_total": (*counts).addFallbacks,
	"tollgate_store_duration_seconds":   (*counts).addStoreLatency,
}

// addDecisions adds the allowed and refused decisions, by route group and
// plan.
func (c *counts) addDecisions(mf *dto.MetricFamily) {
	for _, m := range mf.GetMetric() {
		l := labels(m)
		k := l["route_group"] + " · " + l["plan"]
		switch l["outcome"] {
		case "allowed":
			c.allowed[k] += m.GetCounter().GetValue()
		case "refused":
			c.refused[k] += m.GetCounter().GetValue()
		}
	}
}

// addShadow adds the shadow refusals, by budget.
func (c *counts) addShadow(mf *dto.MetricFamily) {
	for _, m := range mf.GetMetric() {
		if l := labels(m); l["outcome"] == "refused" {
			c.shadow[l["budget"]] += m.GetCounter().GetValue()
		}
	}
}

// addFallbacks adds the decisions taken by the fallback store.
func (c *counts) addFallbacks(mf *dto.MetricFamily) {
	for _, m := range mf.GetMetric() {
		c.fallback += m.GetCounter().GetValue()
	}
}

// addStoreLatency takes the store latency histogram's cumulative bucket
// counts and bounds.
func (c *counts) addStoreLatency(mf *dto.MetricFamily) {
	if ms := mf.GetMetric(); len(ms) > 0 {
		for _, b := range ms[0].GetHistogram().GetBucket() {
			c.latency = append(c.latency, b.GetCumulativeCount())
			c.bounds = append(c.bounds, b.GetUpperBound())
		}
	}
}

func labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// add records the sample that takes the history from its last counts to
// c, with the breaker's state at c's time. The first call only sets the
// baseline.
func (h *history) add(c counts, breaker string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.last, h.started = c, true
		return
	}
	p := h.last
	h.last = c
	secs := c.t.Sub(p.t).Seconds()
	if secs <= 0 {
		return
	}
	s := sample{T: c.t.UnixMilli(), Breaker: breaker,
		Allowed: rates(c.allowed, p.allowed, secs), Refused: rates(c.refused, p.refused, secs), Shadow: rates(c.shadow, p.shadow, secs),
		Fallback: max(0, c.fallback-p.fallback) / secs}
	if len(c.latency) == len(p.latency) {
		delta := make([]uint64, len(c.latency))
		for i := range delta {
			delta[i] = c.latency[i] - min(c.latency[i], p.latency[i])
		}
		s.P50, s.P99 = bucketQuantile(delta, c.bounds, 0.5)*1000, bucketQuantile(delta, c.bounds, 0.99)*1000
	}
	s.Top = topRefusedSince(c.refusedBy, p.refusedBy)
	if len(h.ring) < historySamples {
		h.ring = append(h.ring, s)
		return
	}
	h.ring[h.next] = s
	h.next = (h.next + 1) % historySamples
}

// topRefusedSince returns the subjects refused more in now than in before,
// by how many more, most first (then by subject), at most historyTop.
func topRefusedSince(now, before map[string]int64) []topRefusedEntry {
	var top []topRefusedEntry
	for subject, n := range now {
		if d := n - before[subject]; d > 0 {
			top = append(top, topRefusedEntry{subject, d})
		}
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Count != top[j].Count {
			return top[i].Count > top[j].Count
		}
		return top[i].Subject < top[j].Subject
	})
	if len(top) > historyTop {
		top = top[:historyTop]
	}
	return top
}

// rates returns, per key, how fast now moved on from before over secs
// seconds; a counter that went back (a restart) counts from zero.
func rates(now, before map[string]float64, secs float64) map[string]float64 {
	out := make(map[string]float64, len(now))
	for k, v := range now {
		d := v - before[k]
		if d < 0 {
			d = v
		}
		out[k] = d / secs
	}
	return out
}

// bucketQuantile estimates a quantile from per-interval cumulative bucket
// counts: the upper bound of the bucket it falls in, 0 without
// observations.
func bucketQuantile(cum []uint64, bounds []float64, q float64) float64 {
	if len(cum) == 0 || cum[len(cum)-1] == 0 {
		return 0
	}
	n := float64(cum[len(cum)-1])
	for i, c := range cum {
		if float64(c) >= q*n {
			return bounds[i]
		}
	}
	return bounds[len(bounds)-1]
}

// since returns the samples after t (Unix ms), oldest first.
func (h *history) since(t int64) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]sample, 0, len(h.ring))
	for _, s := range append(h.ring[h.next:len(h.ring):len(h.ring)], h.ring[:h.next]...) {
		if s.T > t {
			out = append(out, s)
		}
	}
	return out
}

// sampleHistory adds a sample to the history every interval until ctx is
// done.
func (g *Gateway) sampleHistory(ctx context.Context) {
	tick := time.NewTicker(g.historyInterval())
	defer tick.Stop()
	for {
		g.takeSample(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (g *Gateway) historyInterval() time.Duration {
	if g.opts.HistoryInterval > 0 {
		return g.opts.HistoryInterval
	}
	return defaultHistoryInterval
}

// takeSample reads the metrics and adds what moved since the last sample.
func (g *Gateway) takeSample(now time.Time) {
	mfs, _ := g.registry.Gather()
	var top []topRefusedEntry
	for _, t := range g.metrics.TopRefused.Top(historyTop * 4) {
		top = append(top, topRefusedEntry{t.Subject, t.Count})
	}
	breaker := ""
	if b, ok := g.store.(interface{ State() string }); ok {
		breaker = b.State()
	}
	g.past.add(read(now, mfs, top), breaker)
}

// dashboardHistory answers GET /dashboard/history?since=<Unix ms>: the
// samples after since (all that are kept without it), oldest first.
func (g *Gateway) dashboardHistory(w http.ResponseWriter, r *http.Request) {
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			http.Error(w, "since: want Unix milliseconds", http.StatusBadRequest)
			return
		}
		since = n
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(struct {
		Interval int64    `json:"interval_ms"`
		Samples  []sample `json:"samples"`
	}{g.historyInterval().Milliseconds(), g.past.since(since)})
}

// recordingExport answers GET /recording: the recent calls the gateway
// recorded, oldest first, as JSON lines (simulate.ReadRecords reads
// them; tollgate simulate replays them under a candidate policy). 404
// without a recording.
func (g *Gateway) recordingExport(w http.ResponseWriter, r *http.Request) {
	if g.recording == nil {
		http.Error(w, "this gateway keeps no recording (gateway.Options.RecordSize is negative)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	simulate.WriteRecords(w, g.recording.Records())
}

// errSimulateBudget is the cause of a replay stopped at its budget.
var errSimulateBudget = errors.New("the replay's budget ran out")

// maxCandidate bounds the policy a /simulate request may carry.
const maxCandidate = 1 << 20

// readCandidate reads the candidate policy of a POST /simulate,
// {"policy": "<YAML>"}, and compiles it; it answers a body that is not
// that (400) or a candidate that does not compile (422, with its
// problems), and then reports false.
func readCandidate(w http.ResponseWriter, r *http.Request) (*policy.Policy, bool) {
	var body struct {
		Policy string `json:"policy"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCandidate))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Policy == "" {
		http.Error(w, `want {"policy": "<the candidate policy's YAML>"}`, http.StatusBadRequest)
		return nil, false
	}
	// The candidate comes from a request (the dashboard posts whatever a
	// #try= link holds): it opens no file, and reads no environment
	// variable (each reads as one placeholder), so that its errors tell
	// nothing of the process. Its keys do not matter to a
	// replay, which takes each call's plan from the recording.
	env := policy.ProcessEnv()
	env.NoFiles, env.Blind = true, true
	cand, err := policy.ParseEnv([]byte(body.Policy), "candidate", env)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return nil, false
	}
	return cand, true
}

// simulateCandidate answers POST /simulate, {"policy": "<YAML>"}: the
// recording replayed under the policy served and under the candidate
// (simulate.Compare), as JSON. A candidate that does not compile is a 422
// with its problems.
func (g *Gateway) simulateCandidate(w http.ResponseWriter, r *http.Request) {
	// A replay takes a core for a moment: one at a time.
	if !g.simulating.TryLock() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "a simulation is running; try again in a moment", http.StatusServiceUnavailable)
		return
	}
	defer g.simulating.Unlock()
	if g.recording == nil {
		http.Error(w, "this gateway keeps no recording (gateway.Options.RecordSize is negative)", http.StatusNotFound)
		return
	}
	cand, ok := readCandidate(w, r)
	if !ok {
		return
	}
	budget := g.opts.SimulateBudget
	if budget <= 0 {
		budget = DefaultSimulateBudget
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), budget, errSimulateBudget)
	defer cancel()
	rep, err := simulate.Compare(ctx, g.active.Load().pol, cand, g.recording.Records())
	switch {
	case errors.Is(err, errSimulateBudget):
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:simulate-budget", Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("the replay ran past its budget of %v (gateway.Options.SimulateBudget) and was stopped: %v", budget, err)})
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(rep)
}
