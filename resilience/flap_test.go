package resilience_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/faultproxy"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
)

// The flapping tests mostly wait (on the proxy's latency, the deadline and
// the breaker), each on its own proxy and keys, so they run in parallel
// with the package's other waiting tests.

// TestFlappingLateAnswers is the attack on the breaker's transitions:
// Redis answers late (after the deadline) every other stretch of
// requests, so decisions Redis made, admitted and charged, reach no one
// and fall back, and the breaker keeps opening and half-opening. In one
// window of a limit of 100, one instance must admit at most the limit
// and what was in flight (sequential requests here: each late call is
// one).
func TestFlappingLateAnswers(t *testing.T) {
	t.Parallel()
	for _, l := range []algo.Limit{
		{Algorithm: algo.FixedWindow, Rate: 100, Period: time.Hour},
		{Algorithm: algo.SlidingWindowLog, Rate: 100, Period: time.Hour},
		{Algorithm: algo.GCRA, Rate: 100, Period: time.Hour},
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			t.Parallel() // a proxy, a store and a key of its own
			fp, err := faultproxy.Start(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer fp.Close()
			at := time.UnixMilli(1_900_000_000_000)
			s := resilience.New(redisStore(t, fp.Addr), memory.New(memory.Options{}), resilience.Options{
				Timeout: testenv.ShortStoreTimeout, FailuresToOpen: 2, OpenFor: 30 * time.Millisecond, Now: fixedClock(&at),
			})
			defer s.Close()
			req := algo.Request{Name: uniq("flap"), Subject: "s", Limit: l, Cost: 1, Now: at}
			admitted, local, late := flap(t, fp, []*resilience.Store{s}, req, 400)
			t.Logf("%v: admitted %d (%d by the fallback), %d calls failed", l.Algorithm, admitted, local, late)
			if admitted > int(l.Rate) {
				t.Errorf("%v: admitted %d in one window of a limit of %d", l.Algorithm, admitted, l.Rate)
			}
		})
	}
}

// TestFlappingLateAnswersFleet: the same attack on two instances taking
// turns, each holding half of each limit in its fallback. The bound is
// A + N × s + k (docs/operations/redis-failure-and-fallback.md, "What the
// fallback admits"): 100 + 2 × 50 here, plus the calls in flight.
func TestFlappingLateAnswersFleet(t *testing.T) {
	t.Parallel()
	fp, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	at := time.UnixMilli(1_900_000_000_000)
	var fleet [2]*resilience.Store
	for i := range fleet {
		fleet[i] = resilience.New(redisStore(t, fp.Addr), memory.New(memory.Options{}), resilience.Options{
			Timeout: testenv.ShortStoreTimeout, FailuresToOpen: 2, OpenFor: 30 * time.Millisecond, Instances: len(fleet), Now: fixedClock(&at),
		})
		defer fleet[i].Close()
	}
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 100, Period: time.Hour}
	req := algo.Request{Name: uniq("flapfleet"), Subject: "s", Limit: l, Cost: 1, Now: at}
	admitted, local, _ := flap(t, fp, fleet[:], req, 600)
	t.Logf("two instances: admitted %d (%d by the fallbacks)", admitted, local)
	if limit := int(l.Rate) + 2*int(l.Rate)/2; admitted > limit {
		t.Errorf("admitted %d in one window of a limit of %d on two instances, past %d", admitted, l.Rate, limit)
	}
}

// flap makes n requests for req, in turn on stores, while Redis behind fp
// answers late every other stretch of 10 (the breaker keeps opening and
// half-opening), deciding a failed call by the store's fallback as the
// engine does. It returns the requests admitted, those of them admitted
// by a fallback, and the calls that failed.
func flap(t *testing.T, fp *faultproxy.Proxy, stores []*resilience.Store, req algo.Request, n int) (admitted, local, late int) {
	t.Helper()
	ctx := context.Background()
	defer fp.SetLatency(0)
	for i := range n {
		switch i % 20 {
		case 0: // Redis answers in time again: the breaker half-opens and closes
			fp.SetLatency(0)
			time.Sleep(40 * time.Millisecond)
		case 10: // late: the next calls give up, Redis decides them all the same
			fp.SetLatency(40 * time.Millisecond)
		}
		s := stores[i%len(stores)]
		d, err := s.Allow(ctx, req)
		if errors.Is(err, resilience.ErrUnavailable) {
			late++
			if d, err = s.Fallback(ctx, req); err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				local++
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	return admitted, local, late
}
