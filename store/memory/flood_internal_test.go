package memory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestNoRequestWaitsForASweep holds one entry of a full store, as a
// decision in progress does, and checks that a new key, an existing
// account and the sweep itself are decided without waiting for it: a
// request that swept the shard (or the store) would wait on that entry.
func TestNoRequestWaitsForASweep(t *testing.T) {
	now := int64(1_800_000_000_000)
	s := New(Options{Now: func() time.Time { return time.UnixMilli(now) }, SweepInterval: -1, Shards: 1, MaxKeys: 100})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Rate: 10, Period: time.Hour}
	rule := algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	if _, err := s.Lockout(ctx, algo.LockoutRequest{Policy: "login", Subject: "acct", Rule: rule, Op: algo.LockFail}); err != nil {
		t.Fatal(err)
	}
	for i := range 99 {
		if _, err := s.Allow(ctx, algo.Request{Policy: "p", Subject: "s" + strconv.Itoa(i), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	now += 1000 // some time later: nothing has expired
	k := key{alg: algo.GCRA, policy: "p", subject: "s7"}
	h, sh := s.hashes(&k, nil)
	e := s.find(sh, h, k.appendTo(nil))
	if e == nil {
		t.Fatal("s7 not found")
	}
	defer e.mu.Unlock()
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatalf("%s waited for an entry in use", what)
		}
	}
	within("a new key", func() {
		s.Allow(ctx, algo.Request{Policy: "p", Subject: "new", Limit: l, Cost: 1})
	})
	within("an existing account", func() {
		s.Lockout(ctx, algo.LockoutRequest{Policy: "login", Subject: "acct", Rule: rule, Op: algo.LockCheck})
	})
	within("the sweep", s.Sweep)
}
