package policy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// bypassPolicy charges the whole hourly budget (10) for /api/export and
// /api/report, and 1 for anything else under /api/. The store deadline is
// long so that a loaded test machine does not fail open to local limits.
const bypassPolicy = `version: VERSION
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
store: {timeout: 5s}
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free: {algorithm: fixed_window, rate: 10, period: 1h}
routes:
  - {name: export, path: /api/export, upstream: UP, cost: 10}
  - {name: api, path: /api/, upstream: UP}
  - {name: report, path: /api/report, upstream: UP, cost: 10}
  - {name: reports, path: /api/report/, upstream: UP}
`

var bypassSeq atomic.Int64

// TestExpensiveRouteBypass drives a real gateway (memory store and Redis)
// in front of a real upstream. A client asked for the expensive exact
// routes in the forms an upstream commonly serves alike: /api/export/
// (trailing slash) fell to the cheap /api/ prefix, and the exact
// /api/report could match nothing beside the prefix /api/report/. Each
// request then cost 1 instead of 10, so three reached the upstream where
// the budget allows one.
func TestExpensiveRouteBypass(t *testing.T) {
	rdb := redistest.Start(t)
	for _, store := range []string{"memory", "redis"} {
		for _, target := range []string{"/api/export/", "/api/report", "/api/export"} {
			t.Run(store+" "+target, func(t *testing.T) {
				var hits atomic.Int64
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
				defer up.Close()
				src := strings.ReplaceAll(bypassPolicy, "UP", up.URL)
				src = strings.Replace(src, "VERSION", fmt.Sprintf("bypass-%d", bypassSeq.Add(1)), 1)
				p, err := policy.Parse([]byte(src), "bypass.yaml")
				if err != nil {
					t.Fatal(err)
				}
				redisURL := ""
				if store == "redis" {
					redisURL = "redis://" + rdb.Addr + "/0"
				}
				base := serveGateway(t, p, redisURL)
				codes := make([]int, 3)
				for i := range codes {
					resp, err := http.Get(base + target)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					codes[i] = resp.StatusCode
				}
				if n := hits.Load(); n != 1 || codes[0] != 200 || codes[1] != 429 || codes[2] != 429 {
					t.Fatalf("GET %s ×3: statuses %v, %d reached the upstream; want 200 429 429 and 1 (each costs the whole budget)", target, codes, n)
				}
			})
		}
	}
}

// serveGateway runs a gateway for p on loopback until the test ends and
// returns its public base URL once it is ready and its store answers (a
// gateway whose store is not yet up is "degraded" and decides locally).
func serveGateway(t *testing.T, p *policy.Policy, redisURL string) string {
	t.Helper()
	g, err := gateway.New(gateway.Options{Policy: p, RedisURL: redisURL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, pub, adm) }()
	t.Cleanup(func() {
		cancel()
		<-done
		g.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + adm.Addr().String() + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"status":"ready"`) {
				return "http://" + pub.Addr().String()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
