package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// testWithin: a request's queue threshold (algo.Request.Within) is
// honoured alone and in a group, and one that is invalid (on a limit that
// does not shape, longer than the max delay, negative) is an error that
// charges nothing. The arithmetic is in the shared vectors.
func testWithin(t *testing.T, s tollgate.Store) {
	ctx := context.Background()
	p := policy(t)
	shaper := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: time.Second}
	req := func(cost int64, within time.Duration) algo.Request {
		return algo.Request{Name: p, Subject: "w", Limit: shaper, Cost: cost, Now: base, Within: within}
	}
	for i := range 4 { // turns 0 to 300 ms
		if d, err := s.Allow(ctx, req(1, 0)); !meets(d, err, allowed, delay(time.Duration(i)*100*time.Millisecond)) {
			t.Fatalf("place %d: %+v, %v", i, d, err)
		}
	}
	d, err := s.Allow(ctx, req(1, 300*time.Millisecond))
	if !meets(d, err, refused, retryAfter(100*time.Millisecond)) {
		t.Errorf("a turn 400 ms away under a threshold of 300 ms: %+v, %v; want refused for 100ms", d, err)
	}
	ds, err := s.AllowAll(ctx, []algo.Request{req(1, 300*time.Millisecond)})
	if err != nil || !meets(ds[0], nil, refused, retryAfter(100*time.Millisecond)) {
		t.Errorf("the same in a group: %+v, %v", ds, err)
	}
	if d, err := s.Allow(ctx, req(1, 400*time.Millisecond)); !meets(d, err, allowed, delay(400*time.Millisecond)) {
		t.Errorf("a turn 400 ms away under a threshold of 400 ms: %+v, %v", d, err)
	}
	checkInvalidWithin(t, s, p, req)
}

// checkInvalidWithin checks that a queue threshold on a limit that does
// not shape, longer than the max delay, or negative is an error, alone and
// in a group, and charges nothing; req makes requests, under policy p, on
// the shaping limit of testWithin.
func checkInvalidWithin(t *testing.T, s tollgate.Store, p string, req func(cost int64, within time.Duration) algo.Request) {
	ctx := context.Background()
	before, err := s.Allow(ctx, req(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	meter := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second}
	for _, bad := range []algo.Request{
		req(1, 2*time.Second),
		req(1, -time.Millisecond),
		req(1, time.Microsecond),
		{Name: p, Subject: "w", Limit: meter, Cost: 1, Now: base, Within: time.Millisecond},
		{Name: p, Subject: "w", Limit: algo.Limit{Rate: 10, Period: time.Second}, Cost: 1, Now: base, Within: time.Millisecond},
	} {
		if _, err := s.Allow(ctx, bad); !errors.Is(err, algo.ErrInvalidRequest) {
			t.Errorf("Within %v on %v: err = %v, want ErrInvalidRequest", bad.Within, bad.Limit, err)
		}
		var ie *algo.ItemError
		if _, err := s.AllowAll(ctx, []algo.Request{bad}); !errors.Is(err, algo.ErrInvalidRequest) || !errors.As(err, &ie) {
			t.Errorf("Within %v on %v in a group: err = %v, want an ItemError of ErrInvalidRequest", bad.Within, bad.Limit, err)
		}
	}
	if after, err := s.Allow(ctx, req(0, 0)); !meets(after, err, is(before)) {
		t.Errorf("invalid requests changed the state: %+v, was %+v (%v)", after, before, err)
	}
}

// testPushBack: a push back on the store's clock postpones the next turn
// by what was asked, whether the request carries its handle or not, and
// invalid push backs (a limit that does not shape, a duration that is not
// positive) are errors that change nothing. The arithmetic is in the
// shared vectors. On the store's clock, each check allows the calls a
// second (a place's spacing) of the machine's time: a hundred times what
// they take on an idle one.
func testPushBack(t *testing.T, s tollgate.Store) {
	p := policy(t)
	shaper := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 1, Period: time.Second, Burst: 1, MaxDelay: 20 * time.Second}
	h, err := algo.NewHandle(p, shaper)
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range []algo.Request{
		{Name: p, Subject: "pb", Limit: shaper},
		h.Request("pb-handle", 0),
	} {
		checkPushBack(t, s, i, req, shaper)
	}
	checkInvalidPushBacks(t, s, p, shaper)
}

