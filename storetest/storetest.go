// Package storetest is the conformance suite every [tollgate.Store] must
// pass, in the manner of testing/slogtest: a store package calls [Run] from
// its own tests with a constructor, and gets the shared test vectors, the
// invalid-input rules, isolation of keys (no two distinct requests share
// state, whatever their names hold), and exact admission under
// concurrency. Its random choices differ from run to run: a failure logs
// their seed, and the environment variable TOLLGATE_TEST_SEED set to it
// makes the same choices again.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/vectors"
)

// NewStore returns a store for one test. Stores from successive calls may
// share state (one Redis server, say): the suite keeps tests apart with
// unique policy names. The suite's requests carry explicit times
// (algo.Request.Now) from 1970 to 2100: a store that also forgets state by
// its own clock, as the memory store's background sweep does, must not
// do so under the suite (memory.Options.SweepInterval -1), or it drops
// keys the suite is still using.
type NewStore func(t *testing.T) tollgate.Store

var seq atomic.Int64

// policy returns a policy name no other test in this process uses.
func policy(t *testing.T) string {
	return fmt.Sprintf("storetest-%d", seq.Add(1))
}

// base is an aligned instant the suite's explicit times start from.
var base = time.UnixMilli(1_800_000_000_000)

// Run runs the whole suite against the stores newStore makes: every part
// of the [tollgate.Store] contract, which a store implements whole.
func Run(t *testing.T, newStore NewStore) {
	RunDecisions(t, newStore)
	t.Run("Guard", func(t *testing.T) { RunGuard(t, newStore(t)) })
	t.Run("Reserver", func(t *testing.T) { RunReserver(t, newStore(t)) })
	t.Run("Leases", func(t *testing.T) { RunLeases(t, newStore(t)) })
	t.Run("Settler", func(t *testing.T) { RunSettler(t, newStore) })
	t.Run("Multi", func(t *testing.T) { RunMulti(t, newStore) })
	t.Run("Health", func(t *testing.T) { testHealth(t, newStore) })
	t.Run("Reset", func(t *testing.T) { RunReset(t, newStore(t)) })
}

// RunDecisions runs the part of the suite about single decisions (Allow):
// the shared test vectors, invalid input, isolation of keys, the store's
// clock, calendar windows and exact admission under concurrency.
func RunDecisions(t *testing.T, newStore NewStore) {
	t.Run("Vectors", func(t *testing.T) { testVectors(t, newStore) })
	t.Run("InvalidInput", func(t *testing.T) { testInvalidInput(t, newStore(t)) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, newStore(t)) })
	t.Run("Within", func(t *testing.T) { testWithin(t, newStore(t)) })
	t.Run("PushBack", func(t *testing.T) { testPushBack(t, newStore(t)) })
	t.Run("GiveBack", func(t *testing.T) { testGiveBack(t, newStore(t)) })
	t.Run("RefusalConsumesNothing", func(t *testing.T) { testRefusalConsumesNothing(t, newStore(t)) })
	t.Run("StoreClock", func(t *testing.T) { testStoreClock(t, newStore(t)) })
	t.Run("Calendar", func(t *testing.T) { RunCalendar(t, newStore(t)) })
	t.Run("HostileSubjects", func(t *testing.T) { testHostileSubjects(t, newStore(t)) })
	t.Run("DistinctKeys", func(t *testing.T) { testDistinctKeys(t, newStore(t)) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceledContext(t, newStore(t)) })
	t.Run("Concurrency", func(t *testing.T) { RunConcurrency(t, []tollgate.Store{newStore(t)}) })
}

// testHealth: a store answers Ping while it can decide.
func testHealth(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping of a working store: %v", err)
	}
}

func testVectors(t *testing.T, newStore NewStore) {
	s := newStore(t)
	vectors.Run(t, func(t *testing.T) vectors.DecideFunc {
		p := policy(t)
		return func(l algo.Limit, now time.Time, a vectors.Ask) (algo.Decision, error) {
			req := algo.Request{Name: p, Subject: "vector", Limit: l, Cost: a.Cost, Now: now, Within: a.Within}
			if a.Push != 0 {
				return s.PushBack(context.Background(), req, a.Push)
			}
			return s.Allow(context.Background(), req)
		}
	})
}

// limitFor returns a limit of n per period for algorithm a (burst n).
func limitFor(a algo.Algorithm, n int64, period time.Duration) algo.Limit {
	return algo.Limit{Algorithm: a, Rate: n, Period: period}
}

func allow(t *testing.T, s tollgate.Store, p, subject string, l algo.Limit, cost int64, now time.Time) algo.Decision {
	t.Helper()
	d, err := s.Allow(context.Background(), algo.Request{Name: p, Subject: subject, Limit: l, Cost: cost, Now: now})
	if err != nil {
		t.Fatalf("Allow(%s, cost %d): %v", subject, cost, err)
	}
	return d
}

