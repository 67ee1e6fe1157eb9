package engine_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
	rstore "github.com/tollgate/tollgate/store/redis"
)

const denyPolicy = `version: d1
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity: {secret: 0123456789abcdef0123, anonymous_plan: two}
plans:
  two:
    limits:
      - {name: minute, algorithm: sliding_log, rate: 2, period: 1m}
      - {name: hour, algorithm: fixed_window, rate: 100, period: 1h}
routes:
  - {name: fw, path: /fw, upstream: builtin:echo, limit: {algorithm: fixed_window, rate: 10, period: 1m}}
  - {name: sc, path: /sc, upstream: builtin:echo, limit: {algorithm: sliding_counter, rate: 4, period: 1m}}
  - {name: api, path: /, upstream: builtin:echo}
`

// counting counts the calls that reach the store.
type counting struct {
	tollgate.Store
	calls atomic.Int64
}

func (c *counting) Allow(ctx context.Context, r tollgate.Request) (tollgate.Decision, error) {
	c.calls.Add(1)
	return c.Store.Allow(ctx, r)
}

func (c *counting) AllowAll(ctx context.Context, rs []tollgate.Request) ([]tollgate.Decision, error) {
	c.calls.Add(1)
	return c.Store.AllowAll(ctx, rs)
}

// denyFixture is an engine with a deny cache in front of a real Redis,
// on a clock the test sets.
func denyFixture(t *testing.T) (*engine.Engine, *counting, *policy.Policy, *time.Time, *engine.Metrics) {
	t.Helper()
	p, err := policy.Parse([]byte(denyPolicy), "d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	rs, err := rstore.New(srv.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &counting{Store: rs}
	now := time.UnixMilli(1_800_000_000_000)
	m, err := engine.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Policy: p, Store: st, Metrics: m, DenyCacheSize: 1000, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return e, st, p, &now, m
}

func decision(t *testing.T, e *engine.Engine, c engine.Call) tollgate.Decision {
	t.Helper()
	v := e.Check(context.Background(), c)
	v.Done(context.Background())
	got, ok := v.Reported()
	if !ok {
		t.Fatalf("no decision: %+v", v)
	}
	return got.Decision
}

// TestDenyCache checks that refusals are served locally until RetryAfter,
// only for costs at least the refused one, and with the same contract.
func TestDenyCache(t *testing.T) {
	e, st, p, now, m := denyFixture(t)
	start := *now
	call := func(path string, cost int64) engine.Call {
		return engine.Call{Route: p.Match("GET", path), Subject: engine.Subject{Kind: "ip", ID: "k", Client: "k", Plan: p.AnonymousPlan}, Cost: cost}
	}
	decision(t, e, call("/fw", 8))
	d := decision(t, e, call("/fw", 5)) // refused until the window ends
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("refusal: %+v", d)
	}
	calls := st.calls.Load()
	*now = start.Add(10 * time.Second)
	if c := decision(t, e, call("/fw", 5)); c.Allowed || c.RetryAfter != 50*time.Second || c.Remaining != 2 || st.calls.Load() != calls {
		t.Fatalf("cached refusal: %+v (store calls %d -> %d)", c, calls, st.calls.Load())
	}
	if c := decision(t, e, call("/fw", 2)); !c.Allowed || st.calls.Load() != calls+1 {
		t.Fatalf("a request of another cost must still ask the store: %+v", c)
	}
	// A sliding counter's Remaining grows before RetryAfter for costs above
	// 1, so such refusals are not cached; cost-1 refusals are.
	*now = start
	decision(t, e, call("/sc", 4))
	before, hits := st.calls.Load(), counterValue(m.DenyHits)
	for _, cost := range []int64{2, 2, 1, 1, 1} {
		decision(t, e, call("/sc", cost))
	}
	if c, h := st.calls.Load()-before, counterValue(m.DenyHits)-hits; c != 3 || h != 2 {
		t.Fatalf("store calls %d, cache hits %v; want 3 and 2", c, h)
	}
	*now = start.Add(time.Minute)
	if c := decision(t, e, call("/fw", 5)); !c.Allowed {
		t.Fatalf("after RetryAfter: %+v", c)
	}
}

// TestDenyCacheGroup: a group refused by one limit is refused from the
// cache until that limit's RetryAfter, with that limit's decision exact.
func TestDenyCacheGroup(t *testing.T) {
	e, st, p, now, _ := denyFixture(t)
	start := *now
	call := engine.Call{Route: p.Match("GET", "/"), Subject: engine.Subject{Kind: "ip", ID: "g", Client: "g", Plan: p.AnonymousPlan}}
	group := func() []engine.Charge {
		v := e.Check(context.Background(), call)
		v.Done(context.Background())
		return v.Charges
	}
	group()
	group()
	ds := group()
	if ds[0].Decision.Allowed || ds[0].Decision.RetryAfter != time.Minute {
		t.Fatalf("3rd: %+v", ds)
	}
	calls := st.calls.Load()
	*now = start.Add(20 * time.Second)
	ds = group()
	if st.calls.Load() != calls || ds[0].Decision.Allowed || ds[0].Decision.RetryAfter != 40*time.Second || !ds[1].Decision.Allowed {
		t.Fatalf("cached group refusal: %+v (store calls %d -> %d)", ds, calls, st.calls.Load())
	}
	*now = start.Add(time.Minute)
	if ds = group(); !ds[0].Decision.Allowed || !ds[1].Decision.Allowed || st.calls.Load() != calls+1 {
		t.Fatalf("after RetryAfter: %+v", ds)
	}
}

// TestDenyCacheLongSubjectsBounded: the deny cache is bounded by a number
// of refusals, so a subject's length must not count: a caller of
// RLS descriptors charging subjects of 60 KiB (a header's value) kept each
// refused one. Long subjects are remembered by a digest, and the cache
// still answers their refusals without a store call.
func TestDenyCacheLongSubjectsBounded(t *testing.T) {
	e, st, _, _, _ := denyFixture(t)
	b, err := policy.RLSBudget("long", "d", []policy.RLSEntry{{Key: "k"}}, tollgate.Limit{Algorithm: algo.FixedWindow, Rate: 1, Period: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	call := func(sub string) *engine.Verdict {
		return e.Decide(context.Background(), engine.Request{Front: engine.FrontRLS, Descriptors: oneDescriptor{Limited: true, Budget: b, Subject: sub, Hits: 1}})
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	pad := strings.Repeat("x", 60<<10)
	before := heap()
	for i := range 1000 {
		sub := strconv.Itoa(i) + pad
		call(sub)
		if v := call(sub); v.Outcome != engine.Refused {
			t.Fatalf("second call of a 1-an-hour budget: %v", v.Outcome)
		}
	}
	if grew := int64(heap()) - int64(before); grew > 16<<20 {
		t.Errorf("1,000 refused long subjects kept %d MiB", grew>>20)
	}
	calls := st.calls.Load()
	if v := call("999" + pad); v.Outcome != engine.Refused || st.calls.Load() != calls {
		t.Fatalf("a cached refusal of a long subject: %v after %d store calls", v.Outcome, st.calls.Load()-calls)
	}
}

// oneDescriptor is an RLS call of domain d and one descriptor, resolved.
type oneDescriptor engine.Descriptor

func (oneDescriptor) Domain() (string, bool) { return "d", false }
func (oneDescriptor) Len() int               { return 1 }
func (d oneDescriptor) Resolve(int) (engine.Descriptor, error) {
	return engine.Descriptor(d), nil
}
