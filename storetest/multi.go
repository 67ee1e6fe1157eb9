package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
)

// RunMulti runs the all-or-nothing suite (AllowAll).
func RunMulti(t *testing.T, newStore NewStore) {
	t.Run("AllOrNothing", func(t *testing.T) { testAllOrNothing(t, newStore(t)) })
	t.Run("MatchesModel", func(t *testing.T) { testMultiModel(t, newStore(t)) })
	t.Run("InvalidGroups", func(t *testing.T) { testInvalidGroups(t, newStore(t)) })
	t.Run("Concurrency", func(t *testing.T) { RunMultiConcurrency(t, []tollgate.Store{newStore(t)}) })
}

func allowAll(t *testing.T, s tollgate.Store, reqs ...algo.Request) []algo.Decision {
	t.Helper()
	ds, err := s.AllowAll(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(reqs) {
		t.Fatalf("%d decisions for %d requests", len(ds), len(reqs))
	}
	return ds
}

func testAllOrNothing(t *testing.T, s tollgate.Store) {
	for _, a := range algo.Algorithms() {
		t.Run(a.String(), func(t *testing.T) { checkAllOrNothing(t, s, a) })
	}
}

// checkAllOrNothing checks that a group of a short limit under algorithm
// a and a long fixed window is refused whole when the short limit
// refuses: the long one is not charged.
func checkAllOrNothing(t *testing.T, s tollgate.Store, a algo.Algorithm) {
	p1, p2 := policy(t), policy(t)
	short := algo.Request{Name: p1, Subject: "x", Limit: limitFor(a, 3, time.Minute), Cost: 1, Now: base}
	long := algo.Request{Name: p2, Subject: "x", Limit: limitFor(algo.FixedWindow, 5, time.Hour), Cost: 1, Now: base}
	for i := 0; i < 3; i++ {
		if ds := allowAll(t, s, short, long); !tollgate.Admitted(ds) {
			t.Fatalf("request %d refused: %+v", i, ds)
		}
	}
	// The short limit refuses the 4th; the long one would admit it.
	ds := allowAll(t, s, short, long)
	if !meets(ds[0], nil, refused, retryIn(0, forever)) || !ds[1].Allowed {
		t.Fatalf("4th: %+v, want the short limit to refuse", ds)
	}
	if !meets(ds[1], nil, left(2), retryAfter(0)) {
		t.Errorf("the long limit was charged for a refused request: %+v", ds[1])
	}
	// The long limit really kept its 2.
	if d := allow(t, s, p2, "x", long.Limit, 2, base); !meets(d, nil, allowed, left(0)) {
		t.Errorf("long limit after the refusal: %+v", d)
	}
}

// testMultiModel drives random groups of limits and checks every decision
// against the pure algorithms applied all or nothing.
func testMultiModel(t *testing.T, s tollgate.Store) {
	seed := uint32(testenv.Seed(t))
	next := func(n int) int64 { seed = seed*1664525 + 1013904223; return int64((seed >> 8) % uint32(n)) }
	for round := 0; round < 12; round++ {
		reqs := randomGroup(t, next)
		states := make([]algo.State, len(reqs))
		now := base.Add(time.Duration(next(1000)) * time.Millisecond)
		for step := 0; step < 40; step++ {
			now = now.Add(time.Duration(next(120)) * time.Millisecond)
			for i := range reqs {
				reqs[i].Now = now
				reqs[i].Cost = next(int(reqs[i].Limit.Capacity()) + 1)
			}
			states = checkModelStep(t, s, reqs, states, round, step)
		}
	}
}

// randomGroup returns a group of 1 to 4 requests of testMultiModel, each
// on a limit of its own drawn with next (next(n) is a number from 0 to
// n-1), without their times and costs.
func randomGroup(t *testing.T, next func(n int) int64) []algo.Request {
	reqs := make([]algo.Request, 1+int(next(4)))
	for i := range reqs {
		a := algo.Algorithm(next(6))
		l := algo.Limit{Algorithm: a, Rate: 2 + next(8), Period: time.Duration(100+next(900)) * time.Millisecond}
		reqs[i] = algo.Request{Name: policy(t), Subject: "m", Tag: "grp", Limit: l}
	}
	return reqs
}

// checkModelStep checks the decisions of s on the group reqs (step step
// of round round of testMultiModel) against allOrNothing's from states,
// and returns the states after them.
func checkModelStep(t *testing.T, s tollgate.Store, reqs []algo.Request, states []algo.State, round, step int) []algo.State {
	want, after, err := allOrNothing(reqs, states)
	if err != nil {
		t.Fatal(err)
	}
	got := allowAll(t, s, reqs...)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("round %d step %d limit %d (%v, cost %d):\n got %+v\nwant %+v", round, step, i, reqs[i].Limit, reqs[i].Cost, got[i], want[i])
		}
	}
	return after
}

