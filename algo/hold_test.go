package algo_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestLockoutHolds: attempts reserved at once never exceed what the
// account has left before its lock; settling them by outcome, or letting
// them expire, frees their places.
func TestLockoutHolds(t *testing.T) {
	r := algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: 15 * time.Minute, Memory: 24 * time.Hour}
	var s algo.State
	holds := algo.Holds{}
	now := int64(1_800_000_000_000)
	hold := func(i int) algo.Hold { return algo.Hold{ID: fmt.Sprint("a", i), TTL: 40 * time.Second} }
	op := func(o algo.LockOp, i int) algo.LockoutResult {
		res, _ := algo.Lockout(r, &s, holds, now, o, hold(i), 0)
		return res
	}
	// Two failures first: three places are left.
	op(algo.LockFail, -1)
	op(algo.LockFail, -2)
	reserved := 0
	for i := 0; i < 30; i++ {
		if res := op(algo.LockReserve, i); res.Reserved {
			reserved++
		} else if res.Locked || res.Held != 3 || res.Failures != 2 {
			t.Fatalf("refused reservation %d: %+v", i, res)
		}
	}
	if reserved != 3 {
		t.Fatalf("reserved %d attempts, want the 3 left", reserved)
	}
	// A retried reservation of a held attempt is still held.
	if res := op(algo.LockReserve, 0); !res.Reserved || res.Held != 3 {
		t.Fatalf("retried reservation: %+v", res)
	}
	// An attempt given back frees its place; a success clears the count.
	if res := op(algo.LockRelease, 0); res.Held != 2 || res.Failures != 2 {
		t.Fatalf("release: %+v", res)
	}
	if res := op(algo.LockSucceed, 1); res.Held != 1 || res.Failures != 0 {
		t.Fatalf("success: %+v", res)
	}
	for i := 100; i < 104; i++ {
		if res := op(algo.LockReserve, i); !res.Reserved {
			t.Fatalf("reservation %d after the success: %+v", i, res)
		}
	}
	if res := op(algo.LockReserve, 104); res.Reserved || res.Held != 5 {
		t.Fatalf("a 6th attempt held at once: %+v", res)
	}
	// All five fail: the fifth failure locks the account, and while it is
	// locked nothing is reserved.
	for _, i := range []int{2, 100, 101, 102, 103} {
		op(algo.LockFail, i)
	}
	if res := op(algo.LockReserve, 105); res.Reserved || !res.Locked || res.Held != 0 || res.RetryAfter != time.Minute.Milliseconds() {
		t.Fatalf("reservation while locked: %+v", res)
	}
	// A hold never settled (its holder crashed) expires after its TTL, and
	// the state lasts at least as long as a hold.
	now += 2 * time.Minute.Milliseconds()
	op(algo.LockSucceed, -3)
	for i := 200; i < 205; i++ {
		op(algo.LockReserve, i)
	}
	if res := op(algo.LockReserve, 205); res.Reserved {
		t.Fatalf("a 6th hold: %+v", res)
	}
	_, ttl := algo.Lockout(r, &s, holds, now, algo.LockCheck, algo.Hold{}, 0)
	if ttl < 40_000 {
		t.Fatalf("ttl %d ms with holds for 40 s", ttl)
	}
	now += 40_000
	if res := op(algo.LockReserve, 206); !res.Reserved || res.Held != 1 {
		t.Fatalf("after the holds expired: %+v", res)
	}
	if (algo.LockoutRequest{Rule: r, Op: algo.LockReserve}).Validate() == nil {
		t.Fatal("a reservation without a hold was accepted")
	}
	if (algo.LockoutRequest{Rule: r, Op: algo.LockRelease + 1, Hold: hold(1)}).Validate() == nil {
		t.Fatal("an unknown operation was accepted")
	}
}

// TestReserve: a limit admits held attempts only while it could take all
// of them, on every algorithm, and Reserve changes no state.
func TestReserve(t *testing.T) {
	now := int64(1_800_000_000_000)
	for _, a := range algo.Algorithms() {
		l := algo.Limit{Algorithm: a, Rate: 20, Period: 10 * time.Minute}
		pl, err := l.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		var s algo.State
		// Five charged: 15 left.
		for i := 0; i < 5; i++ {
			if r, _, _ := pl.Decide(&s, now, 1); !r.Allowed {
				t.Fatalf("%s: charge %d refused", a, i)
			}
		}
		before := s
		before.Log = s.Log.Clone()
		var r algo.Result
		for held := int64(0); held < 15; held++ {
			if err := pl.Reserve(&r, &s, held, now, 1); err != nil || !r.Allowed || r.Remaining != 14-held {
				t.Fatalf("%s: %d held: %+v %v", a, held, r, err)
			}
		}
		if err := pl.Reserve(&r, &s, 15, now, 1); err != nil || r.Allowed || r.RetryAfter < 1 {
			t.Fatalf("%s: a 16th held attempt: %+v %v", a, r, err)
		}
		if err := pl.Reserve(&r, &s, 40, now, 1); err != nil || r.Allowed || r.RetryAfter < 1 {
			t.Fatalf("%s: beyond the capacity: %+v %v", a, r, err)
		}
		if s.A != before.A || s.B != before.B || s.C != before.C || logLen(s.Log) != logLen(before.Log) {
			t.Fatalf("%s: Reserve changed the state", a)
		}
		if err := pl.Reserve(&r, &s, 0, now, 21); err == nil {
			t.Fatalf("%s: a cost above the capacity was accepted", a)
		}
	}
}

func logLen(g *algo.Log) int {
	if g == nil {
		return 0
	}
	return g.Len()
}
