package storetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/testenv"
)

var lockRule = algo.LockoutRule{Threshold: 5, Lock: time.Minute, MaxLock: time.Hour, Window: 15 * time.Minute, Memory: 24 * time.Hour}

// RunGuard checks a store's login-guard state, held attempts included,
// against the pure algo.Lockout, and that concurrent failures lock an
// account exactly once and concurrent reservations hold exactly the
// attempts the account has left.
func RunGuard(t *testing.T, g tollgate.Store) {
	t.Run("MatchesModel", func(t *testing.T) { testGuardModel(t, g) })
	t.Run("LookAlikeSuccessClearsNothing", func(t *testing.T) { testLookAlikeSuccess(t, g) })
	t.Run("ConcurrentFailuresLockOnce", func(t *testing.T) { testConcurrentFailures(t, g) })
	t.Run("ConcurrentReservations", func(t *testing.T) { testConcurrentReservations(t, g) })
}

// lockout asks g for req's login-guard state, failing the test on an
// error.
func lockout(t *testing.T, g tollgate.Guard, req algo.LockoutRequest) algo.LockoutResult {
	t.Helper()
	res, err := g.Lockout(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// concurrently calls f(i) for every i from 0 to n-1, each in its own
// goroutine, and returns, in no particular order, the i for which f
// returned true. An error f returns fails t.
func concurrently(t *testing.T, n int, f func(i int) (bool, error)) []int {
	var won []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ok, err := f(i)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				won = append(won, i)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return won
}

// testGuardModel drives random login-guard operations, with holds settled
// or left to expire and the account spelt several ways, and checks every
// result against the pure algo.Lockout.
func testGuardModel(t *testing.T, g tollgate.Guard) {
	p := policy(t)
	var st algo.State
	holds := algo.Holds{}
	now := base
	seed := uint32(testenv.Seed(t))
	for step := 0; step < 600; step++ {
		seed = seed*1664525 + 1013904223
		op, h, spelling := lockStep(seed)
		now = now.Add(time.Duration(seed>>16%60) * time.Second)
		want, _ := algo.Lockout(lockRule, &st, holds, now.UnixMilli(), op, h, spelling)
		got := lockout(t, g, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: op, Hold: h, Spelling: spelling, Now: now})
		if got != want {
			t.Fatalf("step %d (op %d, hold %q, spelling %d): got %+v, want %+v", step, op, h.ID, spelling, got, want)
		}
	}
}

// lockStep returns the login-guard operation of a step of
// testGuardModel drawn from seed: the op, its hold and the spelling of
// the account.
func lockStep(seed uint32) (algo.LockOp, algo.Hold, uint32) {
	op := algo.LockOp(seed >> 8 % 5)
	if seed>>12%4 == 0 {
		op = algo.LockFail
	}
	// Holds of 2 minutes, some settled, some left to expire.
	h := algo.Hold{ID: fmt.Sprintf("h%d", seed>>20%8), TTL: 2 * time.Minute}
	if op == algo.LockCheck || seed>>24%3 == 0 && op != algo.LockReserve {
		h = algo.Hold{}
	}
	// Mostly one spelling, sometimes others (the largest too).
	spelling := [...]uint32{7, 7, 7, 7, 7, 0, 8, math.MaxUint32}[seed>>28%8]
	return op, h, spelling
}

// victimSpelling and lookalikeSpelling are two spellings of one account
// in testLookAlikeSuccess and the checks it calls: the victim's, and a
// look-alike's the attacker owns.
const victimSpelling, lookalikeSpelling = 1, 2

// testLookAlikeSuccess checks the attack of 4 guesses at an account, then
// a login to a look-alike the attacker owns (counted as the same account,
// spelt otherwise), and 4 guesses more: the success must not clear the
// guesses, and the fifth locks. A user's own success still clears their
// failures.
func testLookAlikeSuccess(t *testing.T, g tollgate.Guard) {
	p := policy(t)
	op := func(op algo.LockOp, spelling uint32, at time.Duration) algo.LockoutResult {
		t.Helper()
		return lockout(t, g, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: op, Spelling: spelling, Now: base.Add(at)})
	}
	for i := range 4 {
		op(algo.LockFail, victimSpelling, time.Duration(i)*time.Second)
	}
	if res := op(algo.LockSucceed, lookalikeSpelling, 5*time.Second); res.Failures != 4 {
		t.Fatalf("a success spelt otherwise than the failures: %+v, want the 4 failures kept", res)
	}
	if res := op(algo.LockFail, victimSpelling, 6*time.Second); !res.Locked {
		t.Fatalf("the fifth guess after a look-alike's success: %+v, want locked", res)
	}
	checkOwnSuccessClears(t, g)
	checkMixedSpellingsKept(t, g)
}

