package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/vectors"
)

// RunSettler runs the part of the suite about settling reservations
// ([tollgate.Settler]): the settle vectors, once per ID, the TTL, groups,
// invalid settlements, and exact accounting under concurrency.
func RunSettler(t *testing.T, newStore NewStore) {
	t.Run("Vectors", func(t *testing.T) { testSettleVectors(t, newStore(t)) })
	t.Run("Once", func(t *testing.T) { testSettleOnce(t, newStore(t)) })
	t.Run("Expired", func(t *testing.T) { testSettleExpired(t, newStore(t)) })
	t.Run("Group", func(t *testing.T) { testSettleGroup(t, newStore(t)) })
	t.Run("Invalid", func(t *testing.T) { testSettleInvalid(t, newStore(t)) })
	t.Run("Concurrency", func(t *testing.T) { RunSettleConcurrency(t, []tollgate.Store{newStore(t)}) })
}

var reservations atomic.Int64

// reservationID returns an id no other reservation of this process has.
func reservationID() string { return fmt.Sprintf("r%d", reservations.Add(1)) }

// settleOne settles a reservation of one request.
func settleOne(s tollgate.Store, req algo.Request, age time.Duration, id string, actual int64) (algo.Settled, error) {
	return s.SettleAll(context.Background(), algo.Settlement{ID: id, Age: age, TTL: algo.MaxSettleTTL,
		Items: []algo.SettleItem{{Request: req, Actual: actual}}})
}

func testSettleVectors(t *testing.T, s tollgate.Store) {
	vectors.RunSettle(t, func(t *testing.T) (vectors.DecideFunc, vectors.SettleFunc) {
		p := policy(t)
		decide := func(l algo.Limit, now time.Time, a vectors.Ask) (algo.Decision, error) {
			return s.Allow(context.Background(), algo.Request{Name: p, Subject: "vector", Limit: l, Cost: a.Cost, Now: now})
		}
		settle := func(l algo.Limit, now time.Time, a vectors.SettleAsk) (algo.Decision, error) {
			req := algo.Request{Name: p, Subject: "vector", Limit: l, Cost: a.Estimate, Now: now}
			out, err := settleOne(s, req, now.Sub(a.ReservedAt), reservationID(), a.Actual)
			if err != nil {
				return algo.Decision{}, err
			}
			if out.Outcome != algo.SettleApplied {
				return algo.Decision{}, fmt.Errorf("outcome %v, want applied", out.Outcome)
			}
			return out.Decisions[0], nil
		}
		return decide, settle
	})
}

// settleLimits are the algorithms that settle, under a limit of 100 per
// day.
func settleLimits() []algo.Limit {
	var ls []algo.Limit
	for _, a := range algo.Algorithms() {
		if l := limitFor(a, 100, 24*time.Hour); l.CanSettle() {
			ls = append(ls, l)
		}
	}
	return ls
}

// testSettleOnce: a settle retried with its ID changes nothing, however
// many arrive at once, and an ID is its group's: another group's
// reservation of the same ID settles.
func testSettleOnce(t *testing.T, s tollgate.Store) {
	for _, l := range settleLimits() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			p := policy(t)
			req := algo.Request{Name: p, Subject: "once", Limit: l, Cost: 40, Now: base}
			other := req
			other.Subject = "other"
			allow(t, s, p, "once", l, 40, base)
			allow(t, s, p, "other", l, 40, base)
			id := reservationID()
			var applied atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					out, err := settleOne(s, req, 0, id, 10)
					if err != nil {
						t.Error(err)
						return
					}
					switch out.Outcome {
					case algo.SettleApplied:
						applied.Add(1)
					case algo.SettleRepeated:
					default:
						t.Errorf("outcome %v, want applied or repeated", out.Outcome)
					}
					if r := out.Decisions[0].Remaining; r != 90 {
						t.Errorf("remaining %d after the settle, want 90: settled %s", r, map[bool]string{true: "twice", false: "never"}[r > 90])
					}
				})
			}
			wg.Wait()
			if n := applied.Load(); n != 1 {
				t.Errorf("%d of 8 settles of one id applied, want 1", n)
			}
			out, err := settleOne(s, other, 0, id, 10)
			if err != nil || out.Outcome != algo.SettleApplied {
				t.Errorf("another group's reservation of the same id: %v, %v; want applied", out.Outcome, err)
			}
		})
	}
}

