// Command basic shows Tollgate's limiter on the embedded in-memory store, or
// on Redis with -redis: a burst of requests from two subjects against a
// limit, and what each one is told.
//
//	go run ./examples/basic
//	go run ./examples/basic -redis redis://127.0.0.1:6379/0 -algorithm sliding_log
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db, as everywhere in Tollgate); empty uses the in-memory store")
	algName := flag.String("algorithm", "gcra", "gcra, token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_counter")
	rate := flag.Int64("rate", 5, "requests per period")
	period := flag.Duration("period", time.Second, "period")
	requests := flag.Int("n", 8, "requests per subject")
	flag.Parse()

	a, err := algo.ParseAlgorithm(*algName)
	if err != nil {
		log.Fatal(err)
	}
	var store tollgate.Store
	if *redisURL != "" {
		opt, err := rueidis.ParseURL(*redisURL)
		if err != nil {
			log.Fatal(err)
		}
		opt.DisableCache = true
		c, err := rueidis.NewClient(opt)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		if store, err = rstore.New(c, rstore.Options{}); err != nil {
			log.Fatal(err)
		}
	} else {
		m := memory.New(memory.Options{})
		defer m.Close()
		store = m
	}
	limit := tollgate.Limit{Algorithm: a, Rate: *rate, Period: *period}
	limiter, err := tollgate.NewLimiter(store, limit, tollgate.Options{Name: "example"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("limit: %v\n", limit)
	ctx := context.Background()
	for _, subject := range []string{"alice", "bob"} {
		for i := 1; i <= *requests; i++ {
			d, err := limiter.Allow(ctx, subject, 1)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			verdict := "allowed"
			if !d.Allowed {
				verdict = fmt.Sprintf("refused, retry after %v", d.RetryAfter)
			}
			fmt.Printf("%-5s #%d: %-28s remaining %d/%d, full again in %v\n", subject, i, verdict, d.Remaining, d.Quota, d.ResetAfter)
		}
	}
}
