package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

const testPolicy = `version: e1
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free:
    limits:
      - {name: minute, algorithm: fixed_window, rate: 3, period: 1m}
      - {name: trial, algorithm: fixed_window, rate: 2, period: 1m, shadow: true}
invalid_key_limit: {algorithm: fixed_window, rate: 2, period: 1m}
routes:
  - {name: slow, path: /slow, upstream: builtin:echo, concurrency: {limit: 1}}
  - {name: search, path: /search, upstream: builtin:echo, global: {algorithm: fixed_window, rate: 2, period: 1m}}
  - name: login
    method: POST
    path: /login
    upstream: builtin:echo
    on_store_failure: fail_closed
    login: {account_field: user, failure_statuses: [401], max_failures: 2, lock: 1m, max_lock: 1h,
            ip_failures: {algorithm: fixed_window, rate: 50, period: 1m}}
  - {name: api, path: /, upstream: builtin:echo}
`

type harness struct {
	p     *policy.Policy
	store *memory.Store
	e     *engine.Engine
	now   time.Time
}

func newFixture(t testing.TB) *harness {
	t.Helper()
	p, err := policy.Parse([]byte(testPolicy), "e.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := &harness{p: p, now: time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)}
	f.store = memory.New(memory.Options{Now: func() time.Time { return f.now }})
	t.Cleanup(func() { f.store.Close() })
	f.e, err = engine.New(engine.Options{Policy: p, Store: f.store, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *harness) route(path string) *policy.Route { return f.p.Match("POST", path) }

func (f *harness) call(path, subject string) engine.Call {
	return engine.Call{Route: f.route(path), Subject: engine.Subject{Kind: "ip", ID: subject, Client: subject, Plan: f.p.AnonymousPlan}}
}

// remaining reports what is left of budget b for subject, without
// spending it.
func (f *harness) remaining(t *testing.T, b *policy.Budget, subject string) int64 {
	t.Helper()
	d, err := f.store.Allow(context.Background(), tollgate.Request{Name: b.StoreName, Subject: subject, Limit: b.Limit, Now: f.now})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestRefusedByConcurrencyChargesNothing: a call refused because the
// route's one slot is taken spends nothing of its rate budget, and the
// slot is free again once the first call is Done.
func TestRefusedByConcurrencyChargesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	minute := f.p.AnonymousPlan.Limits[0]
	first := f.e.Check(ctx, f.call("/slow", "a"))
	if first.Outcome != engine.Allowed {
		t.Fatalf("first call: %v", first.Outcome)
	}
	second := f.e.Check(ctx, f.call("/slow", "a"))
	if second.Outcome != engine.Refused || second.Reason != engine.ReasonConcurrency {
		t.Fatalf("second call: %v reason %v", second.Outcome, second.Reason)
	}
	if got := f.remaining(t, minute, "a"); got != 2 {
		t.Fatalf("remaining %d after one admitted and one refused call, want 2", got)
	}
	first.Done(ctx)
	first.Done(ctx) // a second Done does nothing
	if third := f.e.Check(ctx, f.call("/slow", "a")); third.Outcome != engine.Allowed {
		t.Fatalf("after Done: %v reason %v", third.Outcome, third.Reason)
	}
}

// TestRefusedByPlanGivesBackGlobalPlace: a call its plan refuses holds no
// place in the route's global budget afterwards.
func TestRefusedByPlanGivesBackGlobalPlace(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := range 3 {
		v := f.e.Check(ctx, f.call("/search", "a"))
		want := engine.Allowed
		if i == 2 {
			want = engine.Refused // the global budget of 2
		}
		if v.Outcome != want {
			t.Fatalf("call %d: %v, want %v", i, v.Outcome, want)
		}
		v.Done(ctx)
	}
	f.now = f.now.Add(time.Minute) // both windows roll over
	// b uses up its plan (3); its fourth call is refused by the plan and
	// must give back its held global place.
	for range 3 {
		f.e.Check(ctx, f.call("/", "b")).Done(ctx)
	}
	v := f.e.Check(ctx, f.call("/search", "b"))
	if v.Outcome != engine.Refused || v.Reason != engine.ReasonRate {
		t.Fatalf("b over its plan: %v %v", v.Outcome, v.Reason)
	}
	if c, _ := v.Reported(); c.Budget.Name != "free.minute" {
		t.Fatalf("reported %q, want the plan's limit", c.Budget.Name)
	}
	if got := f.remaining(t, f.route("/search").Global, "route"); got != 2 {
		t.Fatalf("global budget has %d left after a call the plan refused, want 2", got)
	}
}

// TestShadowAfterDone: a shadow budget is not charged before the call
// is done (never a store call before the response), then is charged as
// if enforced.
func TestShadowAfterDone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	trial := f.p.AnonymousPlan.Limits[1]
	if !trial.Shadow {
		t.Fatal("the trial limit should be in shadow")
	}
	v := f.e.Check(ctx, f.call("/", "a"))
	if v.Outcome != engine.Allowed || !v.Deferred() {
		t.Fatalf("%v, deferred %v", v.Outcome, v.Deferred())
	}
	for _, c := range v.Charges {
		if c.Budget == trial {
			t.Fatal("a shadow budget is reported among the charges")
		}
	}
	if got := f.remaining(t, trial, "a"); got != 2 {
		t.Fatalf("shadow budget charged before Done: %d left", got)
	}
	v.Done(ctx)
	if got := f.remaining(t, trial, "a"); got != 1 {
		t.Fatalf("shadow budget after Done: %d left, want 1", got)
	}
}

// TestInvalidKeys: invalid keys are charged to the client address; once
// it is over its budget, even a valid key from it is refused.
func TestInvalidKeys(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	bad := f.call("/", "ip1")
	bad.Key = engine.KeyUnknown
	for i := range 2 {
		if v := f.e.Check(ctx, bad); v.Outcome != engine.Invalid || v.Reason != engine.ReasonInvalidKey {
			t.Fatalf("invalid key %d: %v %v", i, v.Outcome, v.Reason)
		}
	}
	if v := f.e.Check(ctx, bad); v.Outcome != engine.Refused || v.Reason != engine.ReasonInvalidKeys || v.RetryAfter <= 0 {
		t.Fatalf("third invalid key: %v %v retry %v", v.Outcome, v.Reason, v.RetryAfter)
	}
	good := f.call("/", "ip1")
	good.Key, good.Subject.Kind, good.Subject.ID = engine.KeyValid, "key", "k1"
	if v := f.e.Check(ctx, good); v.Outcome != engine.Refused || v.Reason != engine.ReasonInvalidKeys {
		t.Fatalf("valid key from a penalized address: %v %v", v.Outcome, v.Reason)
	}
	good.Subject.Client = "ip2"
	if v := f.e.Check(ctx, good); v.Outcome != engine.Allowed {
		t.Fatalf("valid key from another address: %v %v", v.Outcome, v.Reason)
	}
}

// TestLoginLock: failures the service reports lock the account after
// max_failures; the lock is in place as soon as Answered returns.
func TestLoginLock(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.call("/login", "ip1")
	if v := f.e.Check(ctx, c); v.Outcome != engine.Invalid || v.Reason != engine.ReasonMisconfigured {
		t.Fatalf("login call without an account: %v %v", v.Outcome, v.Reason)
	}
	c.Account = "acct-1"
	for i := range 2 {
		v := f.e.Check(ctx, c)
		if v.Outcome != engine.Allowed {
			t.Fatalf("attempt %d: %v %v", i, v.Outcome, v.Reason)
		}
		v.Answered(ctx, 401)
		v.Done(ctx)
	}
	v := f.e.Check(ctx, c)
	if v.Outcome != engine.Refused || v.Reason != engine.ReasonLoginLocked || v.RetryAfter != time.Minute {
		t.Fatalf("after 2 failures: %v %v retry %v", v.Outcome, v.Reason, v.RetryAfter)
	}
}

// counterValue reads a Prometheus counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
