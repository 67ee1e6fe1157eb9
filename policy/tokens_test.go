package policy_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// llmPolicy is a policy with a token route and a plan of request and
// token limits, some per model; extra is appended to the chat route.
func llmPolicy(plan, extra string) string {
	return `version: "1"
plans:
  free:
    limits:
` + plan + `
routes:
  - {name: chat, path: /v1/chat/completions, upstream: "http://127.0.0.1:9000", tokens: {` + extra + `}}
  - {name: models, path: /v1/models, upstream: "http://127.0.0.1:9000"}
`
}

const llmPlan = `      - {name: rpm, rate: 20, period: 1m}
      - {name: tpm, rate: 10000, period: 1m, unit: tokens}
      - {name: tpd, rate: 1000000, calendar: day, unit: tokens}
      - {name: gpt4-out, rate: 20000, period: 1m, unit: output_tokens, models: [gpt-4o, gpt-4o-mini], per_model: true}`

func TestTokens(t *testing.T) {
	p, err := policy.Parse([]byte(llmPolicy(llmPlan, "")), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) > 0 {
		t.Errorf("warnings: %v", p.Warnings)
	}
	tk := p.Routes[0].Tokens
	if tk == nil || p.Routes[1].Tokens != nil {
		t.Fatalf("tokens on chat %v, on models %v; want on chat only", tk, p.Routes[1].Tokens)
	}
	want := policy.Tokens{Fields: policy.DefaultMaxTokensFields, DefaultOutput: 4096, MaxOutput: 32768, BytesPerInput: 4,
		MaxUsage: 2_000_000, SettleTTL: 60 * time.Second}
	if tk.DefaultOutput != want.DefaultOutput || tk.MaxOutput != want.MaxOutput || tk.BytesPerInput != want.BytesPerInput ||
		tk.MaxUsage != want.MaxUsage || tk.SettleTTL != want.SettleTTL || strings.Join(tk.Fields, ",") != strings.Join(want.Fields, ",") {
		t.Errorf("defaults: %+v, want %+v", *tk, want)
	}
	ls := p.Plans["free"].Limits
	units := []policy.Unit{policy.UnitRequests, policy.UnitTokens, policy.UnitTokens, policy.UnitOutputTokens}
	for i, b := range ls {
		if b.Unit != units[i] {
			t.Errorf("%s: unit %v, want %v", b.Name, b.Unit, units[i])
		}
	}
	for _, c := range []struct {
		budget  int
		tokens  bool
		model   string
		applies bool
		why     string
	}{
		{0, false, "", true, "a request limit applies everywhere"},
		{0, true, "claude", true, "a request limit applies on a token route too"},
		{1, false, "", false, "a token limit does not apply on a route without tokens"},
		{1, true, "anything", true, "a token limit without models applies to every model"},
		{3, true, "gpt-4o-mini", true, "a listed model"},
		{3, true, "GPT-4o", false, "models are compared exactly"},
		{3, false, "gpt-4o", false, "a model limit needs a token route"},
	} {
		if got := ls[c.budget].Applies(c.tokens, c.model); got != c.applies {
			t.Errorf("%s: %s.Applies(%v, %q) = %v", c.why, ls[c.budget].Name, c.tokens, c.model, got)
		}
	}
	if !strings.Contains(ls[1].StoreName, "~tokens@") || strings.Contains(ls[0].StoreName, "~") {
		t.Errorf("store names %q, %q: a token limit's state must be apart from a request limit's", ls[0].StoreName, ls[1].StoreName)
	}
	for _, c := range []struct {
		maxOutput, body, in, out int64
		why                      string
	}{
		{-1, 100, 25, 4096, "no bound: the default output, and the body's bytes / 4"},
		{500, 101, 26, 500, "the request's bound, and the input rounded up"},
		{100000, 0, 0, 32768, "a bound above max_output is capped"},
		{0, 0, 0, 0, "a bound of 0 is 0"},
	} {
		if in, out := tk.Estimate(c.maxOutput, 1, c.body); in != c.in || out != c.out {
			t.Errorf("%s: Estimate(%d, 1, %d) = %d, %d; want %d, %d", c.why, c.maxOutput, c.body, in, out, c.in, c.out)
		}
	}
	for _, c := range []struct {
		maxOutput, choices, out int64
		why                     string
	}{
		{100, 3, 300, "n answers may each use the bound"},
		{100000, 2, 65536, "each answer's bound is capped first"},
		{-1, 0, 4096, "n of 0 counts as 1"},
		{32768, 1 << 50, math.MaxInt64, "a product past int64 saturates: more than any budget"},
	} {
		if _, out := tk.Estimate(c.maxOutput, c.choices, 0); out != c.out {
			t.Errorf("%s: Estimate(%d, %d, 0) output %d, want %d", c.why, c.maxOutput, c.choices, out, c.out)
		}
	}
	for _, c := range []struct {
		count, want int64
		capped      bool
	}{{0, 0, false}, {2_000_000, 2_000_000, false}, {2_000_001, 2_000_000, true}} {
		if n, capped := tk.Usage(c.count); n != c.want || capped != c.capped {
			t.Errorf("Usage(%d) = %d, %v; want %d, %v", c.count, n, capped, c.want, c.capped)
		}
	}
}