// checkOwnSuccessClears checks that a user's own success, spelt as their
// failures, clears them.
func checkOwnSuccessClears(t *testing.T, g tollgate.Guard) {
	p := policy(t)
	for range 4 {
		lockout(t, g, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockFail, Spelling: victimSpelling, Now: base})
	}
	res, err := g.Lockout(context.Background(), algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockSucceed, Spelling: victimSpelling, Now: base})
	if !meets(res, err, failures(0)) {
		t.Fatalf("a success spelt as the failures: %+v %v, want them cleared", res, err)
	}
}

// checkMixedSpellingsKept checks that failures spelt two ways are cleared
// by neither spelling's success.
func checkMixedSpellingsKept(t *testing.T, g tollgate.Guard) {
	p := policy(t)
	for _, sp := range []uint32{victimSpelling, lookalikeSpelling, victimSpelling} {
		lockout(t, g, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockFail, Spelling: sp, Now: base})
	}
	for _, sp := range []uint32{victimSpelling, lookalikeSpelling} {
		res, err := g.Lockout(context.Background(), algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockSucceed, Spelling: sp, Now: base})
		if !meets(res, err, failures(3)) {
			t.Fatalf("a success spelt %d after failures spelt two ways: %+v %v, want the 3 failures kept", sp, res, err)
		}
	}
}

// testConcurrentFailures checks that 200 concurrent failures lock an
// account once, for the first lock's time.
func testConcurrentFailures(t *testing.T, g tollgate.Guard) {
	ctx := context.Background()
	p := policy(t)
	concurrently(t, 200, func(int) (bool, error) {
		_, err := g.Lockout(ctx, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockFail, Now: base})
		return false, err
	})
	res, err := g.Lockout(ctx, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockCheck, Now: base})
	if !meets(res, err, locked, level(1), lockedFor(time.Minute)) {
		t.Fatalf("after 200 concurrent failures: %+v %v, want one 1-minute lock", res, err)
	}
}

// testConcurrentReservations checks that 200 concurrent reservations
// after one failure hold exactly the 4 attempts left, that their failures
// lock the account, and that a reservation needs a hold.
func testConcurrentReservations(t *testing.T, g tollgate.Guard) {
	ctx := context.Background()
	p := policy(t)
	req := func(op algo.LockOp, i int) algo.LockoutRequest {
		return algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: op, Now: base,
			Hold: algo.Hold{ID: fmt.Sprintf("attempt-%d", i), TTL: time.Minute}}
	}
	lockout(t, g, req(algo.LockFail, -1))
	reserved := concurrently(t, 200, func(i int) (bool, error) {
		res, err := g.Lockout(ctx, req(algo.LockReserve, i))
		return res.Reserved, err
	})
	if len(reserved) != 4 {
		t.Fatalf("200 concurrent reservations after one failure held %d attempts, want 4", len(reserved))
	}
	for _, i := range reserved {
		lockout(t, g, req(algo.LockFail, i))
	}
	res, err := g.Lockout(ctx, req(algo.LockReserve, 1000))
	if !meets(res, err, unreserved, locked, holding(0)) {
		t.Fatalf("after the held attempts failed: %+v %v, want locked", res, err)
	}
	if _, err := g.Lockout(ctx, algo.LockoutRequest{Name: p, Subject: "acct", Rule: lockRule, Op: algo.LockReserve, Now: base}); !algo.IsInvalid(err) {
		t.Fatalf("a reservation without a hold: %v, want an invalid-request error", err)
	}
}

// RunReserver checks held attempts on rate limits: on every algorithm,
// reservations made at once hold exactly what the limit has left, a
// charge spends and a give-back frees a place, a hold that is never
// settled expires, and the decisions match algo.Prepared.Reserve.
func RunReserver(t *testing.T, r tollgate.Store) {
	for _, a := range algo.Algorithms() {
		t.Run(a.String(), func(t *testing.T) { testReserver(t, r, a) })
	}
}

