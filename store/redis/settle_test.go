package redis_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/vectors"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// result returns d as the algorithms' Result.
func result(d algo.Decision) algo.Result {
	return algo.Result{Allowed: d.Allowed, Quota: d.Quota, Remaining: d.Remaining, ResetAfter: d.ResetAfter.Milliseconds(),
		RetryAfter: d.RetryAfter.Milliseconds(), Delay: d.Delay.Milliseconds(), Debt: d.Debt}
}

// settlement returns the settlement id of one reservation of req (its
// Cost the estimate) made age before req.Now, costing actual, with a TTL of
// algo.MaxSettleTTL.
func settlement(id string, req algo.Request, age time.Duration, actual int64) algo.Settlement {
	return algo.Settlement{ID: id, Age: age, TTL: algo.MaxSettleTTL, Items: []algo.SettleItem{{Request: req, Actual: actual}}}
}

// TestSettleVectors runs the shared settle vectors (settle.json) on the
// store, through the function library and through the scripts: each
// settle step is a settlement of its own (a new ID) with a TTL of
// algo.MaxSettleTTL, longer than any vector's reservations live.
func TestSettleVectors(t *testing.T) {
	ctx := context.Background()
	for _, noFn := range []bool{false, true} {
		s, err := rstore.New(srv.NewClient(t), rstore.Options{NoFunctions: noFn})
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("functions=%v", !noFn), func(t *testing.T) {
			vectors.RunSettle(t, func(t *testing.T) (vectors.DecideFunc, vectors.SettleFunc) {
				p := unique("settle-vector")
				decide := func(l algo.Limit, now time.Time, a vectors.Ask) (algo.Decision, error) {
					return s.Allow(ctx, algo.Request{Name: p, Subject: "v", Limit: l, Cost: a.Cost, Now: now, Within: a.Within})
				}
				settle := func(l algo.Limit, now time.Time, a vectors.SettleAsk) (algo.Decision, error) {
					req := algo.Request{Name: p, Subject: "v", Limit: l, Cost: a.Estimate, Now: now}
					st := settlement(unique("r"), req, now.Sub(a.ReservedAt), a.Actual)
					out, err := s.SettleAll(ctx, st)
					if err != nil {
						return algo.Decision{}, err
					}
					want := algo.SettleApplied
					if st.Expired() {
						want = algo.SettleExpired
					}
					if out.Outcome != want || len(out.Decisions) != 1 {
						t.Errorf("settle at %v: outcome %v with %d decisions, want %v with 1", now, out.Outcome, len(out.Decisions), want)
					}
					return out.Decisions[0], nil
				}
				return decide, settle
			})
		})
	}
}

