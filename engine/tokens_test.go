package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
)

const tokenPolicy = `version: t1
identity: {secret: 0123456789abcdef0123}
plans:
  free:
    limits:
      - {name: rpm, algorithm: fixed_window, rate: 100, period: 1m}
      - {name: tpm, rate: 10000, period: 1m, unit: tokens}
      - {name: out, algorithm: fixed_window, rate: 5000, period: 1m, unit: output_tokens, models: [big], per_model: true}
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: builtin:echo, tokens: {bytes_per_input_token: 0, max_usage: 50000}}
  - {name: other, path: /, upstream: builtin:echo}
`

type tokenHarness struct {
	e     *engine.Engine
	store *memory.Store
	now   time.Time
	mt    *engine.Metrics
}

func newTokenHarness(t *testing.T) *tokenHarness {
	t.Helper()
	p, err := policy.Parse([]byte(tokenPolicy), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := &tokenHarness{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	h.store = memory.New(memory.Options{Now: func() time.Time { return h.now }, SweepInterval: -1})
	t.Cleanup(func() { h.store.Close() })
	if h.mt, err = engine.NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	h.e = newEngine(t, p, h.store, func() time.Time { return h.now }, func(o *engine.Options) { o.Metrics = h.mt })
	return h
}

// chat makes a chat call of body, its response reporting u, and returns
// the verdict after Done.
func (h *tokenHarness) chat(body string, u engine.Usage) *engine.Verdict {
	v := h.e.Decide(context.Background(), request(http.MethodPost, "/v1/chat/completions", "", body))
	if v.Outcome.Admitted() {
		v.Used(u)
		v.Done(context.Background())
	}
	return v
}

// remaining returns what is left of the charges' budget named name.
func remaining(t *testing.T, v *engine.Verdict, name string) int64 {
	t.Helper()
	for _, c := range v.Charges {
		if c.Budget.Name == name {
			return c.Decision.Remaining
		}
	}
	t.Fatalf("no charge of %s in %v", name, v.Budgets())
	return 0
}

// TestTokenCalls: a token call charges its estimate with its request
// limits, atomically, and settles at the usage its response reported
// once it ends.
func TestTokenCalls(t *testing.T) {
	for _, c := range []struct {
		name    string
		body    string
		usage   engine.Usage
		tpmLeft int64 // tpm remaining as the next call sees it, before its own estimate
		outcome string
	}{
		{"a refund: the call used less than its max_tokens", `{"model":"m","max_tokens":1000}`, engine.Usage{Input: 100, Output: 200, Reported: true}, 9700, "settled"},
		{"a debt: the call used more than its estimate", `{"model":"m","max_tokens":10}`, engine.Usage{Input: 300, Output: 10, Reported: true}, 9690, "settled"},
		{"no usage reported: the estimate stands", `{"model":"m","max_tokens":1000}`, engine.Usage{}, 9000, "unreported"},
		{"the default estimate, refunded", `{"model":"m"}`, engine.Usage{Output: 5, Reported: true}, 9995, "settled"},
		{"an exact estimate needs no settle", `{"model":"m","max_tokens":70}`, engine.Usage{Output: 70, Reported: true}, 9930, "exact"},
		{"usage above max_usage is capped at it", `{"model":"m","max_tokens":10}`, engine.Usage{Input: 70000, Output: 3, Reported: true}, 0, "capped"},
		{"a negative count is not believed: the estimate stands", `{"model":"m","max_tokens":1000}`, engine.Usage{Input: -5, Output: 3, Reported: true}, 9000, "impossible"},
		{"a malformed report is not believed either", `{"model":"m","max_tokens":1000}`, engine.Usage{Output: 3, Reported: true, Impossible: true}, 9000, "impossible"},
		{"n answers are estimated at max_tokens each", `{"model":"m","max_tokens":1000,"n":3}`, engine.Usage{}, 7000, "unreported"},
		{"an error answered whole without usage used nothing", `{"model":"m","max_tokens":1000}`, engine.Usage{Failed: true}, 10000, "settled"},
		{"an error that reported usage settles at it", `{"model":"m","max_tokens":1000}`, engine.Usage{Output: 5, Reported: true, Failed: true}, 9995, "settled"},
		{"a total from a usage header settles tokens", `{"model":"m","max_tokens":1000}`, engine.Usage{Output: 400, Reported: true, TotalOnly: true}, 9600, "settled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTokenHarness(t)
			v := h.chat(c.body, c.usage)
			if v.Outcome != engine.Allowed || v.Call.Tokens == nil {
				t.Fatalf("outcome %v tokens %v, want allowed with an estimate", v.Outcome, v.Call.Tokens)
			}
			if n := testutil.ToFloat64(h.mt.Settles.WithLabelValues("chat", "free", c.outcome)); n != 1 {
				t.Errorf("tollgate_llm_settles_total{outcome=%q} = %v, want 1", c.outcome, n)
			}
			next := h.chat(`{"model":"m","max_tokens":0}`, engine.Usage{Reported: true})
			// max_tokens 0: an estimate of 0, charged as 1 (a budget in
			// debt must refuse it), refunded when it settles at 0.
			got := remaining(t, next, "free.tpm") + 1
			if c.tpmLeft == 0 {
				if next.Outcome != engine.Refused {
					t.Errorf("after a capped debt: %v, want refused", next.Outcome)
				}
			} else if got != c.tpmLeft {
				t.Errorf("tpm remaining %d, want %d", got, c.tpmLeft)
			}
		})
	}
}

// TestTokenCallsRefused: a call in debt, a body that is not a request,
// an estimate above the budget and a model's own budget.
func TestTokenCallsRefused(t *testing.T) {
	h := newTokenHarness(t)
	h.chat(`{"model":"m","max_tokens":10}`, engine.Usage{Output: 12000, Reported: true})
	v := h.chat(`{"model":"m","max_tokens":10}`, engine.Usage{})
	if v.Outcome != engine.Refused || v.Reason != engine.ReasonRate || v.RetryAfter <= 0 {
		t.Errorf("a call in debt: %v %v retry %v, want refused with a Retry-After", v.Outcome, v.Reason, v.RetryAfter)
	}
	if rpm := h.chat(`{"model":"m"}`, engine.Usage{}); remaining(t, rpm, "free.rpm") != 99 {
		t.Errorf("rpm after a refused group: %d, want 99 (the refusal charged nothing)", remaining(t, rpm, "free.rpm"))
	}
	if g := get(h.e, "/other", ""); g.Outcome != engine.Allowed || len(g.Charges) != 1 {
		t.Errorf("a route without tokens: %v with %v, want allowed, charged the request limit alone", g.Outcome, g.Budgets())
	}
	for _, c := range []struct{ body, why string }{
		{`not json`, "not JSON"},
		{`{"model":"m","max_tokens":"100"}`, "a bound that is not a number"},
		{`{"model":"m","max_tokens":1.5}`, "a bound that is not a whole number"},
		{`{"model":"m","max_tokens":-1}`, "a negative bound"},
		{`{"model":"m","max_tokens":1,"max_tokens":100000}`, "a bound given twice"},
		{`[1]`, "not an object"},
	} {
		v := h.chat(c.body, engine.Usage{})
		if v.Outcome != engine.Invalid || v.Reason != engine.ReasonBadRequest || v.Detail == "" {
			t.Errorf("%s: %v %v, want invalid (a bad request)", c.why, v.Outcome, v.Reason)
		}
	}
	h2 := newTokenHarness(t)
	big := h2.chat(`{"model":"big","max_tokens":20000}`, engine.Usage{})
	if big.Reason != engine.ReasonCostExceedsBurst {
		t.Errorf("an estimate above the model's budget: %v, want cost exceeds burst", big.Reason)
	}
	a := h2.chat(`{"model":"big","max_tokens":4000}`, engine.Usage{})
	if remaining(t, a, "free.out") != 1000 {
		t.Errorf("the model's output budget after 4000: %d, want 1000", remaining(t, a, "free.out"))
	}
	if b := h2.chat(`{"model":"small","max_tokens":4000}`, engine.Usage{}); len(b.Charges) != 2 {
		t.Errorf("another model: charged %v, want rpm and tpm only", b.Budgets())
	}
}

// TestTokenCallFallback: a token call decided by the local fallback
// while Redis is down keeps its estimate, never settled in a store that
// did not charge it, and says so.
func TestTokenCallFallback(t *testing.T) {
	p, err := policy.Parse([]byte(tokenPolicy), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	store := resilience.New(fixture.DeadRedisStore(t), memory.New(memory.Options{}), resilience.Options{Timeout: testenv.ShortStoreTimeout})
	t.Cleanup(func() { store.Close() })
	mt, err := engine.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, p, store, nil, func(o *engine.Options) { o.Metrics = mt })
	v := e.Decide(context.Background(), request(http.MethodPost, "/v1/chat/completions", "", `{"model":"m","max_tokens":100}`))
	if v.Outcome != engine.Allowed || !v.Local {
		t.Fatalf("outcome %v local %v, want allowed by the fallback", v.Outcome, v.Local)
	}
	v.Used(engine.Usage{Output: 10, Reported: true})
	v.Done(context.Background())
	if n := testutil.ToFloat64(mt.Settles.WithLabelValues("chat", "free", "fallback")); n != 1 {
		t.Errorf("settles counted fallback: %v, want 1", n)
	}
	if n := store.Stats().Pending; n != 0 {
		t.Errorf("%d store calls pending: the fallback's reservation was sent to settle in Redis", n)
	}
}

// tenantTokenPolicy gives the users of one tenant a token budget they
// share, beside each user's own.
const tenantTokenPolicy = `version: t1
identity: {secret: 0123456789abcdef0123, anonymous_plan: team}
plans:
  team:
    limits:
      - {name: rpm, algorithm: fixed_window, rate: 100, period: 1m}
      - {name: tpm, rate: 10000, period: 1m, unit: tokens}
    tenant:
      limits:
        - {name: rpm, algorithm: fixed_window, rate: 1000, period: 1m}
        - {name: tpm, rate: 1500, period: 1m, unit: tokens}
        - {name: day, calendar: day, rate: 1000000, unit: output_tokens}
api_keys:
  - {id: alice, tenant: acme, digest: "sha256:1b7e9b591e608a39c8de6a81f008a93f339beff75fdf51788965a6e02a1d6022", plan: team}  # acme-alice-key
  - {id: bob, tenant: acme, digest: "sha256:bc42ea7eccdae28ecf65470046821790d94d1cc58f5b344e30d5f21afe8d7ac7", plan: team}  # acme-bob-key
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: builtin:echo, tokens: {bytes_per_input_token: 0, default_output: 1000}}
  - {name: other, path: /, upstream: builtin:echo}
`

// TestTenantTokenBudget: a tenant's token budget is reserved with its
// users' budgets in one call, shared between them, and settled at the
// usage like theirs; a route without tokens charges only its requests.
func TestTenantTokenBudget(t *testing.T) {
	p, err := policy.Parse([]byte(tenantTokenPolicy), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := memory.New(memory.Options{Now: func() time.Time { return now }, SweepInterval: -1})
	t.Cleanup(func() { st.Close() })
	e := newEngine(t, p, st, func() time.Time { return now })
	chat := func(key, body string, u engine.Usage) *engine.Verdict {
		v := e.Decide(context.Background(), request(http.MethodPost, "/v1/chat/completions", "", body, "X-API-Key", key))
		if v.Outcome.Admitted() {
			v.Used(u)
			v.Done(context.Background())
		}
		return v
	}
	a := chat("acme-alice-key", `{"model":"m","max_tokens":1000}`, engine.Usage{Input: 100, Output: 500, Reported: true})
	if got := a.Budgets(); a.Outcome != engine.Allowed || len(a.Charges) != 5 {
		t.Fatalf("alice: %v charged %v, want allowed, charged her 2 limits and the tenant's 3", a.Outcome, got)
	}
	for _, c := range []struct {
		key, body string
		want      engine.Outcome
		tenantTPM int64 // the tenant's tpm left after the call's estimate
		why       string
	}{
		{"acme-bob-key", `{"model":"m","max_tokens":1000}`, engine.Refused, 0, "alice settled at 600: 900 left of the tenant's 1500, less than bob's estimate"},
		{"acme-bob-key", `{"model":"m","max_tokens":800}`, engine.Allowed, 100, "within what alice left, though bob's own budget is whole"},
	} {
		v := chat(c.key, c.body, engine.Usage{})
		if v.Outcome != c.want {
			t.Fatalf("%s: %v, want %v", c.why, v.Outcome, c.want)
		}
		if c.want == engine.Allowed {
			if got := remaining(t, v, "team.tenant.tpm"); got != c.tenantTPM {
				t.Errorf("%s: the tenant's tpm left %d, want %d", c.why, got, c.tenantTPM)
			}
			if got := remaining(t, v, "team.tpm"); got != 10000-800 {
				t.Errorf("%s: bob's own tpm left %d, want %d", c.why, got, 10000-800)
			}
		}
	}
	if g := get(e, "/other", "", "X-API-Key", "acme-alice-key"); g.Outcome != engine.Allowed || len(g.Charges) != 2 {
		t.Errorf("a route without tokens: %v charged %v, want the user's and the tenant's rpm only", g.Outcome, g.Budgets())
	}
}
