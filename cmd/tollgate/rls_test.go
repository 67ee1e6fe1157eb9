package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/xdstest"
)

// rlsEnv makes this test binary run `tollgate rls` instead of its tests.
const rlsEnv = "TOLLGATE_TEST_RLS"

func init() {
	if os.Getenv(rlsEnv) != "" {
		os.Exit(run([]string{"rls"}, os.Stdin, os.Stdout, os.Stderr))
	}
}

func freeAddr(t *testing.T) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return ln.Addr().String(), port
}

// TestRLSCommand runs `tollgate rls` as envoyproxy/ratelimit is run: a
// RUNTIME_ROOT directory and Redis by REDIS_SOCKET_TYPE/REDIS_URL; it
// answers ShouldRateLimit, /healthcheck and /metrics, and stops on
// SIGTERM. Its store deadline (TOLLGATE_STORE_TIMEOUT) is the generous
// one: the counts it checks are Redis', and a call past the default
// 20 ms would be decided by the local fallback instead.
func TestRLSCommand(t *testing.T) {
	srv := redistest.Start(t)
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "a.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, grpcPort := freeAddr(t)
	httpAddr, httpPort := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rlsEnv+"=1", "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort, "HOST=127.0.0.1", "PORT="+httpPort,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr, "LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"TOLLGATE_STORE_TIMEOUT="+testenv.StoreTimeout.String())
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/healthcheck")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthcheck: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	var codes []string
	for i := 0; i < 3; i++ {
		resp, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v\n%s", err, logs.String())
		}
		codes = append(codes, resp.OverallCode.String()+"/"+strconv.Itoa(int(resp.Statuses[0].LimitRemaining))+"/"+strconv.Itoa(len(resp.ResponseHeadersToAdd)))
	}
	if got := strings.Join(codes, " "); got != "OK/1/3 OK/0/3 OVER_LIMIT/0/3" {
		t.Fatalf("codes %s", got)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `ratelimit_service_rate_limit_over_limit{descriptor="k",domain="d",key1="k",key2=""} 1`) {
		t.Fatalf("metrics lack over_limit:\n%s", body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
}

// TestRLSCommandXDS runs `tollgate rls` as Envoy Gateway runs
// envoyproxy/ratelimit: CONFIG_TYPE=GRPC_XDS_SOTW, its configuration
// from a control plane (go-control-plane's, in this process). It serves
// once the first snapshot arrives, then each update, and its metrics
// name the version served.
func TestRLSCommandXDS(t *testing.T) {
	cp := xdstest.Start(t, "127.0.0.1:0", "envoy-ratelimit")
	limit := func(n uint32) *rlsconfpb.RateLimitConfig {
		return &rlsconfpb.RateLimitConfig{Name: "default/eg/http", Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}
	}
	grpcAddr, grpcPort := freeAddr(t)
	httpAddr, httpPort := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rlsEnv+"=1", "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+cp.Addr,
		"CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=50ms", "BACKEND_TYPE=memory",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort, "HOST=127.0.0.1", "PORT="+httpPort)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !cp.Await(10*time.Second, func(reqs []xdstest.Request) bool { return len(reqs) > 0 }) {
		t.Fatalf("rls never asked the control plane\n%s", logs.String())
	}
	if _, err := http.Get("http://" + httpAddr + "/healthcheck"); err == nil {
		t.Fatalf("rls serves before the control plane sent a configuration\n%s", logs.String())
	}
	cp.Set(t, "1", limit(2))
	awaitHealthy(t, httpAddr, &logs)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	ask := func() *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v\n%s", err, logs.String())
		}
		return resp
	}
	var codes []string
	for range 3 {
		codes = append(codes, ask().OverallCode.String())
	}
	if got := strings.Join(codes, " "); got != "OK OK OVER_LIMIT" {
		t.Fatalf("under version 1: %s", got)
	}
	cp.Set(t, "2", limit(3))
	deadline := time.Now().Add(10 * time.Second)
	for ask().OverallCode != rlspb.RateLimitResponse_OK {
		if time.Now().After(deadline) {
			t.Fatalf("version 2 (a limit of 3) never served\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	body := get(t, "http://"+httpAddr+"/metrics")
	for _, want := range []string{`tollgate_rls_xds_config_info{version="2"} 1`, `ratelimit_service_config_load_total{result="success"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
}

// awaitHealthy waits until /healthcheck at addr answers 200.
func awaitHealthy(t *testing.T, addr string, logs *strings.Builder) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthcheck: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get is the body at url.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
