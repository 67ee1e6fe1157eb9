package redis_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestSlidingLogTrimBounded is the attack on everyone's store deadline
// through one subject's own sliding log. A limit of 100,000 a second kept
// as a log (algo.MaxLogRate) holds one member per admitted request; the
// subject spends it all at t0 and comes back once the window has passed.
// Its next request used to remove all 100,000 members in one script:
// about 37 ms of Redis, single-threaded, during which every other
// gateway's call waited past the 20 ms deadline — five such failures in a
// row open the breaker, and everyone is on the fallback (login and OTP
// refused). A decision's work on the log must not grow with what has
// left the window: it is counted, not timed (the members it removes, the
// commands on the log it runs), on a log of 10,000 members out of the
// window and on one of 100, and must be the same. (Counted, the size
// matters only far above the trim bound; a log of the whole 100,000 takes
// seconds to fill under -race.)
func TestSlidingLogTrimBounded(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: 10 * time.Second}
	// Filled one window ago, so the next request on Redis' clock finds it
	// all out of the window.
	past := time.Now().Add(-l.Period - time.Second)
	next := func(n int) logWork {
		req := algo.Request{Name: "logtrim", Subject: unique("attacker"), Limit: l, Cost: 1}
		fill(t, s, req, past, n)
		var d algo.Decision
		var err error
		w := measure(t, c, []string{rstore.Key(req.Name, req.Subject, l.Algorithm)}, func() { d, err = s.Allow(ctx, req) })
		if err != nil || !d.Allowed || d.Remaining != algo.MaxLogRate-1 {
			t.Fatalf("after the window of a log of %d: %+v %v, want admitted with %d remaining", n, d, err, algo.MaxLogRate-1)
		}
		return w
	}
	const large = 10_000
	full, small := next(large), next(100)
	t.Logf("one request after the window of a log of %d: %+v; of a log of 100: %+v", large, full, small)
	if full.removed > maxTrim || full.written != 1 || full.removed <= full.written {
		t.Errorf("one request after a log's window removed %d of its %d members and wrote %d: want more than it wrote and at most %d",
			full.removed, large, full.written, maxTrim)
	}
	if full != small {
		t.Errorf("one request after the window of a log of %d did %+v, of a log of 100 %+v: its work grows with what left the window",
			large, full, small)
	}
}

// maxTrim bounds the members one decision removes from a log, of those
// out of its window (sliding_log.lua removes at most 1 + 32).
const maxTrim = 40

// logWork is what a call did to the logs it decided on, counted: the
// members it removed and wrote, and the commands on sorted sets Redis ran
// for it (INFO commandstats counts each command a script calls). It is
// the work a call holds Redis' one thread for, without timing it.
type logWork struct {
	removed, written int64 // members, over all the logs
	commands         int64 // ZADD, ZRANGE, ZCOUNT, ZREMRANGEBYRANK, ...
}

// measure runs f, one call of the store on the logs at keys, and returns
// its work. Nothing else may run commands on sorted sets meanwhile (this
// package's tests run one at a time on srv).
func measure(t *testing.T, c rueidis.Client, keys []string, f func()) logWork {
	t.Helper()
	before := make([]int64, len(keys))
	last := make([]string, len(keys))
	for i, k := range keys {
		before[i], last[i] = zcard(t, c, k), newest(t, c, k)
	}
	cmds := zCommands(t, c)
	f()
	w := logWork{commands: zCommands(t, c) - cmds}
	for i, k := range keys {
		// Members are removed oldest first and written after the newest
		// (at its time or later, named by larger counts): the members
		// left of those before are the newest's rank + 1, and those above
		// it are written.
		kept := int64(0)
		if last[i] != "" {
			r, err := c.Do(context.Background(), c.B().Zrank().Key(k).Member(last[i]).Build()).AsInt64()
			switch {
			case err == nil:
				kept = r + 1
			case !rueidis.IsRedisNil(err):
				t.Fatal(err)
			}
		}
		w.removed += before[i] - kept
		w.written += zcard(t, c, k) - kept
	}
	return w
}