// allOrNothing returns the decisions the pure algorithms make on reqs,
// from states (one per request), applied all or nothing, and the states
// after them: when one request is refused none is charged, and those that
// would have been allowed report their state as it is.
func allOrNothing(reqs []algo.Request, states []algo.State) ([]algo.Decision, []algo.State, error) {
	want := make([]algo.Decision, len(reqs))
	charged := make([]algo.State, len(reqs))
	all := true
	for i, req := range reqs {
		charged[i] = states[i]
		charged[i].Log = states[i].Log.Clone()
		r, _, err := algo.Decide(req.Limit, &charged[i], req.Now.UnixMilli(), req.Cost)
		if err != nil {
			return nil, nil, err
		}
		want[i] = r.Decision()
		all = all && r.Allowed
	}
	if all {
		return want, charged, nil
	}
	for i, req := range reqs {
		if want[i].Allowed {
			st := states[i]
			st.Log = states[i].Log.Clone()
			r, _, _ := algo.Decide(req.Limit, &st, req.Now.UnixMilli(), 0)
			want[i] = r.Decision()
		}
	}
	return want, states, nil
}

func testInvalidGroups(t *testing.T, s tollgate.Store) {
	ctx := context.Background()
	l := limitFor(algo.GCRA, 5, time.Minute)
	a := algo.Request{Name: policy(t), Subject: "a", Limit: l, Cost: 1, Now: base}
	b := algo.Request{Name: policy(t), Subject: "b", Limit: l, Cost: 1, Now: base}
	if _, err := s.AllowAll(ctx, []algo.Request{a, b}); !errors.Is(err, algo.ErrMixedGroup) {
		t.Errorf("two groups: %v", err)
	}
	if _, err := s.AllowAll(ctx, []algo.Request{a, a}); err == nil {
		t.Error("a repeated request was accepted")
	}
	if _, err := s.AllowAll(ctx, nil); err == nil {
		t.Error("no requests accepted")
	}
	big := a
	big.Name, big.Cost = policy(t), 6
	if _, err := s.AllowAll(ctx, []algo.Request{a, big}); !isItemError(err, algo.ErrCostExceedsBurst, 1) {
		t.Errorf("cost above burst in the second request: %v (want an ItemError at index 1)", err)
	}
	bad := a
	bad.Name, bad.Limit = policy(t), algo.Limit{Rate: -1, Period: time.Minute}
	if _, err := s.AllowAll(ctx, []algo.Request{bad, a}); !isItemError(err, algo.ErrInvalidLimit, 0) {
		t.Errorf("invalid limit in the first request: %v (want an ItemError at index 0)", err)
	}
	// Nothing was charged by the invalid calls.
	if d := allow(t, s, a.Name, "a", l, 0, base); d.Remaining != 5 {
		t.Errorf("after invalid groups Remaining = %d, want 5", d.Remaining)
	}
}

// isItemError reports whether err is an [algo.ItemError] of the request
// at index i that is, or wraps, want.
func isItemError(err, want error, i int) bool {
	var item *algo.ItemError
	return errors.Is(err, want) && errors.As(err, &item) && item.Index == i
}