// testReserver runs RunReserver's checks on a limit of 20 under algorithm
// a.
func testReserver(t *testing.T, r tollgate.Reserver, a algo.Algorithm) {
	ctx := context.Background()
	p := policy(t)
	l := algo.Limit{Algorithm: a, Rate: 20, Period: 10 * time.Minute}
	req := algo.Request{Name: p, Subject: "ip", Limit: l, Cost: 1, Now: base}
	hold := func(i int) algo.Hold { return algo.Hold{ID: fmt.Sprintf("attempt-%d", i), TTL: time.Minute} }
	// Three charged first: 17 left.
	chargeHeld(t, r, req, hold, 3)
	held := concurrently(t, 100, func(i int) (bool, error) {
		d, err := r.Reserve(ctx, req, hold(i))
		return d.Allowed, err
	})
	if len(held) != 17 {
		t.Fatalf("100 concurrent reservations held %d, want the 17 left", len(held))
	}
	// Model: the limit's state after three charges.
	pl, _ := l.Prepare()
	var st algo.State
	for i := 0; i < 3; i++ {
		pl.Decide(&st, base.UnixMilli(), 1)
	}
	var want algo.Result
	pl.Reserve(&want, &st, 17, base.UnixMilli(), 1)
	if d, err := r.Reserve(ctx, req, hold(1000)); !meets(d, err, is(want.Decision())) {
		t.Fatalf("an 18th reservation: %+v %v, want %+v", d, err, want.Decision())
	}
	checkSettleHeld(t, r, req, hold, held)
	// Unsettled holds expire after their TTL.
	later := req
	later.Now = base.Add(time.Minute)
	pl.Decide(&st, base.UnixMilli(), 1) // the charged hold
	pl.Reserve(&want, &st, 0, later.Now.UnixMilli(), 1)
	if d, err := r.Reserve(ctx, later, hold(2000)); !meets(d, err, is(want.Decision())) {
		t.Fatalf("after the holds expired: %+v %v, want %+v", d, err, want.Decision())
	}
	if _, err := r.Reserve(ctx, req, algo.Hold{}); !algo.IsInvalid(err) {
		t.Fatalf("an empty hold: %v, want an invalid-request error", err)
	}
}

// chargeHeld charges n attempts on req's limit, each reserved first and
// then settled as spent, under the holds hold(-1) to hold(-n).
func chargeHeld(t *testing.T, r tollgate.Reserver, req algo.Request, hold func(int) algo.Hold, n int) {
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if _, err := r.Reserve(ctx, req, hold(-i-1)); err != nil {
			t.Fatal(err)
		}
		if d, err := r.Settle(ctx, req, hold(-i-1), true); !meets(d, err, allowed) {
			t.Fatalf("charge %d: %+v %v", i, d, err)
		}
	}
}

// checkSettleHeld checks, on req's limit with every place held (the holds
// in held, made with hold), that a give-back and a charge free one place,
// that a retried reservation stays held, and that settling a hold settled
// already changes nothing.
func checkSettleHeld(t *testing.T, r tollgate.Reserver, req algo.Request, hold func(int) algo.Hold, held []int) {
	ctx := context.Background()
	// Give one back and charge another: one place frees.
	if _, err := r.Settle(ctx, req, hold(held[0]), false); err != nil {
		t.Fatal(err)
	}
	if d, err := r.Settle(ctx, req, hold(held[1]), true); !meets(d, err, allowed, left(16)) {
		t.Fatalf("charging a held attempt: %+v %v, want 16 left", d, err)
	}
	if d, err := r.Reserve(ctx, req, hold(1001)); !meets(d, err, allowed, left(0)) {
		t.Fatalf("after a give-back: %+v %v", d, err)
	}
	// A retried reservation stays held; settling an unknown or
	// settled hold changes nothing.
	if d, err := r.Reserve(ctx, req, hold(1001)); !meets(d, err, allowed) {
		t.Fatalf("a retried reservation: %+v %v", d, err)
	}
	if d, err := r.Settle(ctx, req, hold(held[0]), false); !meets(d, err, left(16)) {
		t.Fatalf("settling twice: %+v %v", d, err)
	}
}