// eachAlgorithm runs check as a subtest of t for every algorithm, named
// after it.
func eachAlgorithm(t *testing.T, check func(t *testing.T, a algo.Algorithm)) {
	for _, a := range algo.Algorithms() {
		t.Run(a.String(), func(t *testing.T) { check(t, a) })
	}
}

// invalidInput is a request testInvalidInput makes invalid: its cost and
// limit, and the error it must be refused with.
type invalidInput struct {
	cost int64
	lim  algo.Limit
	want error
}

// invalidInputs returns the invalid requests of testInvalidInput on l, a
// limit of 10 under algorithm a.
func invalidInputs(a algo.Algorithm, l algo.Limit) []invalidInput {
	return []invalidInput{
		{11, l, algo.ErrCostExceedsBurst},
		{1 << 40, l, algo.ErrCostExceedsBurst},
		{-1, l, algo.ErrNegativeCost},
		{1, algo.Limit{Algorithm: a, Rate: 0, Period: time.Minute}, algo.ErrInvalidLimit},
		{1, algo.Limit{Algorithm: a, Rate: 10, Period: 0}, algo.ErrInvalidLimit},
		{1, algo.Limit{Algorithm: a, Rate: 10, Period: time.Minute, Burst: -5}, algo.ErrInvalidLimit},
	}
}

func testInvalidInput(t *testing.T, s tollgate.Store) {
	eachAlgorithm(t, func(t *testing.T, a algo.Algorithm) { checkInvalidInput(t, s, a) })
}

// checkInvalidInput checks, under algorithm a, that invalid requests are
// refused with their errors, with or without a handle, and change
// nothing stored; and that a request carrying its handle is decided as
// one without.
func checkInvalidInput(t *testing.T, s tollgate.Store, a algo.Algorithm) {
	p := policy(t)
	l := limitFor(a, 10, time.Minute)
	ctx := context.Background()
	allow(t, s, p, "x", l, 3, base)
	h, err := algo.NewHandle(p, l)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range invalidInputs(a, l) {
		_, err := s.Allow(ctx, algo.Request{Name: p, Subject: "x", Limit: c.lim, Cost: c.cost, Now: base})
		if !errors.Is(err, c.want) {
			t.Errorf("cost %d, limit %+v: err = %v, want %v", c.cost, c.lim, err, c.want)
		}
		// The same request, carrying a handle of the valid limit
		// that no longer describes it: validated all the same.
		req := h.Request("x", c.cost)
		req.Limit, req.Now = c.lim, base
		if _, err := s.Allow(ctx, req); !errors.Is(err, c.want) {
			t.Errorf("with a stale handle: cost %d, limit %+v: err = %v, want %v", c.cost, c.lim, err, c.want)
		}
	}
	// A request that carries its handle is decided as one without.
	req := h.Request("x", 1)
	req.Now = base
	if d, err := s.Allow(ctx, req); !meets(d, err, allowed, left(6)) {
		t.Errorf("with its handle: %+v, %v; want allowed, 6 left", d, err)
	}
	// Nothing stored was lost or changed by the bad requests.
	if d := allow(t, s, p, "x", l, 0, base); d.Remaining != 6 {
		t.Errorf("after invalid requests Remaining = %d, want 6", d.Remaining)
	}
}

func testIsolation(t *testing.T, s tollgate.Store) {
	eachAlgorithm(t, func(t *testing.T, a algo.Algorithm) {
		p1, p2 := policy(t), policy(t)
		l := limitFor(a, 3, time.Minute)
		allow(t, s, p1, "alice", l, 3, base)
		if d := allow(t, s, p1, "alice", l, 1, base); d.Allowed {
			t.Fatal("alice was allowed past her limit")
		}
		if d := allow(t, s, p1, "bob", l, 1, base); !meets(d, nil, allowed, left(2)) {
			t.Errorf("bob shares alice's budget: %+v", d)
		}
		if d := allow(t, s, p2, "alice", l, 1, base); !meets(d, nil, allowed, left(2)) {
			t.Errorf("a second policy shares alice's budget: %+v", d)
		}
	})
	// The same policy name under another algorithm keeps its own state and
	// never reads the other's.
	p := policy(t)
	for _, a := range algo.Algorithms() {
		if d := allow(t, s, p, "carol", limitFor(a, 4, time.Minute), 2, base); !meets(d, nil, allowed, left(2)) {
			t.Errorf("%v under a shared policy name: %+v", a, d)
		}
	}
}