// checkPushBack pushes the turn of req (request i of testPushBack, on
// shaper, one place a second) back by 5s on the store's clock, and checks
// that the push back takes a turn now, that the next place comes after
// it, and that it is kept until it has drained.
func checkPushBack(t *testing.T, s tollgate.Store, i int, req algo.Request, shaper algo.Limit) {
	ctx := context.Background()
	d, err := s.PushBack(ctx, req, 5*time.Second)
	if !meets(d, err, allowed, delayIn(4*time.Second, 5*time.Second)) {
		t.Fatalf("request %d: push back 5s on the store's clock: %+v, %v; want a turn taken now 4-5s away", i, d, err)
	}
	req.Cost = 1
	if d, err := s.Allow(ctx, req); !meets(d, err, allowed, delayIn(5*time.Second, 6*time.Second)) {
		t.Fatalf("request %d: the first place after the push back: %+v, %v; want it 5-6s away", i, d, err)
	}
	// A push back is kept, like a charge, until it has drained.
	if d, err := s.Allow(ctx, algo.Request{Name: req.Name, Subject: req.Subject, Limit: shaper}); !meets(d, err, resetBeyond(5*time.Second)) {
		t.Errorf("request %d: query after: %+v, %v", i, d, err)
	}
}

// checkInvalidPushBacks checks that a push back on a limit that does not
// shape, or of a duration that is not positive or beyond algo.MaxHorizon,
// is an error that leaves the schedule of shaper, under policy p, as it
// was.
func checkInvalidPushBacks(t *testing.T, s tollgate.Store, p string, shaper algo.Limit) {
	ctx := context.Background()
	gcra := algo.Limit{Rate: 10, Period: time.Second}
	meter := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second}
	for _, bad := range []struct {
		l algo.Limit
		d time.Duration
	}{{gcra, time.Second}, {meter, time.Second}, {shaper, 0}, {shaper, -time.Second}, {shaper, algo.MaxHorizon + time.Hour}} {
		req := algo.Request{Name: p, Subject: "pb-bad", Limit: bad.l, Now: base}
		if _, err := s.PushBack(ctx, req, bad.d); !errors.Is(err, algo.ErrInvalidRequest) {
			t.Errorf("push back %v on %v: err = %v, want ErrInvalidRequest", bad.d, bad.l, err)
		}
	}
	if d, err := s.Allow(ctx, algo.Request{Name: p, Subject: "pb-bad", Limit: shaper, Cost: 1, Now: base}); !meets(d, err, delay(0)) {
		t.Errorf("invalid push backs changed the schedule: %+v, %v", d, err)
	}
}

// placeQueue takes and gives back places in the queue of one shaped
// request, failing the test on an error.
type placeQueue struct {
	t   *testing.T
	s   tollgate.Store
	req algo.Request
}

// take takes a place in the queue at now, which must be allowed and
// reported.
func (q placeQueue) take(now time.Time) (algo.Decision, algo.Place) {
	q.t.Helper()
	r := q.req
	r.Now = now
	d, at, err := q.s.TakePlace(context.Background(), r)
	if !meets(d, err, allowed) {
		q.t.Fatalf("TakePlace: %+v, %v", d, err)
	}
	if at == (algo.Place{}) {
		q.t.Fatalf("TakePlace of a charge reported no place: %+v", d)
	}
	return d, at
}

// give gives back the place at, at now, and reports whether it was.
func (q placeQueue) give(at algo.Place, now time.Time) bool {
	q.t.Helper()
	r := q.req
	r.Now = now
	ok, err := q.s.GiveBack(context.Background(), r, at)
	if err != nil {
		q.t.Fatalf("GiveBack: %v", err)
	}
	return ok
}

