package tollgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store/memory"
)

// Wait blocks until the budget admits the cost, or fails at once when the
// context's deadline comes too soon.
func ExampleLimiter_Wait() {
	store := memory.New(memory.Options{})
	defer store.Close()
	limiter, err := tollgate.NewLimiter(store, tollgate.PerMinute(1), tollgate.Options{Name: "exports"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := limiter.Wait(ctx, "tenant-7", 1); err != nil {
		panic(err)
	}
	fmt.Println("first export: admitted at once")

	// The next is admitted in a minute: a 1-second deadline fails at once
	// and charges nothing.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = limiter.Wait(ctx, "tenant-7", 1)
	fmt.Println("second export:", errors.Is(err, tollgate.ErrWouldExceedDeadline))
	// Output:
	// first export: admitted at once
	// second export: true
}

// On a shaping limit a reservation may lie ahead: the store places the
// cost in its queue, shared by every instance, and Delay says when to act.
func ExampleLimiter_Reserve() {
	store := memory.New(memory.Options{})
	defer store.Close()
	shaped := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: 1, Period: time.Second, Burst: 1, MaxDelay: 2 * time.Second}
	limiter, err := tollgate.NewLimiter(store, shaped, tollgate.Options{Name: "webhooks"})
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 4; i++ {
		r, err := limiter.Reserve(context.Background(), "endpoint-3", 1)
		if err != nil {
			panic(err)
		}
		if !r.OK() {
			fmt.Printf("webhook %d: refused, retry after %v\n", i, r.RetryAfter().Round(time.Second))
			continue
		}
		// Delay counts from now on the real clock, so it is printed to
		// the second: the calls may take up to half a second.
		fmt.Printf("webhook %d: send in %v\n", i, r.Delay().Round(time.Second))
		if i == 3 {
			// The last place in the queue is given back; the next
			// reservation takes it.
			fmt.Println("cancel webhook 3:", r.Cancel())
		}
	}
	// Output:
	// webhook 1: send in 0s
	// webhook 2: send in 1s
	// webhook 3: send in 2s
	// cancel webhook 3: <nil>
	// webhook 4: send in 2s
}
