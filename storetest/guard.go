package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

var lockRule = algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: 15 * time.Minute, Memory: 24 * time.Hour}

// RunGuard checks a store's login-guard state against the pure
// algo.Lockout, and that concurrent failures lock an account exactly once.
func RunGuard(t *testing.T, g tollgate.Guard) {
	ctx := context.Background()
	t.Run("MatchesModel", func(t *testing.T) {
		p := policy(t)
		var st algo.State
		now := base
		seed := uint32(99)
		for step := 0; step < 300; step++ {
			seed = seed*1664525 + 1013904223
			op := algo.LockOp(seed >> 8 % 3)
			if seed>>12%4 == 0 {
				op = algo.LockFail
			}
			now = now.Add(time.Duration(seed>>16%90) * time.Second)
			want, _ := algo.Lockout(lockRule, &st, now.UnixMilli(), op)
			got, err := g.Lockout(ctx, algo.LockoutRequest{Policy: p, Subject: "acct", Rule: lockRule, Op: op, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("step %d (op %d): got %+v, want %+v", step, op, got, want)
			}
		}
	})
	t.Run("ConcurrentFailuresLockOnce", func(t *testing.T) {
		p := policy(t)
		var wg sync.WaitGroup
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := g.Lockout(ctx, algo.LockoutRequest{Policy: p, Subject: "acct", Rule: lockRule, Op: algo.LockFail, Now: base}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		res, err := g.Lockout(ctx, algo.LockoutRequest{Policy: p, Subject: "acct", Rule: lockRule, Op: algo.LockCheck, Now: base})
		if err != nil || !res.Locked || res.Level != 1 || res.RetryAfter != time.Minute.Milliseconds() {
			t.Fatalf("after 200 concurrent failures: %+v %v, want one 1-minute lock", res, err)
		}
	})
}

// RunLeases checks concurrency slots: exactly Limit granted under
// contention, a release frees one, and an unreleased lease expires.
func RunLeases(t *testing.T, l tollgate.Leaser) {
	ctx := context.Background()
	p := policy(t)
	req := func(id string, at time.Time) algo.LeaseRequest {
		return algo.LeaseRequest{Policy: p, Subject: "s", ID: id, Limit: 10, TTL: 30 * time.Second, Now: at}
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ok, err := l.Acquire(ctx, req(fmt.Sprintf("lease-%d", i), base))
			if err != nil {
				t.Error(err)
			}
			if ok {
				got.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if got.Load() != 10 {
		t.Fatalf("granted %d leases, want exactly 10", got.Load())
	}
	if ok, _ := l.Acquire(ctx, req("late", base)); ok {
		t.Fatal("an 11th lease was granted")
	}
	// Find a holder and release it: one slot frees.
	released := false
	for i := 0; i < 200 && !released; i++ {
		id := fmt.Sprintf("lease-%d", i)
		if err := l.Release(ctx, req(id, base)); err != nil {
			t.Fatal(err)
		}
		if ok, _ := l.Acquire(ctx, req("after-release", base)); ok {
			released = true
		}
	}
	if !released {
		t.Fatal("releasing leases never freed a slot")
	}
	// Unreleased leases expire after their TTL (a crashed holder).
	if ok, _ := l.Acquire(ctx, req("expired", base.Add(30*time.Second))); !ok {
		t.Fatal("leases did not expire after their TTL")
	}
	if _, err := l.Acquire(ctx, algo.LeaseRequest{Policy: p, Subject: "s", ID: "x", Limit: 0, TTL: time.Second}); err == nil {
		t.Fatal("a limit of 0 was accepted")
	}
}
