package envoyrls_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/store/memory"
)

// BenchmarkShouldRateLimit: one request of two descriptors, admitted on
// the memory store (the clock moves an hour a call, so every window is
// fresh): what the server itself costs a call.
func BenchmarkShouldRateLimit(b *testing.B) {
	dir := b.TempDir()
	writeConfig(b, dir, envoyConfig)
	cfg, err := envoyrls.Load(dir, envoyrls.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	now := base.Add(10 * time.Second)
	clock := func() time.Time { return now }
	st := memory.New(memory.Options{Now: clock})
	defer st.Close()
	eng, err := engine.New(engine.Options{Store: st, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := envoyrls.New(cfg, envoyrls.Options{Engine: eng, Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlspb.RateLimitRequest{Domain: "another", HitsAddend: 1}
	req.Descriptors = append(req.Descriptors, desc("key2", "a"), desc("key3", "b"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Hour)
		resp, err := srv.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
	}
}
