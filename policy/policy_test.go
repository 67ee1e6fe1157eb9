package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/policy"
)

const valid = `version: v1
listeners: {public: "127.0.0.1:8080", admin: "127.0.0.1:9090"}
identity:
  secret: 0123456789abcdef0123
  anonymous_plan: free
plans:
  free: {rate: 100, period: 1m}
  pro: {algorithm: token_bucket, rate: 1000, period: 1m, burst: 200}
api_keys:
  - {id: k1, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", plan: free}
routes:
  - {name: export, path: /api/export, upstream: "http://127.0.0.1:9000", cost: 10}
  - {name: api, path: /api/, upstream: "http://127.0.0.1:9000"}
  - {name: login, method: POST, path: /login, upstream: builtin:echo, on_store_failure: fail_closed, limit: {algorithm: sliding_log, rate: 5, period: 1m}}
`

func TestQuickstartLoads(t *testing.T) {
	p, err := policy.Load("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Public != "127.0.0.1:8080" || p.Admin != "127.0.0.1:9090" || p.Store.Type != "memory" || len(p.Keys) != 2 {
		t.Fatalf("quickstart: %+v", p)
	}
	if p.Plans["free"].Limits[0].Limit.Rate != 100 || p.Plans["pro"].Limits[0].Limit.Rate != 1000 {
		t.Fatal("free and pro plans")
	}
}