// newest returns the name of a log's newest member ("" if none).
func newest(t *testing.T, c rueidis.Client, key string) string {
	t.Helper()
	m, err := c.Do(context.Background(), c.B().Zrange().Key(key).Min("-1").Max("-1").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// zCommands returns how many commands on sorted sets Redis has run.
func zCommands(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_z") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats line %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// fill charges n requests of req, at, in calls of up to 64 requests (as
// the store's batches are) from 4 goroutines: the log the store keeps for
// n requests, at a fraction of the round trips.
func fill(t *testing.T, s *rstore.Store, req algo.Request, at time.Time, n int) {
	t.Helper()
	req.Now = at
	const per = 64
	calls := (n + per - 1) / per
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for b := g; b < calls; b += 4 {
				k := min(per, n-b*per)
				ds, errs, err := s.DecideAt(context.Background(), slices.Repeat([]algo.Request{req}, k))
				if err != nil {
					failed.Add(int64(k))
					continue
				}
				for i := range k {
					if errs[i] != nil || !ds[i].Allowed {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("filling the log: %d of %d requests not admitted", f, n)
	}
}

func zcard(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Zcard().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSlidingLogTrimBoundedInBatch: the same attack through a batch. While
// Redis is busy, up to 64 decisions go in one script call; 64 subjects
// each back after a full log's window (500 members here) made one call
// remove 32,000 members, and with a per-decision bound of 1,024 all the
// same. What a batch removes of what has left the window must not grow
// with it either: counted on 64 logs of 500 members out of the window
// and on 64 of 50, the batch's work must be the same.
func TestSlidingLogTrimBoundedInBatch(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 500, Period: 10 * time.Second}
	past := time.Now().Add(-l.Period - time.Second)
	batch := func(n int) logWork {
		reqs := make([]algo.Request, 64)
		keys := make([]string, len(reqs))
		for i := range reqs {
			reqs[i] = algo.Request{Name: "logtrim", Subject: unique("attacker"), Limit: l, Cost: 1}
			keys[i] = rstore.Key(reqs[i].Name, reqs[i].Subject, l.Algorithm)
			fill(t, s, reqs[i], past, n)
		}
		var ds []algo.Decision
		var errs []error
		w := measure(t, c, keys, func() { ds, errs = s.DecideBatch(ctx, reqs) })
		for i := range ds {
			if errs[i] != nil || !ds[i].Allowed || ds[i].Remaining != l.Rate-1 {
				t.Fatalf("request %d of the batch on logs of %d: %+v %v, want admitted with %d remaining", i, n, ds[i], errs[i], l.Rate-1)
			}
		}
		return w
	}
	full, small := batch(int(l.Rate)), batch(50)
	t.Logf("a batch of 64 after the window of logs of %d: %+v; of logs of 50: %+v", l.Rate, full, small)
	if full.removed > 64*maxTrim || full.written != 64 {
		t.Errorf("a batch of 64 after full logs' window removed %d of their %d members and wrote %d: want at most %d and 64",
			full.removed, 64*l.Rate, full.written, 64*maxTrim)
	}
	if full != small {
		t.Errorf("a batch of 64 after the window of logs of %d did %+v, of logs of 50 %+v: its work grows with what left the window",
			l.Rate, full, small)
	}
}

// TestSlidingLogCostBounded is the attack through a request's cost: a
// sliding log kept one member per unit, so one admitted request of cost
// 100,000 (a limit of 100,000 spent at once: an Envoy descriptor's
// hits_addend taken from the request, a library's Cost func counting
// tokens) wrote 100,000 members in one script, about 360 ms of Redis
// during which every other call missed its deadline. What one decision
// writes must not grow with its cost: counted, a request of cost 100,000
// writes one member and runs the commands one of cost 1 runs.
func TestSlidingLogCostBounded(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	// A window far longer than the test, so that "one more" is refused
	// however slow the machine.
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: time.Hour}
	charge := func(cost int64) logWork {
		req := algo.Request{Name: "logcost", Subject: unique("attacker"), Limit: l, Cost: cost}
		var d algo.Decision
		var err error
		w := measure(t, c, []string{rstore.Key(req.Name, req.Subject, l.Algorithm)}, func() { d, err = s.Allow(ctx, req) })
		if err != nil || !d.Allowed || d.Remaining != l.Rate-cost {
			t.Fatalf("cost %d on a fresh log: %+v %v", cost, d, err)
		}
		if cost == l.Rate {
			req.Cost = 1
			if d, err := s.Allow(ctx, req); err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > l.Period {
				t.Fatalf("one more after the whole limit at once: %+v %v, want refused until the window has passed", d, err)
			}
		}
		return w
	}
	whole, one := charge(algo.MaxLogRate), charge(1)
	t.Logf("one request of cost %d: %+v; of cost 1: %+v", algo.MaxLogRate, whole, one)
	if whole.written != 1 || whole != one {
		t.Errorf("one request of cost %d did %+v, one of cost 1 %+v: what it writes grows with its cost", algo.MaxLogRate, whole, one)
	}
}

// TestResetLargeLogAtOnce: resetting a subject (the admin API) deleted
// its state with DEL, which frees a sliding log of 100,000 members on
// Redis' one thread, tens of ms past every gateway's deadline. The key
// must go at once and its members be freed in the background (UNLINK):
// Redis counts the objects it hands to its lazy-free thread (any of more
// than 64 members; 10,000 here).
func TestResetLargeLogAtOnce(t *testing.T) {
	c := srv.NewClient(t)
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: algo.MaxLogRate, Period: time.Minute}
	req := algo.Request{Name: "logreset", Subject: unique("subject"), Limit: l, Cost: 1}
	const members = 10_000
	fill(t, s, req, time.Now(), members)
	// With lazyfree-lazy-user-del (off by default) DEL frees in the
	// background too, and the count below would not tell them apart.
	setConfig(t, c, "lazyfree-lazy-user-del", "no")
	lazy := lazyFreed(t, c)
	if err := s.Reset(ctx, []algo.Request{req}); err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, rstore.Key(req.Name, req.Subject, l.Algorithm)); n != 0 {
		t.Fatalf("after Reset the log holds %d members", n)
	}
	if n := lazyFreed(t, c) - lazy; n < 1 {
		t.Errorf("Reset of a log of %d members handed %d objects to Redis' lazy-free thread: it freed the log on Redis' own thread (DEL, not UNLINK)",
			members, n)
	}
}

// lazyFreed returns how many objects Redis has handed to its lazy-free
// thread: those it freed there and those still pending (a freed object
// moves from one count to the other, so the sum counts each once, at
// once).
func lazyFreed(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	seen := 0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "lazyfree_pending_objects" && name != "lazyfreed_objects") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("INFO memory line %q: %v", line, err)
		}
		total += n
		seen++
	}
	if seen != 2 {
		t.Fatalf("INFO memory reports no lazyfree_pending_objects and lazyfreed_objects (Redis before 6.2?): %q", info)
	}
	return total
}

// setConfig sets a Redis parameter for the rest of the test.
func setConfig(t *testing.T, c rueidis.Client, name, value string) {
	t.Helper()
	ctx := context.Background()
	old, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue(name, value).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if v, ok := old[name]; ok && v != value {
		t.Cleanup(func() { c.Do(context.Background(), c.B().ConfigSet().ParameterValue().ParameterValue(name, v).Build()) })
	}
}
