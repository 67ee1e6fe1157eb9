package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/faultproxy"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// scriptCalls returns the EVALSHA, EVAL and FCALL calls the server behind
// c has counted (INFO commandstats).
func scriptCalls(tb testing.TB, c rueidis.Client) int64 {
	return redistest.Calls(tb, c, "evalsha", "eval", "fcall")
}

// TestCoalescing makes 64 concurrent callers decide on Redis' clock: far
// fewer script calls than decisions reach Redis, and every algorithm's hot
// key still admits exactly its budget.
func TestCoalescing(t *testing.T) {
	for _, maxBatch := range []int{0, 1} {
		t.Run("MaxBatch="+strconv.Itoa(maxBatch), func(t *testing.T) {
			server := redistest.Start(t)
			c := server.NewClient(t)
			s, err := rstore.New(c, rstore.Options{MaxBatch: maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const callers, perCaller, budget = 64, 80, 300
			algs := algo.Algorithms()
			p := unique("coalesce")
			var admitted [6]atomic.Int64
			var decisions atomic.Int64
			for _, a := range algs { // load the scripts: NOSCRIPT retries would count
				if _, err := s.Allow(context.Background(), algo.Request{Name: p, Subject: "warm", Limit: algo.Limit{Algorithm: a, Rate: 1, Period: time.Second}}); err != nil {
					t.Fatal(err)
				}
			}
			before := scriptCalls(t, c)
			var wg sync.WaitGroup
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := algs[g%len(algs)]
					hot := algo.Limit{Algorithm: a, Rate: budget, Period: 30 * 24 * time.Hour}
					for i := range perCaller {
						req := algo.Request{Name: p, Subject: "hot", Limit: hot, Cost: 1}
						if i%2 == 1 { // a key of its own, alongside
							req.Subject = fmt.Sprintf("cold-%d-%d", g, i)
						}
						d, err := s.Allow(context.Background(), req)
						if err != nil {
							t.Error(err)
							return
						}
						decisions.Add(1)
						if req.Subject == "hot" && d.Allowed {
							admitted[a].Add(1)
						} else if req.Subject != "hot" && (!d.Allowed || d.Remaining != budget-1) {
							t.Errorf("fresh key: %+v", d)
						}
					}
				}()
			}
			wg.Wait()
			calls := scriptCalls(t, c) - before
			n := decisions.Load()
			t.Logf("%d decisions in %d script calls: %.3f calls per decision", n, calls, float64(calls)/float64(n))
			for _, a := range algs {
				if got := admitted[a].Load(); got != budget {
					t.Errorf("%v: hot key admitted %d, want exactly %d", a, got, budget)
				}
			}
			switch {
			case n != callers*perCaller:
				t.Fatalf("%d decisions, want %d", n, callers*perCaller)
			case maxBatch == 1 && calls != n:
				t.Fatalf("MaxBatch 1: %d script calls for %d decisions, want one each", calls, n)
			case maxBatch != 1 && calls*3 > n:
				t.Fatalf("%d script calls for %d decisions: not coalesced (want at most a third)", calls, n)
			}
			if s.Busy() != 0 {
				t.Fatalf("%d calls still counted as running after the callers returned", s.Busy())
			}
		})
	}
}

