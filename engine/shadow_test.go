package engine_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/policy"
)

// shadowEngine returns an engine on fixture.Shadow over the memory store,
// on a clock that stands still, with its metrics.
func shadowEngine(t *testing.T) (*engine.Engine, *engine.Metrics) {
	t.Helper()
	p := fixture.Parse(t, fixture.Shadow, policy.BuiltinEcho)
	m, err := engine.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := fixture.StillClock()
	return newEngine(t, p, fixture.MemoryStore(t, c.Now), c.Now, func(o *engine.Options) { o.Metrics = m }), m
}

// shadowCounts returns what budget in route group would have refused and
// allowed.
func shadowCounts(m *engine.Metrics, budget, group string) (refused, allowed float64) {
	return counterValue(m.Shadow.WithLabelValues(budget, group, "refused")), counterValue(m.Shadow.WithLabelValues(budget, group, "allowed"))
}

// TestShadowPolicy: a shadow plan of 5 lets 20 requests through and
// counts 15 would-be refusals. (That the responses are those of a plain
// reverse proxy is the gateway's TestShadowPolicy.)
func TestShadowPolicy(t *testing.T) {
	e, m := shadowEngine(t)
	for i := 0; i < 20; i++ {
		if v := get(e, "/api/x", ""); !v.Outcome.Admitted() {
			t.Fatalf("request %d: %v %v", i, v.Outcome, v.Reason)
		}
	}
	if refused, allowed := shadowCounts(m, "trial", "api"); refused != 15 || allowed != 5 {
		t.Fatalf("shadow counted %v refused and %v allowed, want 15 and 5", refused, allowed)
	}
}

// TestShadowCandidate: a candidate limit runs in shadow beside the enforced
// plan: the enforced RateLimit fields and outcomes are unchanged, the
// candidate's would-be refusals are counted.
func TestShadowCandidate(t *testing.T) {
	e, m := shadowEngine(t)
	for i := 0; i < 10; i++ {
		v := get(e, "/cand", "", "X-API-Key", "free-demo-key")
		f, _ := v.RateLimit()
		if v.Outcome != engine.Allowed || !strings.HasPrefix(f.Limit, `"free";r=`) || strings.Contains(f.Policy, "candidate") {
			t.Fatalf("request %d: %v %v, RateLimit %q, RateLimit-Policy %q", i, v.Outcome, v.Reason, f.Limit, f.Policy)
		}
	}
	if n, _ := shadowCounts(m, "candidate.cand", "cand"); n != 7 {
		t.Fatalf("the candidate would have refused %v, want 7", n)
	}
}