func testRefusalConsumesNothing(t *testing.T, s tollgate.Store) {
	eachAlgorithm(t, func(t *testing.T, a algo.Algorithm) {
		p := policy(t)
		l := limitFor(a, 10, time.Minute)
		allow(t, s, p, "x", l, 6, base)
		for range 5 {
			if d := allow(t, s, p, "x", l, 5, base); !meets(d, nil, refused, left(4), retryIn(0, forever)) {
				t.Fatalf("cost 5 with 4 left: %+v", d)
			}
		}
		if d := allow(t, s, p, "x", l, 4, base); !meets(d, nil, allowed, left(0)) {
			t.Fatalf("cost 4 with 4 left after refusals: %+v", d)
		}
	})
}

func testStoreClock(t *testing.T, s tollgate.Store) {
	eachAlgorithm(t, func(t *testing.T, a algo.Algorithm) {
		p := policy(t)
		l := limitFor(a, 5, 30*24*time.Hour)
		var zero time.Time
		for i := range 5 {
			if d := allow(t, s, p, "clock", l, 1, zero); !meets(d, nil, allowed, left(int64(4-i))) {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		d := allow(t, s, p, "clock", l, 1, zero)
		if !meets(d, nil, refused, retryIn(0, l.Period*2), resetBeyond(0)) {
			t.Fatalf("6th request: %+v", d)
		}
	})
}

func testHostileSubjects(t *testing.T, s tollgate.Store) {
	subjects := []string{
		"", "{", "}", "{}", "a}b{c", "{tag}", "h:abc", " ", "\x00", "\r\n", "\xff\xfe",
		"ünïcödé", strings.Repeat("k", 1<<20), strings.Repeat("k", 1<<20) + "x",
	}
	for _, a := range []algo.Algorithm{algo.GCRA, algo.SlidingWindowLog, algo.SlidingWindowCounter} {
		checkSubjectsApart(t, s, a, subjects)
	}
}

// checkSubjectsApart checks that each of subjects, under algorithm a,
// spends a limit of its own: all are admitted a first request that
// spends it whole, and refused the next.
func checkSubjectsApart(t *testing.T, s tollgate.Store, a algo.Algorithm, subjects []string) {
	p := policy(t)
	l := limitFor(a, 2, time.Minute)
	for _, sub := range subjects {
		if d := allow(t, s, p, sub, l, 2, base); !d.Allowed {
			t.Errorf("%v: subject %.20q: first request refused: %+v", a, sub, d)
		}
	}
	for _, sub := range subjects {
		if d := allow(t, s, p, sub, l, 1, base); d.Allowed {
			t.Errorf("%v: subject %.20q: over-limit request allowed (subjects collide?)", a, sub)
		}
	}
}

func testCanceledContext(t *testing.T, s tollgate.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Allow(ctx, algo.Request{Name: policy(t), Subject: "x", Limit: limitFor(algo.GCRA, 1, time.Second), Cost: 1})
	if err == nil {
		t.Error("Allow with a canceled context succeeded")
	}
}

// RunConcurrency checks that, for every algorithm, 200 goroutines making
// 5,000 attempts at cost 1 on one key with a budget of 1,000 admit exactly
// 1,000: once at a fixed explicit time, once on the store's own clock with a
// rate slow enough that refill cannot blur the count. The goroutines spread
// over stores, which must all share state (for Redis: independent clients,
// as separate gateway instances would be).
func RunConcurrency(t *testing.T, stores []tollgate.Store) {
	for _, a := range algo.Algorithms() {
		t.Run(a.String()+"/fixed", func(t *testing.T) { checkExactAdmission(t, stores, a, base) })
		t.Run(a.String()+"/store", func(t *testing.T) { checkExactAdmission(t, stores, a, time.Time{}) })
	}
}

// checkExactAdmission makes RunConcurrency's 5,000 attempts on a budget of
// 1,000 under algorithm a, at now (zero: the store's clock), and checks
// that exactly 1,000 are admitted.
func checkExactAdmission(t *testing.T, stores []tollgate.Store, a algo.Algorithm, now time.Time) {
	const goroutines, perG, budget = multiGoroutines, multiPerG, 1000
	p := policy(t)
	l := limitFor(a, budget, multiPeriod)
	var admits, refusals atomic.Int64
	hammer(t, goroutines, perG, stores, func(s tollgate.Store, _ int) {
		d, err := s.Allow(context.Background(), algo.Request{Name: p, Subject: "hot", Limit: l, Cost: 1, Now: now})
		switch {
		case err != nil:
			t.Error(err)
		case d.Allowed:
			admits.Add(1)
		default:
			refusals.Add(1)
		}
	})
	if t.Failed() {
		return
	}
	if admits.Load() != budget || refusals.Load() != goroutines*perG-budget {
		t.Fatalf("admitted %d and refused %d of %d, want exactly %d admitted",
			admits.Load(), refusals.Load(), goroutines*perG, budget)
	}
}
