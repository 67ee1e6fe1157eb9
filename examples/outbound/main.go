// Command outbound shows calls to a rate-limited third-party API shaped
// across a fleet with client.Shaper: a provider that refuses (429) above
// its limit, called by several instances at once, each with its own store
// client (one Redis with -redis, else one memory store shared in this
// process), sending batch work far above the provider's rate and critical
// work beside it.
//
//	go run ./examples/outbound
//	go run ./examples/outbound -redis redis://127.0.0.1:6379 -instances 4
//	go run ./examples/outbound -trip 1s   # the provider refuses for 1 s mid-run
//
// It prints what the provider accepted and refused, the rate it saw, how
// many calls the shaper turned away at once (batch, when the backlog is
// past its threshold), and how long critical and batch calls waited.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// provider accepts at most limit calls in any second and answers 429
// above that; tripped, it refuses everything for a while, saying so in
// Retry-After.
type provider struct {
	limit    int
	mu       sync.Mutex
	accepted []time.Time
	refused  int
	pausedAt time.Time
	pause    time.Duration
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if end := p.pausedAt.Add(p.pause); p.pause > 0 && !now.Before(p.pausedAt) && now.Before(end) {
		p.refused++
		w.Header().Set("Retry-After", fmt.Sprintf("%.3f", end.Sub(now).Seconds()))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	n := 0
	for i := len(p.accepted) - 1; i >= 0 && now.Sub(p.accepted[i]) < time.Second; i-- {
		n++
	}
	if n >= p.limit {
		p.refused++
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	p.accepted = append(p.accepted, now)
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port); empty: one memory store in this process")
	instances := flag.Int("instances", 3, "instances calling the provider, each with its own store client")
	providerLimit := flag.Int("provider-limit", 110, "the provider's limit: calls in any second")
	rate := flag.Int64("rate", 100, "the shaped rate: calls a second, for the whole fleet")
	maxDelay := flag.Duration("max-delay", 2*time.Second, "the longest turn a call may take in the queue (critical's threshold)")
	batchWithin := flag.Duration("batch-within", 500*time.Millisecond, "batch's threshold: it queues only while the backlog is shorter")
	offer := flag.Float64("offer", 3, "batch calls offered, as a multiple of the rate")
	criticalRate := flag.Float64("critical", 10, "critical calls a second, for the whole fleet")
	duration := flag.Duration("duration", 3*time.Second, "how long calls are offered")
	trip := flag.Duration("trip", 0, "if set, the provider refuses everything for this long, a third into the run")
	flag.Parse()

	p := &provider{limit: *providerLimit, pause: *trip}
	srv := httptest.NewServer(p)
	defer srv.Close()

	limit := tollgate.Limit{Algorithm: tollgate.LeakyBucket, Rate: *rate, Period: time.Second, Burst: 1, MaxDelay: *maxDelay}
	classes := map[string]time.Duration{"critical": 0, "batch": *batchWithin}
	var shapers []http.RoundTripper
	var shared tollgate.Store
	if *redisURL == "" {
		m := memory.New(memory.Options{})
		defer m.Close()
		shared = m
	}
	for range *instances {
		store := shared
		if store == nil {
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
			s, err := rstore.New(c, rstore.Options{})
			if err != nil {
				log.Fatal(err)
			}
			defer s.Close()
			store = s
		}
		lim, err := tollgate.NewLimiter(store, limit, tollgate.Options{Name: "example-outbound"})
		if err != nil {
			log.Fatal(err)
		}
		s, err := client.NewShaper(nil, lim, client.ShaperOptions{Classes: classes})
		if err != nil {
			log.Fatal(err)
		}
		// The Shaper paces; the Transport retries a provider's 429 after
		// its Retry-After, through the Shaper again.
		shapers = append(shapers, client.New(s, client.Options{NoPacing: true}))
	}

	start := time.Now()
	if *trip > 0 {
		p.mu.Lock()
		p.pausedAt = start.Add(*duration / 3)
		p.mu.Unlock()
	}
	stop := start.Add(*duration)
	type result struct {
		waits []time.Duration
		shed  atomic.Int64
		mu    sync.Mutex
	}
	results := map[string]*result{"critical": {}, "batch": {}}
	var wg sync.WaitGroup
	send := func(rt http.RoundTripper, class string, perSecond float64) {
		defer wg.Done()
		r := results[class]
		var calls sync.WaitGroup
		tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
		defer tick.Stop()
		for now := time.Now(); now.Before(stop); now = <-tick.C {
			calls.Add(1)
			go func() {
				defer calls.Done()
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(client.WithClass(context.Background(), class), http.MethodGet, srv.URL, nil)
				resp, err := rt.RoundTrip(req)
				switch {
				case errors.Is(err, tollgate.ErrWouldExceedDeadline):
					r.shed.Add(1)
				case err != nil:
					log.Print(err)
				default:
					resp.Body.Close()
					r.mu.Lock()
					r.waits = append(r.waits, time.Since(t0))
					r.mu.Unlock()
				}
			}()
		}
		calls.Wait()
	}
	n := float64(len(shapers))
	for _, rt := range shapers {
		wg.Add(2)
		go send(rt, "batch", *offer*float64(*rate)/n)
		go send(rt, "critical", *criticalRate/n)
	}
	wg.Wait()

	p.mu.Lock()
	defer p.mu.Unlock()
	span := time.Duration(0)
	if len(p.accepted) > 1 {
		span = p.accepted[len(p.accepted)-1].Sub(p.accepted[0])
	}
	fmt.Printf("%d instances, shaped at %d/s (max delay %v), provider limit %d/s\n", len(shapers), *rate, *maxDelay, *providerLimit)
	fmt.Printf("provider: %d accepted over %v (%.1f/s), %d refused\n", len(p.accepted), span.Round(time.Millisecond),
		float64(len(p.accepted)-1)/span.Seconds(), p.refused)
	for _, class := range []string{"critical", "batch"} {
		r := results[class]
		slices.Sort(r.waits)
		q := func(f float64) time.Duration {
			if len(r.waits) == 0 {
				return 0
			}
			return r.waits[min(len(r.waits)-1, int(f*float64(len(r.waits))))].Round(time.Millisecond)
		}
		fmt.Printf("%-8s: %d through (wait p50 %v, p99 %v, max %v), %d turned away by the shaper (threshold %v)\n",
			class, len(r.waits), q(0.5), q(0.99), q(1), r.shed.Load(), map[string]time.Duration{"critical": *maxDelay, "batch": *batchWithin}[class])
	}
}
