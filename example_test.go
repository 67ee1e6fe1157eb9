package tollgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store/memory"
)

// A limiter on the embedded store: 3 requests per minute for each subject.
func Example() {
	store := memory.New(memory.Options{})
	defer store.Close()
	limiter, err := tollgate.NewLimiter(store, tollgate.PerMinute(3), tollgate.Options{Name: "api"})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := 1; i <= 4; i++ {
		d, err := limiter.AllowAt(context.Background(), "user-42", 1, now)
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v remaining=%d retry after %v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// request 1: allowed=true remaining=2 retry after 0s
	// request 2: allowed=true remaining=1 retry after 0s
	// request 3: allowed=true remaining=0 retry after 0s
	// request 4: allowed=false remaining=0 retry after 20s
}

// Weighted cost: an export costs 10 of a token bucket's 25 tokens, refilled
// at 5 per second.
func Example_weightedCost() {
	store := memory.New(memory.Options{})
	defer store.Close()
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 5, Period: time.Second, Burst: 25}
	limiter, _ := tollgate.NewLimiter(store, limit, tollgate.Options{})
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	for _, cost := range []int64{10, 10, 10} {
		d, _ := limiter.AllowAt(ctx, "tenant-7", cost, now)
		fmt.Printf("cost %d: allowed=%v remaining=%d retry after %v\n", cost, d.Allowed, d.Remaining, d.RetryAfter)
	}
	_, err := limiter.AllowAt(ctx, "tenant-7", 26, now)
	fmt.Println(err)
	// Output:
	// cost 10: allowed=true remaining=15 retry after 0s
	// cost 10: allowed=true remaining=5 retry after 0s
	// cost 10: allowed=false remaining=5 retry after 1s
	// deciding in memory: cost exceeds burst: cost 26, capacity 25
}

// A fixed window lets twice the limit through across a window boundary; a
// sliding window does not.
func Example_windowBoundary() {
	store := memory.New(memory.Options{})
	defer store.Close()
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 12, 0, 59, 0, time.UTC) // 1s before the minute turns
	for _, alg := range []tollgate.Algorithm{tollgate.FixedWindow, tollgate.SlidingWindowLog, tollgate.SlidingWindowCounter} {
		limiter, _ := tollgate.NewLimiter(store, tollgate.Limit{Algorithm: alg, Rate: 100, Period: time.Minute}, tollgate.Options{})
		admitted := 0
		for _, at := range []time.Time{end, end.Add(time.Second)} {
			for i := 0; i < 100; i++ {
				if d, _ := limiter.AllowAt(ctx, "bot", 1, at); d.Allowed {
					admitted++
				}
			}
		}
		fmt.Printf("%s: %d admitted in 2s\n", alg, admitted)
	}
	// Output:
	// fixed_window: 200 admitted in 2s
	// sliding_log: 100 admitted in 2s
	// sliding_counter: 100 admitted in 2s
}
