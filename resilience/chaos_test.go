package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// span is when an admitted request was sent and when its answer came: the
// store (or the fallback) decided it in between.
type span struct{ sent, got time.Time }

// mostInOneWindow returns the most admissions certainly decided within one
// window of length p: those sent at or after some start and answered
// before start+p. Counting by when requests were decided, which lies in
// their span, a window can only hold more.
func mostInOneWindow(adm []span, p time.Duration) (n int, at time.Time) {
	sort.Slice(adm, func(i, j int) bool { return adm[i].sent.Before(adm[j].sent) })
	for i, a := range adm {
		c := 0
		for _, b := range adm[i:] {
			if b.got.Before(a.sent.Add(p)) {
				c++
			}
		}
		if c > n {
			n, at = c, a.sent
		}
	}
	return n, at
}

// outage is a fault of a real Redis, begun at the start of a run and ended
// some time later.
type outage struct {
	name       string
	begin, end func(rs *redistest.Server, c rueidis.Client) error
}

var outages = []outage{
	{"paused (SIGSTOP)",
		func(rs *redistest.Server, _ rueidis.Client) error { return rs.Pause() },
		func(rs *redistest.Server, _ rueidis.Client) error { return rs.Resume() }},
	{"out of memory",
		func(_ *redistest.Server, c rueidis.Client) error { return setMaxMemory(c, "1") },
		func(_ *redistest.Server, c rueidis.Client) error { return setMaxMemory(c, "0") }},
}

func setMaxMemory(c rueidis.Client, v string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", v).Build()).Error()
}

// TestChaosWorstCase measures what one subject gets in one window across
// a Redis outage, against the worst case the package documentation
// states. Workers send one subject's requests at four times its limit,
// through Allow and, when Redis is unavailable, Fallback. Redis fails
// when the subject has spent about 60 of its 100, and comes back half a
// window later. With one instance the worst case is C + k: the limit, and
// what was in flight when Redis came back (at most one request per
// worker). With two instances, each deciding for half the workers, it is
// C + Σ L_i + k ≤ C + 2s + k, and in the window where the outage begins
// L_i ≤ ⌊R_i × s / C⌋, R_i being what instance i last saw remaining: at
// most what remained when the outage began, and what the other instance
// had in flight.
//
// The stores keep the production deadline (testenv.ShortStoreTimeout):
// the worst case is the documentation's for what runs in production, and
// a call that misses it on a loaded machine falls back, which the worst
// case covers like any outage. The four runs share nothing (a Redis each)
// and mostly wait, so they all run at once (t.Parallel alone would run
// two at a time on two cores), each checked by its own subtest.
func TestChaosWorstCase(t *testing.T) {
	t.Parallel()
	type run struct {
		o         outage
		instances int
		done      chan chaosRun
	}
	var runs []run
	for _, o := range outages {
		for _, instances := range []int{1, 2} {
			r := run{o, instances, make(chan chaosRun, 1)}
			go func() { r.done <- runChaos(t, r.o, r.instances) }()
			runs = append(runs, r)
		}
	}
	for _, r := range runs {
		t.Run(r.o.name+"/"+map[int]string{1: "one instance", 2: "two instances"}[r.instances], func(t *testing.T) {
			got := <-r.done
			for _, err := range got.errs {
				t.Error(err)
			}
			if t.Failed() {
				t.FailNow()
			}
			checkChaos(t, r.o, r.instances, got)
		})
	}
}

// The chaos runs' limit, window and workers.
const (
	chaosLimit   = 100
	chaosPeriod  = 3 * time.Second
	chaosWorkers = 4
)

// chaosRun is what one run of TestChaosWorstCase saw: the admissions, the
// decisions of the fallback, when it started and when the outage began,
// and what went wrong (a run reports its errors rather than fail a test
// from its goroutines).
type chaosRun struct {
	adm          []span
	local        int64
	start, began time.Time
	errs         []error
}

