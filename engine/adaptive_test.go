package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fixture"
)

// adaptiveEngine returns an engine on the quickstart whose export route
// has the adaptive block given, on clock c, with its metrics.
func adaptiveEngine(t *testing.T, block string, c *fixture.Clock) (*engine.Engine, *engine.Metrics) {
	t.Helper()
	p := fixture.Quickstart(t, "    cost: 10\n", "    cost: 10\n    adaptive: "+block+"\n",
		"    upstream: builtin:echo          # the demo upstream sleeps for ?sleep=2s\n    concurrency: {limit: 10}\n",
		"    upstream: http://reports.internal\n    concurrency: {limit: 10}\n    adaptive: {min_limit: 20, max_limit: 20}\n")
	m, err := engine.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, p, fixture.MemoryStore(t, c.Now), c.Now, func(o *engine.Options) { o.Metrics = m }), m
}

// hold decides a GET of path with the API key given ("" for none) and
// returns its verdict, not Done: an admitted call stays in flight.
func hold(e *engine.Engine, path, key string) *engine.Verdict {
	var h []string
	if key != "" {
		h = []string{"X-API-Key", key}
	}
	return e.Decide(context.Background(), request(http.MethodGet, path, "", "", h...))
}

func gaugeValue(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// TestAdaptiveShares: at a limit of 10 (min_limit = max_limit), pro is
// guaranteed 6 and free 2, each borrows what is left unused, and the
// anonymous plan, with no share, only borrows: when the limit binds, the
// plans with less share are refused first, with ReasonOverload and a
// Retry-After, and charged nothing.
func TestAdaptiveShares(t *testing.T) {
	const block = "{min_limit: 10, max_limit: 10, shares: {pro: 0.6, free: 0.2}}"
	pro, free, anon := fixture.ProKey, fixture.FreeKey, ""
	for _, tc := range []struct {
		name, reason string
		held         map[string]int // in flight per key
		key          string
		admitted     bool
	}{
		{name: "idle", reason: "an idle limit admits anyone", key: anon, admitted: true},
		{name: "anonymous borrows", reason: "anonymous may use the 2 slots no plan is guaranteed", held: map[string]int{anon: 1}, key: anon, admitted: true},
		{name: "anonymous is shed first", reason: "anonymous holds the 2 shared slots: pro's 6 and free's 2 are theirs", held: map[string]int{anon: 2}, key: anon, admitted: false},
		{name: "free within its share", reason: "free is guaranteed 2 whatever anonymous holds", held: map[string]int{anon: 2, free: 1}, key: free, admitted: true},
		{name: "free past its share", reason: "free holds its 2 and the 2 shared: pro's 6 are pro's", held: map[string]int{free: 4}, key: free, admitted: false},
		{name: "pro within its share", reason: "pro is guaranteed 6 while free and anonymous fill the rest", held: map[string]int{free: 2, anon: 2, pro: 5}, key: pro, admitted: true},
		{name: "pro borrows", reason: "pro past its 6 borrows the 2 no plan is guaranteed", held: map[string]int{pro: 7}, key: pro, admitted: true},
		{name: "pro leaves free's", reason: "pro holds 8: free's unused 2 are free's", held: map[string]int{pro: 8}, key: pro, admitted: false},
		{name: "the limit binds all", reason: "10 in flight: even pro is refused", held: map[string]int{pro: 6, free: 4}, key: pro, admitted: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fixture.StillClock()
			e, m := adaptiveEngine(t, block, c)
			var vs []*engine.Verdict
			for key, n := range tc.held {
				for range n {
					v := hold(e, "/api/export", key)
					if !v.Outcome.Admitted() {
						t.Fatalf("holding %d of %q: refused, %v", n, key, v.Reason)
					}
					vs = append(vs, v)
				}
			}
			v := hold(e, "/api/export", tc.key)
			if got := v.Outcome.Admitted(); got != tc.admitted {
				t.Fatalf("admitted %v (%v %v), want %v: %s", got, v.Outcome, v.Reason, tc.admitted, tc.reason)
			}
			if !tc.admitted {
				if v.Reason != engine.ReasonOverload || v.RetryDelay() != time.Second || len(v.Charges) != 0 {
					t.Errorf("refused for %v, retry in %v, charged %d budgets; want ReasonOverload, 1s, none", v.Reason, v.RetryDelay(), len(v.Charges))
				}
				plan := map[string]string{pro: "pro", free: "free", anon: "anonymous"}[tc.key]
				if n := counterValue(m.Decisions.WithLabelValues("adaptive.export", "export", plan, "refused")); n != 1 {
					t.Errorf("counted %v refusals of %s, want 1", n, plan)
				}
			}
			for _, v := range append(vs, v) {
				v.Done(context.Background())
			}
			if n := gaugeValue(m.AdaptiveInFlight.WithLabelValues("builtin:echo")); n != 0 {
				t.Errorf("%v in flight once every call is done, want 0", n)
			}
		})
	}
}

