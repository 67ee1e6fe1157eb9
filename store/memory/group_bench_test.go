package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
)

// BenchmarkAllowAll decides a group of two limits of one subject (a plan
// and a route budget) on many subjects, all admitted.
func BenchmarkAllowAll(b *testing.B) {
	s := memory.New(memory.Options{})
	defer s.Close()
	plan, err := algo.NewHandle("plan", benchLimit(algo.GCRA))
	if err != nil {
		b.Fatal(err)
	}
	route, err := algo.NewHandle("route", benchLimit(algo.SlidingWindowCounter))
	if err != nil {
		b.Fatal(err)
	}
	subjects := make([]string, 10_000)
	for i := range subjects {
		subjects[i] = "subject-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	reqs := make([]algo.Request, 2)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sub := subjects[i%len(subjects)]
		reqs[0], reqs[1] = plan.Request(sub, 1), route.Request(sub, 1)
		if _, err := s.AllowAll(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveSettle holds a place on a limit and settles it charged,
// as the login guard does for each attempt.
func BenchmarkReserveSettle(b *testing.B) {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, err := algo.NewHandle("attempts", benchLimit(algo.GCRA))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := h.Request("subject-"+strconv.Itoa(i%1000), 1)
		hold := algo.Hold{ID: "a" + strconv.Itoa(i), TTL: time.Minute}
		if _, err := s.Reserve(ctx, req, hold); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Settle(ctx, req, hold, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockout reserves a login attempt and settles it failed, on
// accounts that never reach the threshold.
func BenchmarkLockout(b *testing.B) {
	s := memory.New(memory.Options{})
	defer s.Close()
	rule := algo.LockoutRule{Threshold: 1 << 40, Lock: time.Second, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := algo.LockoutRequest{Name: "login", Subject: "account-" + strconv.Itoa(i%1000), Rule: rule,
			Op: algo.LockReserve, Hold: algo.Hold{ID: "a" + strconv.Itoa(i), TTL: time.Minute}}
		if _, err := s.Lockout(ctx, req); err != nil {
			b.Fatal(err)
		}
		req.Op = algo.LockFail
		if _, err := s.Lockout(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