// testGiveBack: a place taken with TakePlace is given back while it is
// the last in the queue, and the queue is then as if it had never been
// taken; a place others queued behind, a place given back already, and a
// place of an expired queue are not; a limit that does not shape is an
// error.
func testGiveBack(t *testing.T, s tollgate.Store) {
	p := policy(t)
	shaper := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, MaxDelay: time.Second}
	req := algo.Request{Name: p, Subject: "g", Limit: shaper, Cost: 1, Now: base}
	q := placeQueue{t, s, req}
	_, p0 := q.take(base)
	d1, p1 := q.take(base)
	d2, p2 := q.take(base.Add(10 * time.Millisecond))
	if d1.Delay != 100*time.Millisecond || d2.Delay != 190*time.Millisecond {
		t.Fatalf("places at %v and %v, want 100ms and 190ms", d1.Delay, d2.Delay)
	}
	if q.give(p1, base.Add(20*time.Millisecond)) {
		t.Error("a place with another behind it was given back")
	}
	if !q.give(p2, base.Add(20*time.Millisecond)) {
		t.Fatal("the last place was not given back")
	}
	if q.give(p2, base.Add(20*time.Millisecond)) {
		t.Error("a place was given back twice")
	}
	// The queue is as before the place: the next one takes its turn.
	if d, _ := q.take(base.Add(10 * time.Millisecond)); d.Delay != 190*time.Millisecond {
		t.Errorf("after the give back, the next place is %v away, want 190ms", d.Delay)
	}
	checkNoGiveBackAfterTurn(t, s, req)
	// Long after, the queue has drained and its state expired (or is
	// drained): an old place is nothing to give back.
	if q.give(p0, base.Add(time.Minute)) {
		t.Error("a place of a drained queue was given back")
	}
	checkGiveBackLive(t, s, p)
	checkInvalidGiveBack(t, s, req, p0)
}

// checkNoGiveBackAfterTurn checks that a place whose turn has come was
// used (or could have been): it is not given back, even while it is the
// last. The places are taken on req's limit under another subject.
func checkNoGiveBackAfterTurn(t *testing.T, s tollgate.Store, req algo.Request) {
	ctx := context.Background()
	late := req
	late.Subject = "g-late"
	takeLate := func() algo.Place {
		t.Helper()
		d, at, err := s.TakePlace(ctx, late)
		if !meets(d, err, allowed) {
			t.Fatalf("TakePlace: %+v, %v", d, err)
		}
		return at
	}
	takeLate()
	lp := takeLate() // its turn: 100 ms after base
	late.Now = base.Add(150 * time.Millisecond)
	if ok, err := s.GiveBack(ctx, late, lp); !meets(ok, err, is(false)) {
		t.Errorf("a place given back after its turn: %v, %v", ok, err)
	}
}

// checkGiveBackLive takes the last place on the store's clock, under
// policy p, and gives it back. Its turn is 10 s away, so the give back
// comes before it however slow the machine.
func checkGiveBackLive(t *testing.T, s tollgate.Store, p string) {
	ctx := context.Background()
	slow := algo.Limit{Algorithm: algo.LeakyBucket, Rate: 1, Period: 10 * time.Second, Burst: 1, MaxDelay: time.Minute}
	live := algo.Request{Name: p, Subject: "g-live", Limit: slow, Cost: 1}
	if _, _, err := s.TakePlace(ctx, live); err != nil {
		t.Fatal(err)
	}
	d, at, err := s.TakePlace(ctx, live)
	if !meets(d, err, delayIn(0, forever)) {
		t.Fatalf("second live place: %+v, %v", d, err)
	}
	if ok, err := s.GiveBack(ctx, live, at); !meets(ok, err, is(true)) {
		t.Errorf("live give back: %v, %v", ok, err)
	}
	if d2, _, err := s.TakePlace(ctx, live); err != nil || d2.Delay > d.Delay {
		t.Errorf("after the live give back: %+v, %v; want a place no later than %v", d2, err, d.Delay)
	}
}

// checkInvalidGiveBack checks that taking or giving back a place (p0, of
// req's queue) on a limit that does not shape, and giving back no place,
// are errors.
func checkInvalidGiveBack(t *testing.T, s tollgate.Store, req algo.Request, p0 algo.Place) {
	ctx := context.Background()
	gcra := algo.Request{Name: req.Name, Subject: "g", Limit: algo.Limit{Rate: 10, Period: time.Second}, Cost: 1, Now: base}
	if _, _, err := s.TakePlace(ctx, gcra); !errors.Is(err, algo.ErrInvalidRequest) {
		t.Errorf("TakePlace on gcra: err = %v, want ErrInvalidRequest", err)
	}
	if _, err := s.GiveBack(ctx, gcra, p0); !errors.Is(err, algo.ErrInvalidRequest) {
		t.Errorf("GiveBack on gcra: err = %v, want ErrInvalidRequest", err)
	}
	if _, err := s.GiveBack(ctx, req, algo.Place{}); !errors.Is(err, algo.ErrInvalidRequest) {
		t.Errorf("GiveBack of no place: err = %v, want ErrInvalidRequest", err)
	}
}