func TestValid(t *testing.T) {
	p, err := policy.Parse([]byte(valid), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.UserPlan != p.AnonymousPlan || p.InvalidKey == nil || p.UpstreamTimeout == 0 || p.SecretGenerated {
		t.Errorf("defaults: %+v", p)
	}
	if r := p.Routes[2]; !r.FailClosed || r.Limit == nil || r.Group != "login" || r.Cost != 1 {
		t.Errorf("login route: %+v", r)
	}
	if p.Store.Timeout != testenv.ShortStoreTimeout {
		t.Errorf("default store timeout %v, want the production default %v", p.Store.Timeout, testenv.ShortStoreTimeout)
	}
	if b := p.Plans["free"].Limits[0]; !strings.HasPrefix(b.StoreName, "plan/free@") || b.Name != "free" {
		t.Errorf("store names are the budget's kind, name and limit: %+v", b)
	}
}

func TestMatch(t *testing.T) {
	p, err := policy.Parse([]byte(valid), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ method, path, want string }{
		{"GET", "/api/export", "export"},
		{"GET", "/api/items", "api"},
		{"GET", "/api", "api"},
		{"POST", "/login", "login"},
		{"GET", "/login", ""},
		{"GET", "/apix", ""},
		{"GET", "/", ""},
	}
	expectMatches(t, p, cases)
}

// TestInvalidFiles checks that each broken file is refused whole, with the
// line of the problem and a message that says what is wrong.
func TestInvalidFiles(t *testing.T) {
	cases := []struct {
		name, edit, with string
		want             []string // substrings of the error, e.g. "p.yaml:7:"
	}{
		{"unknown field", "  free: {rate: 100, period: 1m}", "  free: {rate: 100, period: 1m, brust: 5}", []string{"p.yaml:7:", "brust"}},
		{"bad duration", "period: 1m}\n  pro", "period: 1 minute}\n  pro", []string{"p.yaml:7:", "duration"}},
		{"unknown algorithm", "algorithm: token_bucket", "algorithm: tokenbucket", []string{"p.yaml:8:", "plans.pro.algorithm", "unknown algorithm"}},
		{"zero rate", "rate: 1000,", "rate: 0,", []string{"p.yaml:8:", "rate must be at least 1"}},
		{"unknown plan", "plan: free}", "plan: gold}", []string{"p.yaml:10:", `no plan named "gold"`}},
		{"raw key instead of digest", `digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb"`, `digest: free-demo-key`, []string{"p.yaml:10:", "api_keys[0].digest", "never the key itself"}},
		{"cost above burst", "cost: 10}", "cost: 500}", []string{"p.yaml:12:", "routes[0].cost", "exceeds plan \"pro\"'s capacity 200"}},
		{"duplicate route", "path: /api/, upstream", "path: /api/export, upstream", []string{"p.yaml:13:", "already matches"}},
		{"bad upstream", `upstream: "http://127.0.0.1:9000", cost`, `upstream: "ftp://x", cost`, []string{"p.yaml:12:", "http(s) URL"}},
		{"bad fail mode", "fail_closed", "fail_shut", []string{"p.yaml:14:", "fail_open or fail_closed"}},
		{"shared listener", `admin: "127.0.0.1:9090"`, `admin: "127.0.0.1:8080"`, []string{"p.yaml:2:", "must not share"}},
		{"short secret", "secret: 0123456789abcdef0123", "secret: short", []string{"p.yaml:3:", "at least 16 bytes"}},
		{"not yaml", "routes:", "routes: [", []string{"p.yaml:"}},
		{"redis without url", "identity:", "store: {type: redis}\nidentity:", []string{"p.yaml:3:", "needs a url"}},
		{"bad version", "version: v1", "version: \"v 1\"", []string{"p.yaml:1:", "version must be"}},
		{"sub-millisecond store timeout", "identity:", "store: {timeout: 10us}\nidentity:", []string{"p.yaml:3:", "store.timeout", "at least 1ms"}},
		{"negative instances", "identity:", "store: {instances: -2}\nidentity:", []string{"p.yaml:3:", "store.instances"}},
		{"unknown calendar fallback", "identity:", "store: {calendar_fallback: open}\nidentity:", []string{"p.yaml:3:", "store.calendar_fallback", "closed or share"}},
		{"credential body too small", "  anonymous_plan: free", "  anonymous_plan: free\n  max_body: 100", []string{"identity.max_body", "1KiB to 64MiB"}},
		{"bad credential field", "  anonymous_plan: free", "  anonymous_plan: free\n  credential_fields: [\"a b\"]", []string{"identity.credential_fields[0]", "field name"}},
		{"credential body too large", "  anonymous_plan: free", "  anonymous_plan: free\n  max_body: 1GiB", []string{"identity.max_body", "1KiB to 64MiB"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(valid, c.edit) {
				t.Fatalf("edit %q not in the valid file", c.edit)
			}
			src := strings.Replace(valid, c.edit, c.with, 1)
			p, err := policy.Parse([]byte(src), "p.yaml")
			if p != nil || err == nil {
				t.Fatalf("accepted:\n%s", src)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestAllProblemsReported(t *testing.T) {
	src := strings.Replace(strings.Replace(valid, "rate: 1000,", "rate: 0,", 1), "plan: free}", "plan: gold}", 1)
	_, err := policy.Parse([]byte(src), "p.yaml")
	var ve *policy.ValidationError
	if !errors.As(err, &ve) || len(ve.Issues) != 2 {
		t.Fatalf("want 2 problems, got %v", err)
	}
}

func TestEmptyAndMissing(t *testing.T) {
	if _, err := policy.Parse(nil, "empty.yaml"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := policy.Load("/nonexistent/policy.yaml"); err == nil || !strings.HasPrefix(err.Error(), "loading policy:") {
		t.Errorf("missing file: %v", err)
	}
}

func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	main := strings.Replace(valid, "api_keys:\n  - {id: k1, digest: \"sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb\", plan: free}\n", "keys_file: keys.yaml\n", 1)
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(main), 0o600)
	os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte("api_keys:\n  - {id: a, digest: \"sha256:ff83448544d92a31f29f045bb4b32f207b8e8358882135d71cd07e235d682936\", plan: pro}\n"), 0o600)
	p, err := policy.Load(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if k := p.Keys["sha256:ff83448544d92a31f29f045bb4b32f207b8e8358882135d71cd07e235d682936"]; k == nil || k.Plan.Name != "pro" {
		t.Fatalf("keys from keys file: %+v", p.Keys)
	}
	os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte("api_keys:\n  - {id: a, digest: nope, plan: pro}\n"), 0o600)
	_, err = policy.Load(filepath.Join(dir, "p.yaml"))
	if err == nil || !strings.Contains(err.Error(), "keys.yaml:2:") {
		t.Fatalf("bad keys file: %v", err)
	}
}

const scaled = `version: v2
listeners: {public: "127.0.0.1:8080", admin: "127.0.0.1:9090"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: team}
plans:
  team:
    limits:
      - {name: second, rate: 10, period: 1s}
      - {name: hour, algorithm: sliding_counter, rate: 1000, period: 1h}
    tenant: {rate: 25, period: 1m}
routes:
  - {name: search, path: /search, upstream: builtin:echo, global: {rate: 500, period: 1s}}
region: {name: eu, count: 2, margin: 0.1}
`

func TestPlansTenantsGlobalRegion(t *testing.T) {
	p, err := policy.Parse([]byte(scaled), "s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl := p.Plans["team"]
	if len(pl.Limits) != 2 || pl.Limits[0].Name != "team.second" || !strings.HasPrefix(pl.Limits[1].StoreName, "plan/team/hour@") {
		t.Fatalf("limits: %+v %+v", pl.Limits[0], pl.Limits[1])
	}
	// Region eu enforces 45% of everything.
	if pl.Limits[0].Limit.Rate != 4 || pl.Limits[1].Limit.Rate != 450 || pl.Tenant[0].Limit.Rate != 11 {
		t.Fatalf("region shares: %v %v %v", pl.Limits[0].Limit, pl.Limits[1].Limit, pl.Tenant[0].Limit)
	}
	if g := p.Routes[0].Global; g == nil || g.Limit.Rate != 225 || g.Name != "global.search" {
		t.Fatalf("global: %+v", g)
	}
	if p.Region != "eu" {
		t.Fatalf("region %q", p.Region)
	}
}

func TestRegionShareNeverExceedsTotal(t *testing.T) {
	for _, rate := range []int64{1, 2, 3, 7, 10, 99, 100, 1001} {
		for n := 1; n <= 5; n++ {
			l := policy.RegionShare(tollgate.Limit{Rate: rate, Period: time.Second}, n, 0.1)
			if int64(n)*l.Rate > rate && l.Rate != 1 {
				t.Errorf("rate %d over %d regions: share %d sums above the limit", rate, n, l.Rate)
			}
		}
	}
}

func TestScaledInvalid(t *testing.T) {
	cases := []struct{ edit, with, want string }{
		{"    limits:\n", "    rate: 5\n    period: 1s\n    limits:\n", "inline or under limits"},
		{"{name: hour,", "{name: second,", "limit names are unique"},
		{"margin: 0.1", "margin: 1.5", "region.margin"},
		{"count: 2", "count: 0", "region.count"},
		{"global: {rate: 500", "global: {rate: 0", "routes[0].global"},
		{"tenant: {rate: 25", "tenant: {rate: -1", "plans.team.tenant"},
	}
	for _, c := range cases {
		if !strings.Contains(scaled, c.edit) {
			t.Fatalf("edit %q missing", c.edit)
		}
		_, err := policy.Parse([]byte(strings.Replace(scaled, c.edit, c.with, 1)), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: err %v, want %q", c.edit, c.with, err, c.want)
		}
	}
}

func TestShadow(t *testing.T) {
	p, err := policy.Parse([]byte(scaled+"shadow: true\n"), "s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl := p.Plans["team"]
	if !pl.Limits[0].Shadow || !pl.Limits[1].Shadow || !pl.Tenant[0].Shadow || !p.Routes[0].Global.Shadow {
		t.Fatal("a file-wide shadow left a budget enforced")
	}
	p, err = policy.Parse([]byte(strings.Replace(scaled, "{name: second, rate: 10, period: 1s}", "{name: second, rate: 10, period: 1s, shadow: true}", 1)), "s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if pl := p.Plans["team"]; !pl.Limits[0].Shadow || pl.Limits[1].Shadow {
		t.Fatal("per-limit shadow")
	}
}

func TestTenantOverride(t *testing.T) {
	src := valid + "tenants:\n  acme: {plan: pro}\n"
	src = strings.Replace(src, "plan: free}", "tenant: acme, plan: free}", 1)
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range p.Keys {
		if k.Plan.Name != "pro" || k.OwnPlan.Name != "free" {
			t.Fatalf("key of tenant acme: plan %s (own %s), want pro (own free)", k.Plan.Name, k.OwnPlan.Name)
		}
	}
	q, err := p.Override(policy.Overrides{Tenants: map[string]string{"acme": ""}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range q.Keys {
		if k.Plan.Name != "free" {
			t.Fatalf("after removing the override: %s", k.Plan.Name)
		}
	}
	if _, err := policy.Parse([]byte(valid+"tenants:\n  acme: {plan: gold}\n"), "p.yaml"); err == nil || !strings.Contains(err.Error(), `no plan named "gold"`) {
		t.Fatalf("unknown tenant plan: %v", err)
	}
}

// TestTenantNames: a tenant or user name is request data of the admin
// API and reaches logs, the state file and the dashboard: 10 KB names
// and NUL bytes were accepted. Every way a name comes in (an override, a
// key the admin API adds, the policy file) takes the same rule.
func TestTenantNames(t *testing.T) {
	p, err := policy.Parse([]byte(valid), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		name, reason string
		ok           bool
	}{
		{"acme", "a plain name", true},
		{"Ünïcode Corp. (EU)", "UTF-8 and spaces read back alike", true},
		{strings.Repeat("t", 128), "128 bytes, the longest", true},
		{strings.Repeat("t", 129), "longer than 128 bytes", false},
		{strings.Repeat("t", 10<<10), "10 KB, as was accepted", false},
		{"a\x00b", "a NUL, which ends the name for C readers", false},
		{"a\nb", "a newline, which forges a log line", false},
		{"\xff", "not UTF-8", false},
	} {
		for _, o := range []struct {
			what string
			o    policy.Overrides
		}{
			{"tenant plan", policy.Overrides{Tenants: map[string]string{c.name: "pro"}}},
			{"tenant removal", policy.Overrides{Tenants: map[string]string{c.name: ""}}},
			{"key's tenant", policy.Overrides{Keys: map[string]*policy.KeySpec{"k1": {Digest: digest, Plan: "free", Tenant: c.name}}}},
			{"key's user", policy.Overrides{Keys: map[string]*policy.KeySpec{"k1": {Digest: digest, Plan: "free", User: c.name}}}},
		} {
			if _, err := p.Override(o.o); (err == nil) != c.ok {
				t.Errorf("%s %.20q (%s): %v", o.what, c.name, c.reason, err)
			}
		}
		if !utf8.ValidString(c.name) {
			continue // a YAML file is UTF-8 (its "\xff" is ÿ)
		}
		src := valid + "tenants:\n  " + strconv.Quote(c.name) + ": {plan: pro}\n"
		if _, err := policy.Parse([]byte(src), "p.yaml"); (err == nil) != c.ok {
			t.Errorf("the file's tenant %.20q (%s): %v", c.name, c.reason, err)
		}
	}
}

// expectMatches checks the route each case matches (want "" for none).
func expectMatches(t *testing.T, p *policy.Policy, cases []struct{ method, path, want string }) {
	t.Helper()
	for _, c := range cases {
		got := ""
		if r := p.Match(c.method, c.path); r != nil {
			got = r.Name
		}
		if got != c.want {
			t.Errorf("Match(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

// TestAnonymousPlanDefault: a file with one plan needs no anonymous_plan,
// that plan being everyone's; with several, leaving it out, or naming a
// plan there is none of, is refused with the plans that exist.
func TestAnonymousPlanDefault(t *testing.T) {
	const one = `version: v1
plans:
  free: {rate: 100, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
`
	p, err := policy.Parse([]byte(one), "one.yaml")
	if err != nil {
		t.Fatalf("a one-plan file without anonymous_plan: %v", err)
	}
	if p.AnonymousPlan == nil || p.AnonymousPlan.Name != "free" || p.UserPlan != p.AnonymousPlan {
		t.Errorf("anonymous plan %+v, user plan %+v: want both free", p.AnonymousPlan, p.UserPlan)
	}
	for _, c := range []struct{ name, text, want, why string }{
		{"several plans", strings.Replace(valid, "  anonymous_plan: free\n", "", 1), "(one of free, pro)", "no plan is everyone's when there are several"},
		{"unknown anonymous plan", strings.Replace(valid, "anonymous_plan: free", "anonymous_plan: gold", 1), `no plan named "gold" (the plans are free, pro)`, "a misspelt plan is told the plans there are"},
		{"unknown key plan", strings.Replace(valid, "plan: free}", "plan: gold}", 1), `no plan named "gold" (the plans are free, pro)`, "as for a key's plan"},
	} {
		if _, err := policy.Parse([]byte(c.text), "p.yaml"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q (%s)", c.name, err, c.want, c.why)
		}
	}
}

// TestDecodeMessages: the decoder's problems name keys and YAML kinds, never
// a Go type, and a misspelt key is told the key it may have meant.
func TestDecodeMessages(t *testing.T) {
	for _, c := range []struct{ name, find, replace, want, why string }{
		{"misspelt key", "  free: {rate: 100, period: 1m}", "  free: {rate: 100, perod: 1m}", `unknown field "perod": did you mean "period"?`, "one edit from a key of a limit"},
		{"far key", "  free: {rate: 100, period: 1m}", "  free: {rate: 100, period: 1m, colour: red}", `unknown field "colour" (the keys here are algorithm, rate, period`, "no key is near: the keys are listed"},
		{"moved limits", "  free: {rate: 100, period: 1m}", "  free: [{rate: 100, period: 1m}]", "want a mapping (plan), got a list", "a plan is a mapping, not a list"},
		{"number for text", "version: v1", "version: [1]", "want a string, got a list", "the version is a string"},
		{"text for number", "rate: 100, period: 1m}\n  pro", "rate: lots, period: 1m}\n  pro", "want a whole number, got a string `lots`", "a rate is a whole number"},
		{"no period", "  free: {rate: 100, period: 1m}", "  free: {rate: 100}", "period is required", "a missing key is said missing, not out of range"},
		{"no rate", "  free: {rate: 100, period: 1m}", "  free: {period: 1m}", "rate is required", "as for the rate"},
		{"no version", "version: v1\n", "", "p.yaml: version: version is required", "not a pattern the empty version does not match"},
		{"no route name", "{name: api, path: /api/,", "{path: /api/,", "routes[1].name: name is required", "as for a route's name"},
		{"no route path", "{name: api, path: /api/,", "{name: api,", "routes[1].path: path is required", "as for a route's path"},
		{"no key id", "{id: k1, digest", "{digest", "api_keys[0].id: id is required", "as for a key's id"},
		{"no key digest", `digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", `, "", "api_keys[0].digest: digest is required", "as for its digest"},
		{"no key plan", ", plan: free}", "}", "api_keys[0].plan: plan is required", "as for its plan, rather than no plan named \"\""},
	} {
		if !strings.Contains(valid, c.find) {
			t.Fatalf("%s: the test policy no longer holds %q", c.name, c.find)
		}
		_, err := policy.Parse([]byte(strings.Replace(valid, c.find, c.replace, 1)), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q (%s)", c.name, err, c.want, c.why)
			continue
		}
		if strings.Contains(err.Error(), "policy.") || strings.Contains(err.Error(), "int64") {
			t.Errorf("%s: %v names a Go type", c.name, err)
		}
	}
}

// TestEveryProblemInOneRun: a file whose values the decoder cannot all
// read is still compiled, so one run reports its decoding problems and
// its other ones, each once, at its line.
func TestEveryProblemInOneRun(t *testing.T) {
	text := strings.NewReplacer(
		"  free: {rate: 100, period: 1m}", "  free: {rate: 100, perod: 1m}", // line 7: decoding
		"burst: 200}", "burst: many}", // line 8: decoding
		"plan: free}", "plan: gold}", // line 10: compiling
		"cost: 10}", "cost: -1}", // line 12: compiling
	).Replace(valid)
	_, err := policy.Parse([]byte(text), "p.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`p.yaml:7: unknown field "perod"`, "p.yaml:8: want a whole number", `p.yaml:10: api_keys[0].plan: no plan named "gold"`, "p.yaml:12: routes[0].cost: cost must be at least 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "p.yaml:"); n != 4 {
		t.Errorf("%d problems, want 4 (a value the decoder refused is not refused again):\n%v", n, err)
	}
}

// TestWrongTypeAnywhere: a value of the wrong type at any key of the
// shipped examples, a list or a mapping where a scalar stands, is
// reported, and compiling the rest, which the decoder left partly empty,
// neither panics nor loads.
func TestWrongTypeAnywhere(t *testing.T) {
	scalar := regexp.MustCompile(`(?m)^(\s*(?:- )?[a-z_]+: )([^\s\[{#|>][^#\n]*?)(\s*(#.*)?)$`)
	for _, name := range []string{"../examples/quickstart.yaml", "../examples/jwt.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		env := policy.Env{Vars: map[string]string{"TOLLGATE_SECRET": "0123456789abcdef0123456789abcdef"}, Secret: []byte("0123456789abcdef0123")}
		if _, err := policy.ParseEnv(b, name, env); err != nil {
			t.Fatalf("%s as shipped: %v", name, err)
		}
		locs := scalar.FindAllStringSubmatchIndex(text, -1)
		if len(locs) < 20 {
			t.Fatalf("%s: found %d scalar values", name, len(locs))
		}
		for _, l := range locs {
			for _, wrong := range []string{"[x]", "{x: 1}"} {
				bad := text[:l[4]] + wrong + text[l[5]:]
				if _, err := policy.ParseEnv([]byte(bad), name, env); err == nil {
					t.Errorf("%s: %q accepted", name, strings.TrimSpace(text[l[2]:l[5]])+" -> "+wrong)
				}
			}
		}
	}
}

// TestBadTimeZoneOnce: a file's unknown time_zone is reported once, at
// its own line, not again at each calendar quota that takes it.
func TestBadTimeZoneOnce(t *testing.T) {
	const text = `version: v1
time_zone: Mars/Olympus
plans:
  free:
    limits:
      - {name: day, calendar: day, rate: 10}
      - {name: month, calendar: month, rate: 100, time_zone: Venus/Maxwell}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
`
	_, err := policy.Parse([]byte(text), "tz.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{`tz.yaml:2: time_zone: unknown time zone "Mars/Olympus"`, `tz.yaml:7: plans.free.limits[1].time_zone: unknown time zone "Venus/Maxwell"`}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("lacks %q:\n%v", w, err)
		}
	}
	if n := strings.Count(err.Error(), "unknown time zone"); n != 2 {
		t.Errorf("%d reports, want 2 (each zone where it is written):\n%v", n, err)
	}
}
