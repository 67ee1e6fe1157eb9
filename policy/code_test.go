package policy_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/policy"
)

// TestCompileFromCode: a File built in Go compiles as its YAML would, and
// is checked by the same rules.
func TestCompileFromCode(t *testing.T) {
	f := policy.File{
		Version:   "code-1",
		Listeners: policy.ListenerSpec{Public: "127.0.0.1:0"},
		Identity:  policy.IdentitySpec{Secret: "0123456789abcdef0123", AnonymousPlan: "free"},
		Plans:     map[string]policy.PlanSpec{"free": {LimitSpec: policy.LimitSpec{Algorithm: "fixed_window", Rate: 3, Period: time.Minute}}},
		Routes:    []policy.RouteSpec{{Name: "api", Path: "/api/", Upstream: "builtin:echo", Cost: 2}},
	}
	p, err := policy.Compile(f, policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	y, err := policy.ParseEnv([]byte(`version: code-1
listeners: {public: "127.0.0.1:0"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free: {algorithm: fixed_window, rate: 3, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo, cost: 2}
`), "y.yaml", policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.AnonymousPlan.Limits[0], y.AnonymousPlan.Limits[0]
	if a.StoreName != b.StoreName || a.Limit != b.Limit || p.Match("GET", "/api/x").Cost != 2 {
		t.Fatalf("from code %+v, from YAML %+v", a, b)
	}
	f.Plans["free"] = policy.PlanSpec{LimitSpec: policy.LimitSpec{Rate: 0, Period: time.Minute}}
	var ve *policy.ValidationError
	if _, err := policy.Compile(f, policy.Env{}); !errors.As(err, &ve) || !strings.Contains(err.Error(), "plans.free") {
		t.Fatalf("invalid plan from code: %v", err)
	}
}

// TestForLimit: every limit compiles back to itself through SpecOf.
func TestForLimit(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, l := range []tollgate.Limit{
		tollgate.PerMinute(100),
		{Algorithm: tollgate.TokenBucket, Rate: 10, Period: time.Second, Burst: 50},
		{Algorithm: tollgate.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: 2 * time.Second},
		{Algorithm: tollgate.SlidingWindowLog, Rate: 5, Period: time.Minute},
		{Algorithm: tollgate.FixedWindow, Rate: 1000, Period: 24 * time.Hour, Calendar: 1, Zone: paris},
	} {
		p, err := policy.ForLimit(l)
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		got := p.AnonymousPlan.Limits[0].Limit
		if tollgate.LimitName(got) != tollgate.LimitName(l) {
			t.Errorf("ForLimit(%s) enforces %s", tollgate.LimitName(l), tollgate.LimitName(got))
		}
	}
}

// TestLogging: the logging section's settings and their checks.
func TestLogging(t *testing.T) {
	f := policy.File{Version: "l1", Identity: policy.IdentitySpec{AnonymousPlan: "free"},
		Plans: map[string]policy.PlanSpec{"free": {LimitSpec: policy.LimitSpec{Rate: 1, Period: time.Second}}}}
	p, err := policy.Compile(f, policy.Env{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Log.Level != slog.LevelInfo || p.Log.Text || p.Log.AccessSample != 1 || p.Log.AccessPerSecond != 1000 {
		t.Fatalf("defaults: %+v", p.Log)
	}
	half := 0.5
	f.Logging = policy.LogSpec{Level: "debug", Format: "text", AccessSample: &half, AccessPerSecond: 50}
	if p, err = policy.Compile(f, policy.Env{Secret: make([]byte, 32)}); err != nil || p.Log.Level != slog.LevelDebug || !p.Log.Text ||
		p.Log.AccessSample != 0.5 || p.Log.AccessPerSecond != 50 {
		t.Fatalf("set: %+v %v", p.Log, err)
	}
	two := 2.0
	f.Logging = policy.LogSpec{Level: "loud", Format: "xml", AccessSample: &two, AccessPerSecond: -1}
	_, err = policy.Compile(f, policy.Env{Secret: make([]byte, 32)})
	for _, want := range []string{"logging.level", "logging.format", "logging.access_sample", "logging.access_per_second"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no problem at %s: %v", want, err)
		}
	}
}
