// Command client shows the client side of rate limiting: requests sent
// through client.Transport, which waits for Retry-After (with jittered
// backoff) and paces itself by the RateLimit fields instead of being
// refused. Against the quickstart gateway:
//
//	go run ./cmd/tollgate serve --config examples/quickstart.yaml &
//	go run ./examples/client -n 120 -rps 5
//
// It sends -n requests at -rps a second with the free plan's key (100 a
// minute) and counts what the server answered on the wire and what the
// caller saw. With -plain it sends through http.DefaultTransport instead,
// for comparison. With -grpc it shows the gRPC side instead, on its own:
// a gRPC server behind package grpclimit's interceptors and clients that
// back off as its refusals ask (see grpc.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/client"
)

// wire counts the statuses the server answered, attempt by attempt.
type wire struct {
	base       http.RoundTripper
	sent, r429 atomic.Int64
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	w.sent.Add(1)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		w.r429.Add(1)
	}
	return resp, err
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/api/hello", "URL to send to")
	key := flag.String("key", "free-demo-key", "API key (X-API-Key)")
	n := flag.Int("n", 120, "requests")
	rps := flag.Float64("rps", 5, "requests sent a second")
	timeout := flag.Duration("timeout", 2*time.Minute, "each request's deadline")
	failFast := flag.Bool("fail-fast", false, "fail at once, with client.ErrPaced, instead of waiting for the server's reset")
	plain := flag.Bool("plain", false, "send through http.DefaultTransport, without the client package")
	grpcMode := flag.Bool("grpc", false, "show the gRPC interceptors instead (needs no gateway)")
	flag.Parse()
	if *grpcMode {
		grpcDemo()
		return
	}

	w := &wire{base: http.DefaultTransport}
	var rt http.RoundTripper = &client.Transport{Base: w, Options: client.Options{FailFast: *failFast}}
	if *plain {
		rt = w
	}
	hc := &http.Client{Transport: rt}

	var ok, refused, failed atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / *rps))
	defer tick.Stop()
	start := time.Now()
	for range *n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
			if err != nil {
				log.Fatal(err)
			}
			req.Header.Set("X-API-Key", *key)
			resp, err := hc.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			} else {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%d requests in %v: %d succeeded, %d refused, %d failed; on the wire %d attempts, %d answered 429\n",
		*n, time.Since(start).Round(time.Millisecond), ok.Load(), refused.Load(), failed.Load(), w.sent.Load(), w.r429.Load())
}
