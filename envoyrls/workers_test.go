package envoyrls_test

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/store/memory"
)

// TestServerOptionsReuseGoroutines checks that ShouldRateLimit, served
// with ServerOptions, runs on goroutines that served earlier calls
// (whose stacks have grown already), where gRPC's default starts one per
// call.
func TestServerOptionsReuseGoroutines(t *testing.T) {
	const calls = 1000 // more than ServerOptions' workers
	for _, c := range []struct {
		name   string
		opts   []grpc.ServerOption
		reused bool
		why    string
	}{
		{"ServerOptions", envoyrls.ServerOptions(), true, "a pool of workers serves the calls"},
		{"gRPC's default", nil, false, "gRPC starts a goroutine per stream: the waste ServerOptions removes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			goroutines := map[string]bool{}
			record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				goroutines[goroutineID()] = true // the calls come one at a time
				return h(ctx, req)
			}
			client := serveWith(t, append(c.opts, grpc.UnaryInterceptor(record)))
			req := &rlspb.RateLimitRequest{Domain: "another", Descriptors: []*rlv3.RateLimitDescriptor{desc("free", "v")}}
			for range calls {
				if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			if reused := len(goroutines) < calls; reused != c.reused {
				t.Errorf("%d calls ran on %d goroutines: want reused %v (%s)", calls, len(goroutines), c.reused, c.why)
			}
		})
	}
}

// serveWith serves the rate-limit service for envoyConfig on the memory
// store with a gRPC server built with opts, and returns a client of it.
func serveWith(t *testing.T, opts []grpc.ServerOption) rlspb.RateLimitServiceClient {
	t.Helper()
	dir := t.TempDir()
	writeConfig(t, dir, envoyConfig)
	cfg, err := envoyrls.Load(dir, envoyrls.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	eng, err := engine.New(engine.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.New(cfg, envoyrls.Options{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// goroutineID returns the running goroutine's ID, as its stack trace's
// first line ("goroutine 42 [running]:") spells it.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}