// TestBatchScriptMatchesSingle drives random batches through decide.lua
// directly, at explicit times, several requests per key per batch, and
// requires every result to equal what the store decides for the same
// requests made one call after another.
func TestBatchScriptMatchesSingle(t *testing.T) {
	c := srv.NewClient(t)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := rstore.DecideScript()
	if err != nil {
		t.Fatal(err)
	}
	batch := rueidis.NewLuaScript(src)
	var limits []algo.Limit
	for _, a := range algo.Algorithms() {
		limits = append(limits,
			algo.Limit{Algorithm: a, Rate: 5, Period: time.Second},
			algo.Limit{Algorithm: a, Rate: 3, Period: 250 * time.Millisecond})
	}
	limits = append(limits,
		algo.Limit{Algorithm: algo.GCRA, Rate: 3, Period: 100 * time.Millisecond, Burst: 7},
		algo.Limit{Algorithm: algo.TokenBucket, Rate: 2, Period: 90 * time.Millisecond, Burst: 9},
		algo.Limit{Algorithm: algo.LeakyBucket, Rate: 4, Period: time.Second, MaxDelay: 2 * time.Second},
		algo.Limit{Algorithm: algo.FixedWindow, Rate: 6, Period: algo.Day, Calendar: algo.Daily, Zone: newYork},
		algo.Limit{Algorithm: algo.FixedWindow, Rate: 6, Period: algo.Month, Calendar: algo.Monthly, Zone: newYork})
	seed := uint32(testenv.Seed(t))
	next := func(n int64) int64 { seed = seed*1664525 + 1013904223; return int64(seed>>8) % n }
	ctx := context.Background()
	for _, l := range limits {
		pa, pb := unique("bs-single"), unique("bs-batch")
		now := time.UnixMilli(1_800_000_000_000 + next(1000))
		for step := range 50 {
			now = now.Add(time.Duration(next(l.Period.Milliseconds()/3+2)) * time.Millisecond)
			k := 1 + int(next(6))
			want := make([]algo.Decision, k)
			keys := make([]string, k)
			reqs := make([]algo.Request, k)
			for i := range k {
				req := algo.Request{Name: pa, Subject: []string{"x", "y"}[next(2)], Limit: l, Cost: next(l.Capacity() + 1), Now: now}
				if want[i], err = s.Allow(ctx, req); err != nil {
					t.Fatal(err)
				}
				req.Name = pb
				keys[i], reqs[i] = rstore.KeyFor(req), req
			}
			args := []string{strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt((10 * time.Minute).Milliseconds(), 10), rstore.Pack(reqs...)}
			res := batch.Exec(ctx, c, keys, args)
			got, errs, err := rstore.Outcomes(res, l, k)
			if err != nil {
				t.Fatal(err)
			}
			for i := range k {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if got[i] != want[i] {
					t.Fatalf("%v step %d request %d of %d (%s, cost %d):\nsingle %+v\n batch %+v",
						l, step, i+1, k, keys[i], reqs[i].Cost, want[i], got[i])
				}
			}
		}
	}
}

// TestBatchScriptIsolatesErrors: a request that fails inside a batch gets
// its own error, and the others are decided, for every algorithm; state
// the scripts cannot read counts as none.
func TestBatchScriptIsolatesErrors(t *testing.T) {
	c := srv.NewClient(t)
	src, err := rstore.DecideScript()
	if err != nil {
		t.Fatal(err)
	}
	script := rueidis.NewLuaScript(src)
	ctx := context.Background()
	for _, a := range algo.Algorithms() {
		p := unique("bs-err")
		bad, good := rstore.Key(p, "bad", a), rstore.Key(p, "good", a)
		// A string where the log keeps a sorted set, a list where the
		// others keep a string.
		wrong := c.B().Lpush().Key(bad).Element("x").Build()
		if a == algo.SlidingWindowLog {
			wrong = c.B().Set().Key(bad).Value("x").Px(time.Minute).Build()
		}
		if err := c.Do(ctx, wrong).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Pexpire().Key(bad).Milliseconds(time.Minute.Milliseconds()).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		req := algo.Request{Limit: algo.Limit{Algorithm: a, Rate: 5, Period: time.Hour}, Cost: 1}
		keys := []string{rstore.Key(p, "other", a), bad, good}
		if a != algo.SlidingWindowLog {
			junk := rstore.Key(p, "junk", a)
			if err := c.Do(ctx, c.B().Set().Key(junk).Value("not state").Px(time.Minute).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			keys[0] = junk
		}
		res := script.Exec(ctx, c, keys, []string{"", "0", rstore.Pack(req, req, req)})
		ds, errs, err := rstore.Outcomes(res, req.Limit, 3)
		if err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		if err := errs[1]; err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%v: request on a key of the wrong type: %v, want WRONGTYPE", a, err)
		}
		for _, i := range []int{0, 2} {
			if errs[i] != nil || !ds[i].Allowed {
				t.Errorf("%v: request %d refused: %v", a, i, errs[i])
			}
			if r := ds[i].Remaining; r != 4 {
				t.Errorf("%v: request %d: remaining %d, want 4 (a fresh key charged once)", a, i, r)
			}
		}
		// Alone, each takes the lone path: state it cannot read counts as
		// none, and a key of the wrong type fails the call (its only
		// request) with the same error.
		ds, errs, err = rstore.Outcomes(script.Exec(ctx, c, keys[:1], []string{"", "0", rstore.Pack(req)}), req.Limit, 1)
		if err != nil || errs[0] != nil || !ds[0].Allowed || ds[0].Remaining != 3 {
			t.Errorf("%v: alone: %+v, %v %v, want allowed with 3 remaining", a, ds, errs, err)
		}
		_, errs, err = rstore.Outcomes(script.Exec(ctx, c, keys[1:2], []string{"", "0", rstore.Pack(req)}), req.Limit, 1)
		if err == nil {
			err = errs[0]
		}
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%v: alone on a key of the wrong type: %v, want WRONGTYPE", a, err)
		}
	}
}

