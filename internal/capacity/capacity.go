// Package capacity is an upstream of fixed capacity and an open-loop
// load to offer it, which the overload tests (package gateway) and the
// bench (tollgate-bench -suites overload) share: the server serves
// Workers requests at once, each for Service, and queues the rest in
// order, so it serves at most Workers/Service requests a second and its
// latency grows with the queue past that. Like a busy service's accept
// queue, it serves what it queued even when the client has gone: work
// queued is work done.
package capacity

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the upstream of fixed capacity.
type Server struct {
	service time.Duration
	mu      sync.Mutex
	workers int
	busy    int
	queue   []chan bool // true: served; false: stopped
	stopped bool
	served  atomic.Int64
}

// New returns a server of workers workers, each request served for
// service.
func New(workers int, service time.Duration) *Server {
	return &Server{workers: workers, service: service}
}

// Capacity is the most requests a second it serves now.
func (s *Server) Capacity() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.workers) / s.service.Seconds()
}

// SetWorkers changes how many requests are served at once: fewer take
// effect as requests end, more at once.
func (s *Server) SetWorkers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers = n
	for s.busy < s.workers && len(s.queue) > 0 {
		s.busy++
		s.pop() <- true
	}
}

// Stop answers every request queued, and every later one, with 503 at
// once: the end of a run need not wait for a queue to drain.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for len(s.queue) > 0 {
		s.pop() <- false
	}
}

// Served counts the requests served.
func (s *Server) Served() int64 { return s.served.Load() }

func (s *Server) pop() chan bool {
	ch := s.queue[0]
	s.queue = s.queue[1:]
	return ch
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	ok := true
	if s.busy < s.workers {
		s.busy++
		s.mu.Unlock()
	} else {
		ch := make(chan bool, 1)
		s.queue = append(s.queue, ch)
		s.mu.Unlock()
		ok = <-ch
	}
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	time.Sleep(s.service) // the work: the property the server has
	s.served.Add(1)
	s.mu.Lock()
	if s.busy <= s.workers && len(s.queue) > 0 {
		s.pop() <- true // the worker goes on to the next in line
	} else {
		s.busy--
	}
	s.mu.Unlock()
	w.Write([]byte("done\n"))
}

// Shot is one request of an offered load.
type Shot struct {
	Plan    string
	At      time.Duration // when it was sent, from the load's start
	Latency time.Duration
	Status  int // 0: it failed (Err)
	Err     error
}

// Offer sends rate requests a second to url for d, open loop: each on
// its own goroutine at its time, whatever the earlier ones are waiting
// for, so a slow answer does not slow the load. plan(i) names the i-th
// request's plan and returns its headers. It returns every request, in
// the order sent, once all have ended.
func Offer(ctx context.Context, c *http.Client, url string, rate float64, d time.Duration, plan func(i int) (string, http.Header)) []Shot {
	n := int(rate * d.Seconds())
	shots := make([]Shot, n)
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < n; {
		due := min(n, int(time.Since(start).Seconds()*rate)+1)
		for ; sent < due; sent++ {
			name, h := plan(sent)
			shots[sent] = Shot{Plan: name, At: time.Since(start)}
			wg.Add(1)
			go func(s *Shot) {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				req.Header = h
				t0 := time.Now()
				resp, err := c.Do(req)
				s.Latency = time.Since(t0)
				if err != nil {
					s.Err = err
					return
				}
				resp.Body.Close()
				s.Status = resp.StatusCode
			}(&shots[sent])
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			n = sent
		}
	}
	wg.Wait()
	return shots[:n]
}

// Summary is what a load came to over a span of it.
type Summary struct {
	Seconds float64
	Sent    int
	OK      int // 2xx
	Shed    int // 503 refused by the gateway
	Errors  int // failed, or another status
	// P50 and P99 are of the requests answered 2xx.
	P50, P99 time.Duration
	// OKByPlan counts the 2xx per plan.
	OKByPlan map[string]int
}

// Goodput is the 2xx a second.
func (s Summary) Goodput() float64 { return float64(s.OK) / s.Seconds }

// Share is plan's part of the 2xx.
func (s Summary) Share(plan string) float64 {
	if s.OK == 0 {
		return 0
	}
	return float64(s.OKByPlan[plan]) / float64(s.OK)
}

// Summarize sums up the shots sent from from to to.
func Summarize(shots []Shot, from, to time.Duration) Summary {
	s := Summary{Seconds: (to - from).Seconds(), OKByPlan: map[string]int{}}
	var lat []time.Duration
	for _, x := range shots {
		if x.At < from || x.At >= to {
			continue
		}
		s.Sent++
		switch {
		case x.Status >= 200 && x.Status < 300:
			s.OK++
			s.OKByPlan[x.Plan]++
			lat = append(lat, x.Latency)
		case x.Status == http.StatusServiceUnavailable:
			s.Shed++
		default:
			s.Errors++
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.P50, s.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return s
}
