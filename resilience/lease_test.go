package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
)

// freeSlots returns how many of limit slots a subject's leases leave free:
// it takes as many as it can, with ids never used before, and gives them
// back (through s, which the tests give the generous deadline: a probe
// that timed out would take a slot until s gives it back).
func freeSlots(t *testing.T, s *resilience.Store, req algo.LeaseRequest, round *int) int {
	// Each probe is a new id: a released id stays released.
	t.Helper()
	ctx := context.Background()
	n := 0
	var taken []algo.LeaseRequest
	for i := int64(0); i < req.Limit && n >= 0; i++ {
		*round++
		r := req
		r.ID = fmt.Sprintf("probe-%d", *round)
		ok, err := s.Acquire(ctx, r)
		switch {
		case err != nil:
			n = -1 // the store is not answering yet (the Store gives this lease back)
		case ok:
			n++
			taken = append(taken, r)
		}
	}
	for _, r := range taken {
		s.Release(ctx, r) // retried by the Store if it fails
	}
	return n
}

// waitFree waits until all of req.Limit slots are free, and fails the test
// if that takes longer than within.
func waitFree(t *testing.T, s *resilience.Store, req algo.LeaseRequest, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	round, free := 0, 0
	for time.Since(start) < within {
		if free = freeSlots(t, s, req, &round); free == int(req.Limit) {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%d of %d slots free %v after Redis resumed; leases whose acquire timed out are held until their TTL (%v)",
		free, req.Limit, within, req.TTL)
	return 0
}

// leaseStores returns two Stores in front of one Redis store of rs: short,
// with the production deadline (testenv.ShortStoreTimeout) and opts, for
// the calls the test makes fail while Redis is stopped, and whose leases
// it must give back; and setup, with the generous one, for the calls that
// must succeed (taking the slots before, counting them after), which the
// short deadline fails on a loaded machine.
func leaseStores(t *testing.T, rs *redistest.Server, opts resilience.Options) (setup, short *resilience.Store) {
	t.Helper()
	st := redisStore(t, rs.Addr)
	opts.Timeout = testenv.ShortStoreTimeout
	short = resilience.New(st, memory.New(memory.Options{}), opts)
	setup = resilience.New(st, memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout})
	t.Cleanup(func() {
		short.Close()
		setup.Close()
	})
	return setup, short
}

// TestLeaseAcquireTimedOut is the reported chaos run in miniature: Redis
// stops (SIGSTOP) while a subject's Acquires are on their way; each gives
// up at the 20 ms deadline, but Redis runs them all when it resumes, and
// nobody holds the leases they take. They must come back as soon as Redis
// answers again, not after their minute-long TTL.
func TestLeaseAcquireTimedOut(t *testing.T) {
	t.Parallel() // a Redis of its own; it mostly waits
	rs := redistest.Start(t)
	setup, s := leaseStores(t, rs, resilience.Options{FailuresToOpen: 1000})
	ctx := context.Background()
	req := algo.LeaseRequest{Name: uniq("lease-paused"), Subject: "s", Limit: 10, TTL: time.Minute}
	// Redis has the script (as it has in production), so what it reads
	// on resuming runs.
	round := 0
	if n := freeSlots(t, setup, req, &round); n != 10 {
		t.Fatalf("%d slots free at the start", n)
	}
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			rs.Resume()
		}
	}()
	for i := 0; i < 10; i++ {
		r := req
		r.ID = fmt.Sprintf("timed-out-%d", i)
		if ok, err := s.Acquire(ctx, r); !errors.Is(err, resilience.ErrUnavailable) || ok {
			t.Fatalf("acquire %d while Redis is stopped: %v %v, want ErrUnavailable", i, ok, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	took := waitFree(t, setup, req, 5*time.Second)
	t.Logf("all 10 slots free %v after Redis resumed", took)
}

// TestLeaseReleaseRefused: releases refused while Redis is stopped (the
// first times out and opens the breaker, which fails the others at once,
// so they are never sent) are not lost: the slots come back once Redis
// answers again.
func TestLeaseReleaseRefused(t *testing.T) {
	t.Parallel() // a Redis of its own; it mostly waits
	rs := redistest.Start(t)
	setup, s := leaseStores(t, rs, resilience.Options{FailuresToOpen: 1, OpenFor: 100 * time.Millisecond})
	ctx := context.Background()
	req := algo.LeaseRequest{Name: uniq("release-paused"), Subject: "s", Limit: 10, TTL: time.Minute}
	var held []algo.LeaseRequest
	for i := 0; i < 10; i++ {
		r := req
		r.ID = fmt.Sprintf("held-%d", i)
		if ok, err := setup.Acquire(ctx, r); err != nil || !ok {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
		held = append(held, r)
	}
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	for i, r := range held {
		if err := s.Release(ctx, r); !errors.Is(err, resilience.ErrUnavailable) {
			rs.Resume()
			t.Fatalf("release %d while Redis is stopped: %v, want ErrUnavailable", i, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	took := waitFree(t, setup, req, 5*time.Second)
	t.Logf("all 10 slots free %v after Redis resumed", took)
}