// TestCoalescedCancel: a caller whose context ends while its request waits
// for a batch gets the context's error at once; the requests queued with
// it are decided in one batch call. Time is the property of the impatient
// caller: it must return at its 20 ms deadline, not when its batch is
// decided. The batch waits behind calls that take at least 2 s (Redis
// answers through a proxy that holds each chunk 1 s each way), so the
// bound of 500 ms is 25 times the deadline and a quarter of the wait.
func TestCoalescedCancel(t *testing.T) {
	fp, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	c, err := (&redistest.Server{Addr: fp.Addr}).Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := unique("cancel")
	l := algo.Limit{Rate: 100, Period: time.Minute}
	if _, err := s.Allow(ctx, algo.Request{Name: p, Subject: "warm", Limit: l, Cost: 1}); err != nil {
		t.Fatal(err) // loads the script
	}
	fp.SetLatency(time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	call := func(ctx context.Context, subject string) {
		defer wg.Done()
		if d, err := s.Allow(ctx, algo.Request{Name: p, Subject: subject, Limit: l, Cost: 1}); err != nil {
			errs <- err
		} else if !d.Allowed || d.Remaining != 99 {
			errs <- fmt.Errorf("%s: %+v", subject, d)
		}
	}
	// Occupy every call of the lane, then queue more behind them.
	for i := range rstore.MaxCalls() {
		wg.Add(1)
		go call(ctx, "direct-"+strconv.Itoa(i))
	}
	for deadline := time.Now().Add(5 * time.Second); s.Busy() < rstore.MaxCalls(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("busy %d, want %d", s.Busy(), rstore.MaxCalls())
		}
	}
	before := scriptCalls(t, srv.NewClient(t))
	for i := range 6 {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		wg.Add(1)
		go call(qctx, "queued-"+strconv.Itoa(i))
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Allow(short, algo.Request{Name: p, Subject: "impatient", Limit: l, Cost: 1})
	took := time.Since(start)
	// What is already held goes on in its second; what comes after is
	// not delayed.
	fp.SetLatency(0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued caller with a 20ms deadline: %v, want %v", err, context.DeadlineExceeded)
	}
	if took > 500*time.Millisecond {
		t.Errorf("queued caller with a 20ms deadline returned after %v, behind calls of 2 s", took)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls := scriptCalls(t, srv.NewClient(t)) - before; calls > 3 {
		t.Errorf("the direct requests and 6 queued ones took %d script calls, want at most 3", calls)
	}
	for deadline := time.Now().Add(5 * time.Second); s.Busy() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("flushers still busy (%d) with nothing queued", s.Busy())
		}
	}
}

// TestCloseStopsCoalescing: Close waits for the flushers, and a store from
// New still decides afterwards, each request on its own.
func TestCloseStopsCoalescing(t *testing.T) {
	c := srv.NewClient(t)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := unique("close")
	l := algo.Limit{Rate: 1_000_000, Period: time.Minute}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := s.Allow(context.Background(), algo.Request{Name: p, Subject: strconv.Itoa(g % 8), Limit: l, Cost: 1}); err != nil {
					t.Error(err)
					return
				}
			}
			if g == 0 {
				s.Close() // while the others still decide
			}
		}()
	}
	wg.Wait()
	s.Close()
	if s.Busy() != 0 {
		t.Fatalf("%d calls running after Close", s.Busy())
	}
	d, err := s.Allow(context.Background(), algo.Request{Name: p, Subject: "after", Limit: l, Cost: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("Allow after Close: %+v, %v", d, err)
	}
	if _, err := rstore.New(c, rstore.Options{MaxBatch: -1}); err == nil {
		t.Error("New accepted a negative MaxBatch")
	}
}

// TestKeySlot checks the hash slot computation against the examples of
// the Redis Cluster specification.
func TestKeySlot(t *testing.T) {
	same := [][2]string{
		{"{user1000}.following", "user1000"},
		{"{user1000}.followers", "user1000"},
		{"foo{bar}{zap}", "bar"},
		{"foo{{bar}}zap", "{bar"},
		{"rl:v3:{alice}:api:gcra", "alice"},
	}
	for _, c := range same {
		if rstore.KeySlot(c[0]) != rstore.KeySlot(c[1]) {
			t.Errorf("slot(%q) != slot(%q)", c[0], c[1])
		}
	}
	if got := rstore.KeySlot("123456789"); got != 0x31C3%16384 {
		t.Errorf("slot(123456789) = %d, want %d (CRC16 0x31C3)", got, 0x31C3%16384)
	}
	// TestCluster compares more keys, such as "foo{}{bar}" (hashed whole),
	// with CLUSTER KEYSLOT.
}