// testSettleExpired: a settle as old as its TTL changes nothing, a debt
// included, and says so.
func testSettleExpired(t *testing.T, s tollgate.Store) {
	for _, l := range settleLimits() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			p := policy(t)
			allow(t, s, p, "late", l, 40, base)
			req := algo.Request{Name: p, Subject: "late", Limit: l, Cost: 40, Now: base.Add(time.Minute)}
			for _, actual := range []int64{0, 90} {
				out, err := s.SettleAll(context.Background(), algo.Settlement{ID: reservationID(), Age: time.Minute, TTL: time.Minute,
					Items: []algo.SettleItem{{Request: req, Actual: actual}}})
				if err != nil {
					t.Fatal(err)
				}
				if out.Outcome != algo.SettleExpired {
					t.Errorf("actual %d: outcome %v, want expired", actual, out.Outcome)
				}
				if d := out.Decisions[0]; d.Debt != 0 || d.Remaining != 60 {
					t.Errorf("actual %d: remaining %d, debt %d after an expired settle; want 60, 0 (the estimate stands)", actual, d.Remaining, d.Debt)
				}
			}
		})
	}
}

// testSettleGroup: the items of a reservation settle together, each by
// its own estimate and actual; a debt on one makes later requests of the
// group wait, refused with a RetryAfter, while a query is answered.
func testSettleGroup(t *testing.T, s tollgate.Store) {
	p1, p2 := policy(t), policy(t)
	perMin := algo.Request{Name: p1, Subject: "user", Tag: "tenant", Limit: limitFor(algo.TokenBucket, 100, time.Minute), Now: base}
	perDay := algo.Request{Name: p2, Subject: "tenant", Tag: "tenant", Limit: limitFor(algo.FixedWindow, 1000, 24*time.Hour), Now: base}
	perMin.Cost, perDay.Cost = 50, 50
	allowAll(t, s, perMin, perDay)
	out, err := s.SettleAll(context.Background(), algo.Settlement{ID: reservationID(), TTL: time.Hour,
		Items: []algo.SettleItem{{Request: perMin, Actual: 130}, {Request: perDay, Actual: 130}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Outcome != algo.SettleApplied || len(out.Decisions) != 2 {
		t.Fatalf("outcome %v with %d decisions, want applied with 2", out.Outcome, len(out.Decisions))
	}
	if d := out.Decisions[0]; d.Debt != 30 || d.Remaining != 0 {
		t.Errorf("per minute after 130 of 100: debt %d remaining %d, want 30, 0", d.Debt, d.Remaining)
	}
	if d := out.Decisions[1]; d.Debt != 0 || d.Remaining != 870 {
		t.Errorf("per day after 130 of 1000: debt %d remaining %d, want 0, 870", d.Debt, d.Remaining)
	}
	perMin.Cost, perDay.Cost = 1, 1
	ds := allowAll(t, s, perMin, perDay)
	// 30 owed and 1 more, at 100 a minute: 31 × 600 ms.
	if ds[0].Allowed || ds[0].RetryAfter != 18600*time.Millisecond {
		t.Errorf("a request in debt: allowed %v retry %v, want refused, retry 18.6s", ds[0].Allowed, ds[0].RetryAfter)
	}
	if ds[1].Remaining != 870 {
		t.Errorf("per day after a refused group: remaining %d, want 870 (nothing charged)", ds[1].Remaining)
	}
	perMin.Cost = 0
	if d, err := s.Allow(context.Background(), perMin); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("a query in debt: allowed %v remaining %d (%v), want allowed, 0", d.Allowed, d.Remaining, err)
	}
}

// testSettleInvalid: a settlement a store cannot apply is refused with
// its sentinel, and changes nothing.
func testSettleInvalid(t *testing.T, s tollgate.Store) {
	p := policy(t)
	l := limitFor(algo.FixedWindow, 100, time.Hour)
	ok := algo.Request{Name: p, Subject: "bad", Limit: l, Cost: 10, Now: base}
	allow(t, s, p, "bad", l, 10, base)
	item := func(r algo.Request, actual int64) algo.SettleItem { return algo.SettleItem{Request: r, Actual: actual} }
	with := func(f func(r *algo.Request)) algo.Request { r := ok; f(&r); return r }
	cases := []struct {
		name string
		st   algo.Settlement
		want error
	}{
		{"no id", algo.Settlement{TTL: time.Hour, Items: []algo.SettleItem{item(ok, 1)}}, algo.ErrInvalidRequest},
		{"an id longer than 128 bytes", algo.Settlement{ID: string(make([]byte, 129)), TTL: time.Hour, Items: []algo.SettleItem{item(ok, 1)}}, algo.ErrInvalidRequest},
		{"no TTL", algo.Settlement{ID: "x", Items: []algo.SettleItem{item(ok, 1)}}, algo.ErrInvalidRequest},
		{"a TTL over a day", algo.Settlement{ID: "x", TTL: 25 * time.Hour, Items: []algo.SettleItem{item(ok, 1)}}, algo.ErrInvalidRequest},
		{"a negative age", algo.Settlement{ID: "x", Age: -time.Millisecond, TTL: time.Hour, Items: []algo.SettleItem{item(ok, 1)}}, algo.ErrInvalidRequest},
		{"no items", algo.Settlement{ID: "x", TTL: time.Hour}, algo.ErrInvalidRequest},
		{"a negative actual cost", algo.Settlement{ID: "x", TTL: time.Hour, Items: []algo.SettleItem{item(ok, -1)}}, algo.ErrNegativeCost},
		{"an estimate above the capacity: never admitted", algo.Settlement{ID: "x", TTL: time.Hour,
			Items: []algo.SettleItem{item(with(func(r *algo.Request) { r.Cost = 101 }), 1)}}, algo.ErrCostExceedsBurst},
		{"a negative estimate", algo.Settlement{ID: "x", TTL: time.Hour, Items: []algo.SettleItem{item(with(func(r *algo.Request) { r.Cost = -1 }), 1)}}, algo.ErrNegativeCost},
		{"a sliding log cannot settle", algo.Settlement{ID: "x", TTL: time.Hour,
			Items: []algo.SettleItem{item(with(func(r *algo.Request) { r.Limit.Algorithm = algo.SlidingWindowLog }), 1)}}, algo.ErrSettleUnsupported},
		{"a leaky bucket cannot settle", algo.Settlement{ID: "x", TTL: time.Hour,
			Items: []algo.SettleItem{item(with(func(r *algo.Request) { r.Limit.Algorithm = algo.LeakyBucket }), 1)}}, algo.ErrSettleUnsupported},
		{"items of two groups", algo.Settlement{ID: "x", TTL: time.Hour,
			Items: []algo.SettleItem{item(ok, 1), item(with(func(r *algo.Request) { r.Name, r.Subject = policy(t), "elsewhere" }), 1)}}, algo.ErrMixedGroup},
		{"one key twice", algo.Settlement{ID: "x", TTL: time.Hour, Items: []algo.SettleItem{item(ok, 1), item(ok, 1)}}, algo.ErrInvalidRequest},
		{"a reservation before the Unix epoch", algo.Settlement{ID: "x", Age: 100 * 365 * 24 * time.Hour, TTL: algo.MaxSettleTTL,
			Items: []algo.SettleItem{item(with(func(r *algo.Request) { r.Now = time.UnixMilli(1000) }), 1)}}, algo.ErrInvalidRequest},
	}
	for _, c := range cases {
		_, err := s.SettleAll(context.Background(), c.st)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		if !algo.IsInvalid(err) {
			t.Errorf("%s: %v is not an invalid request", c.name, err)
		}
	}
	if d := allow(t, s, p, "bad", l, 0, base); d.Remaining != 90 {
		t.Errorf("remaining %d after invalid settlements, want 90: one of them changed the state", d.Remaining)
	}
}

// The load RunSettleConcurrency puts on the stores: so many reservations
// at once, each making so many, on a budget of settleBudget.
const (
	settleGoroutines = 64
	settlePerG       = 20
	settleBudget     = 5000
)

// RunSettleConcurrency reserves and settles from many goroutines at once,
// spread over stores (instances sharing one backend), every algorithm
// that settles, at one instant: the tokens the reservations admitted
// actually cost never pass the budget when no estimate is below its
// actual (the bound of [algo.Prepared.Settle] with every term 0), and
// when all are settled the budget has been charged their actual costs
// exactly, a debt included.
func RunSettleConcurrency(t *testing.T, stores []tollgate.Store) {
	for _, l := range settleLimits() {
		l.Rate = settleBudget
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			seed := testenv.Seed(t)
			p := policy(t)
			var spent, excess atomic.Int64
			var wg sync.WaitGroup
			for g := range settleGoroutines {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(g)))
					s := stores[g%len(stores)]
					for range settlePerG {
						est := 1 + rng.Int64N(200)
						actual := rng.Int64N(est + 1)
						if g == 0 {
							actual = est + 50 // one goroutine's calls cost more than estimated
						}
						req := algo.Request{Name: p, Subject: "budget", Limit: l, Cost: est, Now: base}
						d, err := s.Allow(context.Background(), req)
						if err != nil {
							t.Error(err)
							return
						}
						if !d.Allowed {
							continue
						}
						if _, err := settleOne(s, req, 0, reservationID(), actual); err != nil {
							t.Error(err)
							return
						}
						spent.Add(actual)
						excess.Add(max(0, actual-est))
					}
				})
			}
			wg.Wait()
			if got, bound := spent.Load(), int64(settleBudget)+excess.Load(); got > bound {
				t.Errorf("admitted reservations cost %d, over the bound %d (budget %d + excess %d)", got, bound, settleBudget, excess.Load())
			}
			if spent.Load() < settleBudget/2 {
				t.Errorf("admitted reservations cost only %d of %d: refunds were lost", spent.Load(), settleBudget)
			}
			d := allow(t, stores[0], p, "budget", l, 0, base)
			if want := max(0, settleBudget-spent.Load()); d.Remaining != want {
				t.Errorf("remaining %d after every settle, want %d: the budget was not charged the actual costs (%d)", d.Remaining, want, spent.Load())
			}
		})
	}
}