// get returns what key holds, "" for nothing.
func get(t *testing.T, c rueidis.Client, key string) string {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Get().Key(key).Build()).ToString()
	if err != nil && !strings.Contains(err.Error(), "nil") {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// pttl returns key's PTTL (-2: no key).
func pttl(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return v
}

// TestSettleOnce: a settlement is applied once per ID; settling the ID
// again (a retry), whatever its actual costs, changes nothing and answers
// the limit as it stands, with its debt. The ID's marker lives until the
// reservation's TTL is over.
func TestSettleOnce(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := srv.NewClient(t)
	now := time.UnixMilli(1_800_000_000_000 + 100)
	sub := unique("s")
	req := algo.Request{Name: unique("settle-once"), Subject: sub, Limit: algo.Limit{Algorithm: algo.FixedWindow, Rate: 10, Period: time.Hour}, Cost: 8, Now: now}
	if d, err := s.Allow(ctx, req); err != nil || d.Remaining != 2 {
		t.Fatalf("reserving 8 of 10: %+v %v", d, err)
	}
	key := rstore.KeyFor(req)
	for i, step := range []struct {
		reason    string
		id        string
		est, act  int64
		want      algo.SettleOutcome
		remaining int64
		debt      int64
	}{
		{"a refund of 5", "r1", 8, 3, algo.SettleApplied, 7, 0},
		{"the same settle again", "r1", 8, 3, algo.SettleRepeated, 7, 0},
		{"the same ID with other costs", "r1", 8, 0, algo.SettleRepeated, 7, 0},
		{"another reservation's debt: 3 + 12", "r2", 2, 14, algo.SettleApplied, 0, 5},
		{"that one again: the debt as it stands", "r2", 2, 14, algo.SettleRepeated, 0, 5},
	} {
		before, beforeTTL := get(t, c, key), pttl(t, c, key)
		r := req
		r.Cost = step.est
		out, err := s.SettleAll(ctx, settlement(step.id, r, 50*time.Millisecond, step.act)) // of this window
		if err != nil {
			t.Fatalf("%s: %v", step.reason, err)
		}
		if d := out.Decisions[0]; out.Outcome != step.want || d.Remaining != step.remaining || d.Debt != step.debt || !d.Allowed {
			t.Errorf("%s: %v %+v, want %v with %d remaining, debt %d", step.reason, out.Outcome, d, step.want, step.remaining, step.debt)
		}
		if after := get(t, c, key); step.want == algo.SettleRepeated && (after != before || pttl(t, c, key) > beforeTTL) {
			t.Errorf("%s: repeated, yet the state changed", step.reason)
		}
		// An explicit time: the marker lives the reservation's TTL less
		// its age, plus the slack every key gets with one.
		marker := rstore.SettledKey(sub, step.id)
		if p := pttl(t, c, marker); p <= 10*time.Minute.Milliseconds() || p > (10*time.Minute+algo.MaxSettleTTL-50*time.Millisecond).Milliseconds() {
			t.Errorf("step %d: the marker's PTTL is %d ms", i, p)
		}
	}
	// On Redis' clock the marker expires when the reservation does.
	req.Name, req.Now, req.Cost = unique("settle-once-clock"), time.Time{}, 1
	if _, err := s.AllowAll(ctx, []algo.Request{req}); err != nil {
		t.Fatal(err)
	}
	st := algo.Settlement{ID: "r3", Age: 10 * time.Minute, TTL: time.Hour, Items: []algo.SettleItem{{Request: req, Actual: 1}}}
	if out, err := s.SettleAll(ctx, st); err != nil || out.Outcome != algo.SettleApplied {
		t.Fatalf("a settle on Redis' clock: %+v %v", out, err)
	}
	if p := pttl(t, c, rstore.SettledKey(sub, "r3")); p <= 49*time.Minute.Milliseconds() || p > 50*time.Minute.Milliseconds() {
		t.Errorf("on Redis' clock the marker's PTTL is %d ms, want at most the 50 minutes left of the reservation's TTL", p)
	}
}

// TestSettleExpired: a settlement at or past its TTL writes nothing, not
// even its marker (its estimate stands), and answers each limit as a
// query would; the same ID within its TTL is then applied.
func TestSettleExpired(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := srv.NewClient(t)
	now := time.UnixMilli(1_800_000_000_000)
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow, algo.SlidingWindowCounter} {
		sub := unique("s")
		req := algo.Request{Name: unique("settle-expired"), Subject: sub, Limit: algo.Limit{Algorithm: a, Rate: 10, Period: time.Minute}, Cost: 8, Now: now}
		if _, err := s.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
		key := rstore.KeyFor(req)
		before := get(t, c, key)
		later := req
		later.Now = now.Add(time.Second)
		for _, age := range []time.Duration{time.Minute, time.Minute + time.Millisecond, time.Hour} {
			st := settlement("r", later, age, 0)
			st.TTL = time.Minute
			out, err := s.SettleAll(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			q := later
			q.Cost = 0
			want, err := s.Allow(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if out.Outcome != algo.SettleExpired || out.Decisions[0] != want {
				t.Errorf("%v, age %v of a TTL of 1m: %v %+v, want expired and the query's %+v", a, age, out.Outcome, out.Decisions[0], want)
			}
			if get(t, c, key) != before || pttl(t, c, rstore.SettledKey(sub, "r")) != -2 {
				t.Errorf("%v, age %v: an expired settle wrote the state or its marker", a, age)
			}
		}
		st := settlement("r", later, time.Second, 0)
		if out, err := s.SettleAll(ctx, st); err != nil || out.Outcome != algo.SettleApplied || out.Decisions[0].Remaining < 9 {
			t.Errorf("%v: the same ID within its TTL: %+v %v, want applied, refunding", a, out, err)
		}
	}
}

// packState returns the doubles vals as a state value.
func packState(vals ...int64) string {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(b)
}

// TestSettleSlidingCounterFormat: a sliding counter's state is three
// doubles (24 bytes) as a decision writes it, and as keys written before
// settles existed hold it; a settle writes a fourth, the time it wrote the
// state (algo.State.D), and a decision that charges writes three again.
// The store reads both, deciding and settling as package algo does.
func TestSettleSlidingCounterFormat(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := srv.NewClient(t)
	l := algo.Limit{Algorithm: algo.SlidingWindowCounter, Rate: 10, Period: time.Second}
	pl, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	t0 := int64(1_800_000_000_000)
	req := algo.Request{Name: unique("settle-sc"), Subject: "s", Limit: l}
	key := rstore.KeyFor(req)
	// A state of the current window as an older store wrote it: 3 now, 6
	// in the window before.
	st := algo.State{A: t0 / 1000, B: 3, C: 6}
	if err := c.Do(ctx, c.B().Set().Key(key).Value(packState(st.A, st.B, st.C)).Px(time.Hour).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		reason   string
		at       int64
		cost     int64
		settle   bool
		res, act int64
		size     int
	}{
		{"a decision on the old form", 500, 1, false, 0, 0, 24},
		{"a refund of this window's reservation, at 600 ms", 600, 1, true, 500, 0, 32},
		{"a query from a clock 50 ms behind: as of the settle", 550, 0, false, 0, 0, 32},
		{"a charge from that clock: as of the settle, and D 0", 550, 1, false, 0, 0, 24},
		{"a debt", 700, 1, true, 700, 12, 32},
		{"refused, from the settle's time", 650, 1, false, 0, 0, 32},
	} {
		now := t0 + step.at
		r := req
		r.Now, r.Cost = time.UnixMilli(now), step.cost
		var got, want algo.Result
		if step.settle {
			out, err := s.SettleAll(ctx, settlement(unique("r"), r, time.Duration(step.at-step.res)*time.Millisecond, step.act))
			if err != nil {
				t.Fatal(err)
			}
			got = result(out.Decisions[0])
			if _, err := pl.Settle(&want, &st, now, t0+step.res, step.cost, step.act); err != nil {
				t.Fatal(err)
			}
		} else {
			d, err := s.Allow(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			got = result(d)
			if _, err := pl.DecideInto(&want, &st, now, step.cost); err != nil {
				t.Fatal(err)
			}
		}
		if got != want {
			t.Errorf("step %d, %s: %+v, want %+v", i, step.reason, got, want)
		}
		if v := get(t, c, key); len(v) != step.size {
			t.Errorf("step %d, %s: the key holds %d bytes, want %d", i, step.reason, len(v), step.size)
		}
	}
}

// TestSettleInvalid: a settlement the algorithms refuse gives their
// error, as an ItemError for one item's, and writes nothing.
func TestSettleInvalid(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.UnixMilli(1_800_000_000_000)
	l := algo.Limit{Algorithm: algo.TokenBucket, Rate: 10, Period: time.Second}
	c := srv.NewClient(t)
	for _, cs := range []struct {
		reason string
		edit   func(st *algo.Settlement)
		want   error
		item   int // -1: not an item's error
	}{
		{"a sliding log cannot settle", func(st *algo.Settlement) {
			st.Items[1].Request.Limit.Algorithm = algo.SlidingWindowLog
		}, algo.ErrSettleUnsupported, 1},
		{"a shaping leaky bucket cannot settle", func(st *algo.Settlement) {
			st.Items[0].Request.Limit = algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, MaxDelay: time.Second}
		}, algo.ErrSettleUnsupported, 0},
		{"a negative actual cost", func(st *algo.Settlement) { st.Items[1].Actual = -1 }, algo.ErrNegativeCost, 1},
		{"an estimate above the burst", func(st *algo.Settlement) { st.Items[0].Request.Cost = 11 }, algo.ErrCostExceedsBurst, 0},
		{"items of two groups", func(st *algo.Settlement) { st.Items[1].Request.Subject = "other" }, algo.ErrMixedGroup, 1},
		{"an invalid limit", func(st *algo.Settlement) { st.Items[1].Request.Limit.Rate = 0 }, algo.ErrInvalidLimit, 1},
		{"no ID", func(st *algo.Settlement) { st.ID = "" }, algo.ErrInvalidRequest, -1},
		{"an ID over 128 bytes", func(st *algo.Settlement) { st.ID = strings.Repeat("i", 129) }, algo.ErrInvalidRequest, -1},
		{"a TTL over MaxSettleTTL", func(st *algo.Settlement) { st.TTL = algo.MaxSettleTTL + time.Millisecond }, algo.ErrInvalidRequest, -1},
		{"a negative age", func(st *algo.Settlement) { st.Age = -time.Millisecond }, algo.ErrInvalidRequest, -1},
		{"a reservation before the Unix epoch", func(st *algo.Settlement) {
			for i := range st.Items {
				st.Items[i].Request.Now = time.UnixMilli(1000)
			}
			st.Age = 2 * time.Second
		}, algo.ErrInvalidRequest, -1},
		{"no items", func(st *algo.Settlement) { st.Items = nil }, nil, -1},
	} {
		p, sub := unique("settle-invalid"), unique("s")
		st := algo.Settlement{ID: "r", Age: time.Second, TTL: time.Minute, Items: []algo.SettleItem{
			{Request: algo.Request{Name: p, Subject: sub, Limit: l, Cost: 5, Now: now}, Actual: 2},
			{Request: algo.Request{Name: p + "-b", Subject: sub, Limit: l, Cost: 5, Now: now}, Actual: 9},
		}}
		cs.edit(&st)
		_, err := s.SettleAll(ctx, st)
		var ie *algo.ItemError
		switch {
		case err == nil || !strings.HasPrefix(err.Error(), "settling in redis: "):
			t.Errorf("%s: %v, want an error", cs.reason, err)
		case cs.want != nil && !errors.Is(err, cs.want):
			t.Errorf("%s: %v, want %v", cs.reason, err, cs.want)
		case cs.item >= 0 && (!errors.As(err, &ie) || ie.Index != cs.item):
			t.Errorf("%s: %v, want the error of item %d", cs.reason, err, cs.item)
		}
		keys := []string{rstore.SettledKey(sub, st.ID), rstore.SettledKey(sub, "r")}
		for _, it := range st.Items {
			keys = append(keys, rstore.KeyFor(it.Request))
		}
		for _, k := range keys {
			if pttl(t, c, k) != -2 {
				t.Errorf("%s: key %s was written", cs.reason, k)
			}
		}
	}
}

// TestSettleWrongType: a key of another type under an item fails the
// settlement, as that item's error, before anything is written: not the
// other items' states, nor the marker.
func TestSettleWrongType(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := srv.NewClient(t)
	l := algo.Limit{Algorithm: algo.GCRA, Rate: 10, Period: time.Second}
	p, tag := unique("settle-wrongtype"), unique("t")
	reqs := []algo.Request{{Name: p, Subject: "u", Tag: tag, Limit: l, Cost: 5}, {Name: p + "-b", Subject: "u", Tag: tag, Limit: l, Cost: 5}}
	if _, err := s.AllowAll(ctx, reqs[:1]); err != nil {
		t.Fatal(err)
	}
	list := rstore.KeyFor(reqs[1])
	c.Do(ctx, c.B().Lpush().Key(list).Element("x").Build())
	c.Do(ctx, c.B().Pexpire().Key(list).Milliseconds(60_000).Build())
	first := rstore.KeyFor(reqs[0])
	before := get(t, c, first)
	_, err := s.SettleAll(ctx, algo.Settlement{ID: "r", Age: time.Millisecond, TTL: time.Minute,
		Items: []algo.SettleItem{{Request: reqs[0], Actual: 0}, {Request: reqs[1], Actual: 0}}})
	var ie *algo.ItemError
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !errors.As(err, &ie) || ie.Index != 1 {
		t.Fatalf("a list under item 1's key: %v, want WRONGTYPE as item 1's error", err)
	}
	if get(t, c, first) != before || pttl(t, c, rstore.SettledKey(tag, "r")) != -2 {
		t.Error("a failed settle wrote the first item's state or the marker")
	}
	if n, _ := c.Do(ctx, c.B().Llen().Key(list).Build()).AsInt64(); n != 1 {
		t.Errorf("the list was changed: %d elements", n)
	}
}

// TestSettleSpacedGCRA: a GCRA debt a settle leaves past the burst is read
// alike by the lone path on Redis' clock (decide.lua's spaced, which reads
// the debt from the key's TTL) and by the usual one (multi.lua's, which
// reads the state), and both refuse as the algorithm does. 10 per 10 s: a unit is a second.
func TestSettleSpacedGCRA(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	l := algo.Limit{Algorithm: algo.GCRA, Rate: 10, Period: 10 * time.Second}
	req := algo.Request{Name: unique("settle-spaced"), Subject: unique("s"), Limit: l, Cost: 5}
	if _, err := s.AllowAll(ctx, []algo.Request{req}); err != nil {
		t.Fatal(err)
	}
	out, err := s.SettleAll(ctx, settlement("r", req, 0, 30)) // 25 s more: 30 s of debt, 20 past the burst
	if err != nil || out.Outcome != algo.SettleApplied || out.Decisions[0].Debt != 20 {
		t.Fatalf("a debt of 25: %+v %v, want applied with 20 past the burst", out, err)
	}
	// The algorithm, from a TAT 30 s ahead.
	t0 := int64(1_800_000_000_000)
	st := algo.State{A: t0 + 30_000}
	want, _, err := algo.Decide(l, &st, t0, 1)
	if err != nil || want.RetryAfter != 21_000 {
		t.Fatalf("algo: %+v %v", want, err)
	}
	req.Cost = 1
	lone, err := s.Allow(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := s.AllowAll(ctx, []algo.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	// Within the test's own time, which has paid back a little of the debt.
	for _, got := range []algo.Decision{lone, ds[0]} {
		if r := result(got); r.Allowed || r.Remaining != 0 || r.RetryAfter > want.RetryAfter || r.RetryAfter < want.RetryAfter-5_000 ||
			r.ResetAfter > want.ResetAfter || r.ResetAfter < want.ResetAfter-5_000 {
			t.Errorf("in debt: %+v, want about %+v", r, want)
		}
	}
	if d := lone.RetryAfter - ds[0].RetryAfter; d < 0 || d > 5*time.Second {
		t.Errorf("the lone path retries after %v, the usual one after %v", lone.RetryAfter, ds[0].RetryAfter)
	}
}