// RunMultiConcurrency checks two all-or-nothing examples under 200
// goroutines spread over stores that share state:
//
//   - several limits on one subject: budgets of 30 and 50 admit exactly 30,
//     and the 50 is charged exactly 30;
//   - a hierarchy: three users limited to 10 each within a tenant limited
//     to 25 admit exactly 25, no user more than 10.
func RunMultiConcurrency(t *testing.T, stores []tollgate.Store) {
	for _, clock := range []string{"fixed", "store"} {
		var now time.Time
		if clock == "fixed" {
			now = base
		}
		t.Run("SeveralLimits/"+clock, func(t *testing.T) { testSeveralLimitsConcurrently(t, stores, now) })
		t.Run("Hierarchy/"+clock, func(t *testing.T) { testHierarchyConcurrently(t, stores, now) })
	}
}

// The load RunMultiConcurrency's checks put on the stores: so many
// goroutines, each making so many calls, and the period of their limits,
// slow enough that refill cannot blur the counts.
const (
	multiGoroutines = 200
	multiPerG       = 25
	multiPeriod     = 30 * 24 * time.Hour
)

// testSeveralLimitsConcurrently checks that budgets of 30 and 50 on one
// subject, at now (zero: the store's clock), admit exactly 30, and that the
// 50 is charged exactly 30.
func testSeveralLimitsConcurrently(t *testing.T, stores []tollgate.Store, now time.Time) {
	p1, p2 := policy(t), policy(t)
	reqs := []algo.Request{
		{Name: p1, Subject: "s", Limit: limitFor(algo.GCRA, 30, multiPeriod), Cost: 1, Now: now},
		{Name: p2, Subject: "s", Limit: limitFor(algo.SlidingWindowLog, 50, multiPeriod), Cost: 1, Now: now},
	}
	var admitted atomic.Int64
	hammer(t, multiGoroutines, multiPerG, stores, func(s tollgate.Store, _ int) {
		ds, err := s.AllowAll(context.Background(), reqs)
		if err != nil {
			t.Error(err)
			return
		}
		if tollgate.Admitted(ds) {
			admitted.Add(1)
		}
	})
	if admitted.Load() != 30 {
		t.Fatalf("admitted %d, want exactly 30", admitted.Load())
	}
	if d := allow(t, stores[0], p2, "s", reqs[1].Limit, 0, now); d.Remaining != 20 {
		t.Fatalf("the 50 budget has %d left, want 20 (charged only with the 30)", d.Remaining)
	}
}

// testHierarchyConcurrently checks that three users limited to 10 each
// within a tenant limited to 25, at now (zero: the store's clock), admit
// exactly 25, no user more than 10.
func testHierarchyConcurrently(t *testing.T, stores []tollgate.Store, now time.Time) {
	pu, pt := policy(t), policy(t)
	users := []string{"u1", "u2", "u3"}
	var perUser [3]atomic.Int64
	hammer(t, multiGoroutines, multiPerG, stores, func(s tollgate.Store, g int) {
		u := g % 3
		ds, err := s.AllowAll(context.Background(), []algo.Request{
			{Name: pu, Subject: users[u], Tag: "tenant-a", Limit: limitFor(algo.TokenBucket, 10, multiPeriod), Cost: 1, Now: now},
			{Name: pt, Subject: "tenant-a", Tag: "tenant-a", Limit: limitFor(algo.FixedWindow, 25, multiPeriod), Cost: 1, Now: now},
		})
		if err != nil {
			t.Error(err)
			return
		}
		if tollgate.Admitted(ds) {
			perUser[u].Add(1)
		}
	})
	total := perUser[0].Load() + perUser[1].Load() + perUser[2].Load()
	if total != 25 {
		t.Fatalf("tenant admitted %d, want exactly 25", total)
	}
	for i := range perUser {
		if perUser[i].Load() > 10 {
			t.Fatalf("user %d admitted %d, more than 10", i, perUser[i].Load())
		}
	}
}

// hammer runs f from the given number of goroutines, perG times each,
// spreading them over stores; f is told its goroutine's number.
func hammer(t *testing.T, goroutines, perG int, stores []tollgate.Store, f func(s tollgate.Store, g int)) {
	t.Helper()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < perG; i++ {
				f(stores[g%len(stores)], g)
			}
		}(g)
	}
	wg.Wait()
}