func TestTokensInvalid(t *testing.T) {
	for _, c := range []struct {
		name, plan, tokens string
		want               []string
	}{
		{"a token limit under an algorithm that cannot settle", "      - {rate: 100, period: 1m, unit: tokens, algorithm: sliding_log}", "",
			[]string{"plans.free.limits[0].algorithm", "cannot do"}},
		{"a leaky bucket cannot settle either", "      - {rate: 100, period: 1m, unit: input_tokens, algorithm: leaky_bucket}", "",
			[]string{"plans.free.limits[0].algorithm"}},
		{"an unknown unit", "      - {rate: 100, period: 1m, unit: words}", "", []string{"plans.free.limits[0].unit", `"words"`}},
		{"per_model without models", "      - {rate: 100, period: 1m, unit: tokens, per_model: true}", "", []string{"plans.free.limits[0].per_model"}},
		{"a model twice", "      - {rate: 100, period: 1m, models: [a, a]}", "", []string{"plans.free.limits[0].models[1]"}},
		{"an empty model", "      - {rate: 100, period: 1m, models: [\"\"]}", "", []string{"plans.free.limits[0].models[0]"}},
		{"a default output above max_output", llmPlan, "default_output: 100, max_output: 10", []string{"routes[0].tokens.default_output"}},
		{"a default output no token budget admits", "      - {rate: 1000, period: 1m, unit: tokens}", "", []string{"routes[0].tokens.default_output", "no call without a bound"}},
		{"bytes per token out of range", llmPlan, "bytes_per_input_token: 65", []string{"routes[0].tokens.bytes_per_input_token"}},
		{"a negative max usage", llmPlan, "max_usage: -1", []string{"routes[0].tokens.max_usage"}},
		{"a bad usage header", llmPlan, "usage_header: \"x y\"", []string{"routes[0].tokens.usage_header"}},
		{"an empty field list", llmPlan, "max_tokens_fields: []", []string{"routes[0].tokens.max_tokens_fields"}},
		{"an unknown key", llmPlan, "max_token: 5", []string{`unknown field "max_token"`}},
		{"a field the parser reads for another meaning", llmPlan, "max_tokens_fields: [n]", []string{"routes[0].tokens.max_tokens_fields[0]"}},
		{"a usage path with an empty key", llmPlan, "usage_paths: {input: usage..n}", []string{"routes[0].tokens.usage_paths.input", "1 to 8 keys"}},
		{"a usage path too deep", llmPlan, "usage_paths: {total: a.b.c.d.e.f.g.h.i}", []string{"routes[0].tokens.usage_paths.total"}},
		{"a usage path inside another", llmPlan, "usage_paths: {input: u.n, total: u}", []string{"routes[0].tokens.usage_paths", "prefix"}},
		{"usage paths naming none", llmPlan, "usage_paths: {}", []string{"routes[0].tokens.usage_paths", "at least one"}},
		{"a tenant token limit under an algorithm that cannot settle", llmPlan + "\n    tenant: {rate: 100000, period: 1m, unit: tokens, algorithm: sliding_log}", "",
			[]string{"plans.free.tenant.algorithm", "cannot do"}},
		{"a tenant's listed token limit that cannot settle", llmPlan + "\n    tenant: {limits: [{name: tpm, rate: 100000, period: 1m, unit: tokens, algorithm: leaky_bucket}]}", "",
			[]string{"plans.free.tenant.limits[0].algorithm"}},
		{"a unit beside a tenant's limits, not in one", llmPlan + "\n    tenant: {unit: tokens, limits: [{rate: 100000, period: 1m}]}", "",
			[]string{"plans.free.tenant.unit", "give each its own"}},
		{"a tenant budget of nothing", llmPlan + "\n    tenant: {}", "", []string{"plans.free.tenant", "a tenant budget needs a limit"}},
		{"a tenant limit both inline and listed", llmPlan + "\n    tenant: {rate: 5, period: 1m, limits: [{rate: 100000, period: 1m}]}", "",
			[]string{"plans.free.tenant", "inline or under limits"}},
		{"a default output the tenant's budget cannot admit", llmPlan + "\n    tenant: {rate: 1000, period: 1m, unit: output_tokens}", "",
			[]string{"routes[0].tokens.default_output", "free.tenant", "no call without a bound"}},
	} {
		_, err := policy.Parse([]byte(llmPolicy(c.plan, c.tokens)), "p.yaml")
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
			}
		}
	}
	// Usage paths are split into their keys.
	p, err := policy.Parse([]byte(llmPolicy(llmPlan, "usage_paths: {input: usageMetadata.promptTokenCount, total: usageMetadata.totalTokenCount}")), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if up := p.Routes[0].Tokens.UsagePaths; up == nil || strings.Join(up.Input, "/") != "usageMetadata/promptTokenCount" || up.Output != nil || len(up.Total) != 2 {
		t.Errorf("usage paths %+v", up)
	}
	// A plan's and a tenant's one limit, written inline, count tokens
	// too, each in a state of its own.
	inline := strings.Replace(llmPolicy("", ""), "    limits:\n\n", "    rate: 20000\n    period: 1m\n    unit: tokens\n    tenant: {rate: 90000, period: 1m, unit: input_tokens}\n", 1)
	p, err = policy.Parse([]byte(inline), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl := p.Plans["free"]
	if pl.Limits[0].Unit != policy.UnitTokens || pl.Tenant[0].Unit != policy.UnitInputTokens || !strings.HasPrefix(pl.Tenant[0].StoreName, "tenant/free~input_tokens@") {
		t.Errorf("inline units: plan %v, tenant %v %q; want tokens and input_tokens", pl.Limits[0].Unit, pl.Tenant[0].Unit, pl.Tenant[0].StoreName)
	}
	// A token limit with no token route loads, with a warning.
	src := strings.Replace(llmPolicy(llmPlan, ""), ", tokens: {}", "", 1)
	p, err = policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].String(), "nothing charges it") {
		t.Errorf("warnings %v, want one that no call charges the token limits", p.Warnings)
	}
}
