package main

// grpcDemo shows Tollgate in front of a gRPC service: a server whose
// interceptors limit grpc.health.v1.Health/Check to 2 calls per second per
// client, and three clients calling it 6 times in a burst: one retrying
// with grpc-go's own retry policy (which waits the grpc-retry-pushback-ms
// the refusals carry), one with grpclimit.UnaryClientInterceptor, and one
// with neither, which is refused.
//
//	go run ./examples/client -grpc

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/grpclimit"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

// A route's path is a gRPC full method name, or a service's prefix.
const grpcPolicy = `version: grpc-example
identity: {anonymous_plan: free}
plans:
  free: {algorithm: fixed_window, rate: 100, period: 1m}
routes:
  - {name: health, path: /grpc.health.v1.Health/Check, limit: {algorithm: fixed_window, rate: 2, period: 1s}}
`

const retryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "retryPolicy": {
  "maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
  "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]}`

func grpcDemo() {
	p, err := policy.Parse([]byte(grpcPolicy), "example.yaml")
	if err != nil {
		log.Fatal(err)
	}
	store := memory.New(memory.Options{})
	defer store.Close()
	l, err := grpclimit.New(grpclimit.Options{Policy: p, Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary()), grpc.ChainStreamInterceptor(l.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()

	clients := []struct {
		name string
		opt  grpc.DialOption
	}{
		{"grpc-go retry policy", grpc.WithDefaultServiceConfig(retryPolicy)},
		{"grpclimit.UnaryClientInterceptor", grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.RetryOptions{}))},
		{"no retries", grpc.EmptyDialOption{}},
	}
	for _, c := range clients {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), c.opt)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s:\n", c.name)
		client := healthpb.NewHealthClient(cc)
		begin := time.Now()
		for i := range 6 {
			var header, trailer metadata.MD
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
			if err != nil {
				d, _ := grpclimit.RetryDelay(err, trailer)
				fmt.Printf("  call %d at %4dms: %v (retry in %v; %s)\n", i, time.Since(begin).Milliseconds(), err, d, trailer.Get("ratelimit"))
				continue
			}
			fmt.Printf("  call %d at %4dms: ok %s\n", i, time.Since(begin).Milliseconds(), header.Get("ratelimit"))
		}
		cc.Close()
		time.Sleep(time.Second) // a fresh window for the next client
	}
}
