package tollgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// TestReservationSettle: a reservation charges its estimate and Settle
// charges the actual cost instead, once, on both stores.
func TestReservationSettle(t *testing.T) {
	tpm := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1000, Period: time.Minute}
	cases := []struct {
		name              string
		estimate, actual  int64
		after             time.Duration // between the reservation and its settle
		remaining, debt   int64
		retryAfterRefusal time.Duration // for a request of 1 token after the settle; 0: admitted
	}{
		{"an overstated estimate gives back the difference", 800, 300, 0, 700, 0, 0},
		{"an exact estimate changes nothing", 800, 800, 0, 200, 0, 0},
		{"an understated estimate is charged as debt, which the next request waits for", 800, 1200, 0, 0, 200, 12060 * time.Millisecond},
		{"a refund shrinks by what the refill replaced since the reservation", 800, 300, 12 * time.Second, 700, 0, 0},
		{"a refund the refill has replaced gives nothing: no more than a fresh key", 800, 300, 45 * time.Second, 950, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
				clock := newClock(false)
				lim := newLimiter(t, s, tpm, clock)
				ctx := context.Background()
				r, err := lim.Reserve(ctx, "tenant", c.estimate)
				if err != nil || !r.OK() {
					t.Fatalf("reserving %d of 1000: ok %v, %v", c.estimate, r.OK(), err)
				}
				clock.Advance(c.after)
				d, err := r.Settle(ctx, c.actual)
				if err != nil {
					t.Fatal(err)
				}
				if d.Remaining != c.remaining || d.Debt != c.debt {
					t.Errorf("after the settle: remaining %d debt %d, want %d, %d", d.Remaining, d.Debt, c.remaining, c.debt)
				}
				if _, err := r.Settle(ctx, 0); !errors.Is(err, tollgate.ErrSettled) {
					t.Errorf("a second settle: %v, want ErrSettled", err)
				}
				next, err := lim.Reserve(ctx, "tenant", 1)
				if err != nil {
					t.Fatal(err)
				}
				if got := next.RetryAfter(); next.OK() != (c.retryAfterRefusal == 0) || got != c.retryAfterRefusal {
					t.Errorf("the next request: ok %v retry %v, want retry %v", next.OK(), got, c.retryAfterRefusal)
				}
			})
		})
	}
}

// TestReservationSettleRefused: what cannot be settled says so, and
// changes nothing.
func TestReservationSettleRefused(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s tollgate.Store, _ func() tollgate.Store) {
		clock := &fakeClock{now: testBase.Truncate(time.Hour)} // an hour's window does not roll in the test
		lim, err := tollgate.NewLimiter(s, tollgate.Limit{Algorithm: tollgate.FixedWindow, Rate: 10, Period: time.Hour}, tollgate.Options{ReservationTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		window := lim.WithClock(clock)
		full, _ := window.Reserve(ctx, "a", 10)
		refused, err := window.Reserve(ctx, "a", 1)
		if err != nil || refused.OK() {
			t.Fatalf("a reservation past the limit: ok %v, %v; want refused", refused.OK(), err)
		}
		if _, err := refused.Settle(ctx, 0); !errors.Is(err, algo.ErrInvalidRequest) {
			t.Errorf("settling a refused reservation: %v, want ErrInvalidRequest", err)
		}
		log := newLimiter(t, s, tollgate.Limit{Algorithm: tollgate.SlidingWindowLog, Rate: 10, Period: time.Minute}, clock)
		r, _ := log.Reserve(ctx, "a", 5)
		if _, err := r.Settle(ctx, 1); !errors.Is(err, algo.ErrSettleUnsupported) {
			t.Errorf("settling under a sliding log: %v, want ErrSettleUnsupported", err)
		}
		if d, _ := log.AllowAt(ctx, "a", 0, clock.Now()); d.Remaining != 5 {
			t.Errorf("the sliding log after a refused settle: remaining %d, want 5", d.Remaining)
		}
		clock.Advance(time.Second)
		d, err := full.Settle(ctx, 0)
		if !errors.Is(err, algo.ErrSettleExpired) {
			t.Errorf("a settle after the reservation TTL: %v, want ErrSettleExpired", err)
		}
		if d.Remaining != 0 {
			t.Errorf("after an expired settle: remaining %d, want 0 (the estimate stands)", d.Remaining)
		}
	})
}