// TestAdaptiveShadow: in shadow the limit admits everything, and counts
// what it would have refused.
func TestAdaptiveShadow(t *testing.T) {
	e, m := adaptiveEngine(t, "{min_limit: 3, max_limit: 3, shadow: true}", fixture.StillClock())
	for i := range 5 {
		if v := hold(e, "/api/export", fixture.ProKey); !v.Outcome.Admitted() {
			t.Fatalf("call %d refused in shadow: %v", i, v.Reason)
		}
	}
	refused, allowed := shadowCounts(m, "adaptive.export", "export")
	if refused != 2 || allowed != 3 {
		t.Fatalf("shadow counted %v refused and %v allowed, want 2 and 3", refused, allowed)
	}
	if n := gaugeValue(m.AdaptiveInFlight.WithLabelValues("builtin:echo")); n != 5 {
		t.Errorf("%v in flight, want 5: a call admitted in shadow is in flight", n)
	}
}

// TestAdaptiveGivenBack: a call the adaptive limit admits and a later
// step refuses (here the route's concurrency limit per subject) gives its
// slot back.
func TestAdaptiveGivenBack(t *testing.T) {
	e, m := adaptiveEngine(t, "{}", fixture.StillClock())
	for i := range 10 {
		if v := hold(e, "/api/reports", fixture.ProKey); !v.Outcome.Admitted() {
			t.Fatalf("call %d refused: %v", i, v.Reason)
		}
	}
	for i := range 3 {
		if v := hold(e, "/api/reports", fixture.ProKey); !refusedBy(v, engine.ReasonConcurrency) {
			t.Fatalf("call %d past the 10: %v %v, want refused by the concurrency limit", 11+i, v.Outcome, v.Reason)
		}
	}
	if n := gaugeValue(m.AdaptiveInFlight.WithLabelValues("http://reports.internal")); n != 10 {
		t.Errorf("%v in flight under the adaptive limit, want the 10 admitted: a refused call gives its slot back", n)
	}
}

// TestAdaptiveSample: a call's latency sample is the time from its
// admission to its status (Answered), not to its end (Done), and only a
// status that says how long the upstream took is one.
func TestAdaptiveSample(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name, reason string
		status       int           // 0: Done unanswered
		want         time.Duration // the minimum RTT measured, 0 for none
	}{
		{name: "answered", reason: "200 after 40 ms, then 2 s of streaming: the sample is 40 ms", status: 200, want: 40 * ms},
		{name: "client error", reason: "a 404 took the upstream 40 ms too", status: 404, want: 40 * ms},
		{name: "timeout", reason: "a 504 is a deadline passed: as slow as it got", status: 504, want: 40 * ms},
		{name: "failed", reason: "a 502 is a failure answered at once, nothing of the upstream's queue", status: 502},
		{name: "unanswered", reason: "a client gone before the answer says nothing of the upstream", status: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fixture.StillClock()
			e, m := adaptiveEngine(t, "{min_rtt_samples: 1}", c)
			v := hold(e, "/api/export", fixture.ProKey)
			c.Add(40 * ms)
			if tc.status != 0 {
				v.Answered(context.Background(), tc.status)
			}
			c.Add(2 * time.Second)
			v.Done(context.Background())
			got := time.Duration(gaugeValue(m.AdaptiveMinRTT.WithLabelValues("builtin:echo")) * float64(time.Second))
			if got.Round(ms) != tc.want {
				t.Errorf("min RTT %v, want %v: %s", got, tc.want, tc.reason)
			}
		})
	}
}
