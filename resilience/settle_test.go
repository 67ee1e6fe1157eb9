package resilience_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/resilience"
)

// TestSettleRetried: settles that fail while Redis is stopped are applied
// once it answers again, each once: the first, which timed out, reaches
// Redis when it resumes and its retry finds it applied; the next, which
// the open breaker never sent, are retried: a debt is charged, and one
// whose TTL ends first leaves its estimate.
func TestSettleRetried(t *testing.T) {
	t.Parallel() // a Redis of its own; it mostly waits
	rs := redistest.Start(t)
	setup, s := leaseStores(t, rs, resilience.Options{FailuresToOpen: 1})
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	reserve := func(subject string) algo.Request {
		req := algo.Request{Name: uniq("settle"), Subject: subject, Limit: l, Cost: 100}
		if d, err := setup.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("reserving: %v %v", d, err)
		}
		return req
	}
	cases := []struct {
		name      string
		actual    int64
		ttl       time.Duration
		remaining int64
	}{
		{"a refund, sent before the breaker opened", 10, time.Minute, 990},
		{"a debt", 400, time.Minute, 600},
		{"one whose TTL ends before Redis answers", 10, 200 * time.Millisecond, 900},
	}
	reqs := make([]algo.Request, len(cases))
	for i := range cases {
		reqs[i] = reserve("s")
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
	for i, c := range cases {
		st := algo.Settlement{ID: "r" + c.name, TTL: c.ttl, Items: []algo.SettleItem{{Request: reqs[i], Actual: c.actual}}}
		if _, err := s.SettleAll(ctx, st); !errors.Is(err, resilience.ErrUnavailable) {
			t.Fatalf("%s while Redis is stopped: %v, want ErrUnavailable", c.name, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // past the short TTL
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Pending > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.Stats().Pending; n > 0 {
		t.Fatalf("%d settles still pending 10 s after Redis resumed", n)
	}
	for i, c := range cases {
		q := reqs[i]
		q.Cost = 0
		d, err := setup.Allow(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != c.remaining {
			t.Errorf("%s: remaining %d once Redis answered, want %d", c.name, d.Remaining, c.remaining)
		}
	}
}