// RunLeases checks concurrency slots: exactly Limit granted under
// contention, a release frees one, and an unreleased lease expires; a
// release is idempotent, and one that arrives before its acquire (which
// timed out at its caller and reached the store late) makes the acquire
// take nothing, until the released id's TTL has passed.
func RunLeases(t *testing.T, l tollgate.Store) {
	t.Run("ReleaseBeforeAcquire", func(t *testing.T) { runReleaseFirst(t, l) })
	ctx := context.Background()
	p := policy(t)
	req := func(id string, at time.Time) algo.LeaseRequest {
		return algo.LeaseRequest{Name: p, Subject: "s", ID: id, Limit: 10, TTL: 30 * time.Second, Now: at}
	}
	granted := concurrently(t, 200, func(i int) (bool, error) {
		return l.Acquire(ctx, req(fmt.Sprintf("lease-%d", i), base))
	})
	if len(granted) != 10 {
		t.Fatalf("granted %d leases, want exactly 10", len(granted))
	}
	if ok, _ := l.Acquire(ctx, req("late", base)); ok {
		t.Fatal("an 11th lease was granted")
	}
	checkReleaseFrees(t, l, req)
	// Unreleased leases expire after their TTL (a crashed holder).
	if ok, _ := l.Acquire(ctx, req("expired", base.Add(30*time.Second))); !ok {
		t.Fatal("leases did not expire after their TTL")
	}
	if _, err := l.Acquire(ctx, algo.LeaseRequest{Name: p, Subject: "s", ID: "x", Limit: 0, TTL: time.Second}); err == nil {
		t.Fatal("a limit of 0 was accepted")
	}
}

// checkReleaseFrees finds a holder of the leases "lease-0" to
// "lease-199" of RunLeases, all slots taken, and releases it: one slot
// frees. req makes the requests, on RunLeases' limit.
func checkReleaseFrees(t *testing.T, l tollgate.Leaser, req func(id string, at time.Time) algo.LeaseRequest) {
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("lease-%d", i)
		if err := l.Release(ctx, req(id, base)); err != nil {
			t.Fatal(err)
		}
		if ok, _ := l.Acquire(ctx, req("after-release", base)); ok {
			return
		}
	}
	t.Fatal("releasing leases never freed a slot")
}

// A leaseStep is one call runReleaseFirst makes, at its time after base:
// the release of a lease, or its acquire, which must take a slot or not
// (granted), failing the test with fail otherwise.
type leaseStep struct {
	release bool
	id      string
	at      time.Duration
	granted bool
	fail    string
}

// releaseFirstSteps are the calls of runReleaseFirst, on a limit of 2.
var releaseFirstSteps = []leaseStep{
	// The release of "late" reaches the store first: its acquire, when it
	// comes, takes no slot.
	{release: true, id: "late", at: 0},
	{release: true, id: "late", at: 0}, // idempotent
	{id: "late", at: time.Second, fail: "an acquire that came after its release took a slot"},
	{id: "a", at: time.Second, granted: true, fail: "the released id kept a slot from others"},
	{id: "b", at: time.Second, granted: true, fail: "the released id kept a slot from others"},
	{id: "c", at: time.Second, fail: "a third lease under a limit of 2"},
	// Releasing a held lease twice frees one slot, once.
	{release: true, id: "a", at: 2 * time.Second},
	{release: true, id: "a", at: 2 * time.Second},
	{id: "d", at: 2 * time.Second, granted: true, fail: "a release did not free its slot"},
	{id: "e", at: 2 * time.Second, fail: "a second release of one lease freed a second slot"},
	// A released id is remembered for the lease TTL, and then forgotten.
	{release: true, id: "again", at: 2 * time.Second},
	{release: true, id: "b", at: 3 * time.Second},
	{id: "again", at: 31 * time.Second, fail: "a released id took a slot within the TTL of its release"},
	{id: "again", at: 32 * time.Second, granted: true, fail: "a released id was remembered past the TTL of its release"},
}

// run makes the call of step s as req, failing t if it fails or, for an
// acquire, if it takes a slot or not otherwise than it must.
func (s leaseStep) run(t *testing.T, l tollgate.Leaser, req algo.LeaseRequest) {
	t.Helper()
	ctx := context.Background()
	if s.release {
		if err := l.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		return
	}
	ok, err := l.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if ok != s.granted {
		t.Fatal(s.fail)
	}
}

// runReleaseFirst checks a release that reaches the store before its
// acquire: the acquire then takes nothing until the released id's TTL has
// passed, and releases are idempotent.
func runReleaseFirst(t *testing.T, l tollgate.Leaser) {
	p := policy(t)
	for _, step := range releaseFirstSteps {
		step.run(t, l, algo.LeaseRequest{Name: p, Subject: "s", ID: step.id, Limit: 2, TTL: 30 * time.Second, Now: base.Add(step.at)})
	}
	if err := l.Release(context.Background(), algo.LeaseRequest{Name: p, Subject: "s", ID: "x", Limit: 2}); !algo.IsInvalid(err) {
		t.Fatalf("a release without a TTL: %v, want an invalid-request error", err)
	}
}
