package envoyrls_test

import (
	"context"
	"net"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/internal/decidetest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestDecideRLS runs the engine's RLS table (package internal/decidetest)
// on the rate-limit service, over the memory store and a real Redis,
// called in process and over gRPC: the same answers every way.
func TestDecideRLS(t *testing.T) {
	srv := redistest.Start(t)
	stores := decidetest.Stores(srv)
	fronts := map[string]func(t *testing.T, s *envoyrls.Server) func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse{
		"in process": inProcess,
		"grpc":       overGRPC,
	}
	for storeName, newStore := range stores {
		for frontName, front := range fronts {
			t.Run(storeName+"/"+frontName, func(t *testing.T) {
				decidetest.RunRLS(t, decidetest.RLSCases, newStore, func(t *testing.T, cfg *envoyrls.Config, st tollgate.Store) func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
					e, err := engine.New(engine.Options{Store: st, Now: decidetest.Clock})
					if err != nil {
						t.Fatal(err)
					}
					s, err := envoyrls.New(cfg, envoyrls.Options{Engine: e, Now: decidetest.Clock})
					if err != nil {
						t.Fatal(err)
					}
					return front(t, s)
				})
			})
		}
	}
}

// inProcess calls s's ShouldRateLimit directly.
func inProcess(t *testing.T, s *envoyrls.Server) func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	return func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// overGRPC serves s on a loopback listener and calls it with a gRPC
// client, as Envoy does.
func overGRPC(t *testing.T, s *envoyrls.Server) func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlspb.NewRateLimitServiceClient(conn)
	return func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}