// runChaos runs workers against instances stores of a Redis of its own
// (closed when t ends) through the outage o, for two windows.
func runChaos(t *testing.T, o outage, instances int) chaosRun {
	const (
		c       = chaosLimit
		period  = chaosPeriod
		workers = chaosWorkers
	)
	var (
		mu  sync.Mutex
		res chaosRun
	)
	fail := func(err error) {
		mu.Lock()
		res.errs = append(res.errs, err)
		mu.Unlock()
	}
	rs, err := redistest.StartServer()
	if err != nil {
		return chaosRun{errs: []error{err}}
	}
	t.Cleanup(rs.Close)
	admin, err := rs.Client()
	if err != nil {
		return chaosRun{errs: []error{err}}
	}
	t.Cleanup(admin.Close)
	stores := make([]*resilience.Store, instances)
	for i := range stores {
		c, err := rs.Client()
		if err != nil {
			return chaosRun{errs: []error{err}}
		}
		t.Cleanup(c.Close)
		st, err := rstore.New(c, rstore.Options{})
		if err != nil {
			return chaosRun{errs: []error{err}}
		}
		stores[i] = resilience.New(st, memory.New(memory.Options{}), resilience.Options{
			Timeout: testenv.ShortStoreTimeout, Instances: instances, OpenFor: 200 * time.Millisecond,
		})
		defer stores[i].Close()
	}
	gap := period * workers / (4 * c) // 4 × the limit in all
	req := algo.Request{Name: "chaos", Subject: "k", Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: c, Period: period}, Cost: 1}
	var local atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(st *resilience.Store) {
			defer wg.Done()
			for ctx.Err() == nil {
				sent := time.Now()
				d, err := st.Allow(context.Background(), req)
				if errors.Is(err, resilience.ErrUnavailable) {
					local.Add(1)
					d, err = st.Fallback(context.Background(), req)
				}
				got := time.Now()
				if err != nil {
					fail(fmt.Errorf("deciding: %w", err))
					return
				}
				if d.Allowed {
					mu.Lock()
					res.adm = append(res.adm, span{sent, got})
					mu.Unlock()
				}
				time.Sleep(gap - time.Since(sent))
			}
		}(stores[w%instances])
	}
	res.start = time.Now()
	time.Sleep(period * 3 / 20)
	res.began = time.Now()
	if err := o.begin(rs, admin); err != nil {
		fail(err)
	}
	time.Sleep(period / 2)
	if err := o.end(rs, admin); err != nil {
		fail(err)
	}
	time.Sleep(2*period - period*3/20 - period/2)
	stop()
	wg.Wait()
	res.local = local.Load()
	return res
}

// checkChaos checks a run against the worst cases of the package
// documentation.
func checkChaos(t *testing.T, o outage, instances int, r chaosRun) {
	const (
		c       = chaosLimit
		period  = chaosPeriod
		workers = chaosWorkers
	)
	req := algo.Request{Limit: algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: c, Period: period}}
	adm, start, began := r.adm, r.start, r.began
	// The algorithm counts whole milliseconds: a window is certainly
	// within one of the limit's if a millisecond shorter.
	w := period - time.Millisecond
	s := int(resilience.Share(req.Limit, instances).Capacity())
	before := 0
	for _, a := range adm {
		if a.got.Before(began) {
			before++
		}
	}
	n, at := mostInOneWindow(adm, w)
	first := inWindow(adm, start, w)
	t.Logf("Redis %s from %v to %v of a %v window: %d admitted before, %d in all, %d decisions by the fallback; "+
		"most in one window %d (from %v), in the window where the outage began %d; limit %d, share %d, %d workers",
		o.name, began.Sub(start).Round(time.Millisecond), began.Sub(start).Round(time.Millisecond)+period/2, period,
		before, len(adm), r.local, n, at.Sub(start).Round(time.Millisecond), first, c, s, workers)
	if r.local == 0 {
		t.Fatal("the fallback decided nothing: no outage was seen")
	}
	// The worst cases of the package documentation.
	firstBound, bound := c+workers, c+workers
	if instances > 1 {
		left := c - before + workers
		firstBound = c + instances*(left*s/c) + workers
		bound = c + instances*s + workers
	}
	if n > bound {
		t.Fatalf("%d admitted in one window, above the worst case %d", n, bound)
	}
	if first > firstBound {
		t.Fatalf("%d admitted in the window where the outage began, above the worst case %d", first, firstBound)
	}
}

// inWindow returns how many admissions were certainly decided in the
// window of length p that starts at from.
func inWindow(adm []span, from time.Time, p time.Duration) int {
	n := 0
	for _, a := range adm {
		if !a.sent.Before(from) && a.got.Before(from.Add(p)) {
			n++
		}
	}
	return n
}
