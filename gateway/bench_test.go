package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/policy"
)

// benchGateway returns a gateway on the memory store that sends every
// request to upstream, with a plan no benchmark exhausts.
func benchGateway(b *testing.B, upstream string, extra ...string) *gateway.Gateway {
	p, err := policy.Parse([]byte(strings.Join(extra, "\n")+`
version: bench
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: open}
plans:
  open: {rate: 1000000000, period: 1s}
routes:
  - {name: all, path: /, upstream: "`+upstream+`"}
`), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Policy: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	return g
}

// BenchmarkServe measures what the gateway adds to a request: the same
// in-process upstream (builtin:echo) served bare and behind the gateway on
// the memory store, one anonymous client under a generous plan.
func BenchmarkServe(b *testing.B) {
	g := benchGateway(b, "builtin:echo")
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"echo", gateway.Echo()}, {"gateway", g.Handler()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodGet, "/bench", nil)
					r.RemoteAddr = "192.0.2.7:40000"
					w := httptest.NewRecorder()
					c.h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d", w.Code)
					}
				}
			})
		})
	}
}

// BenchmarkServeTraced is BenchmarkServe's gateway with tracing on, every
// trace recorded (1) or none (0), sent to a collector that takes them in
// and throws them away.
func BenchmarkServeTraced(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	for _, sample := range []string{"1", "0"} {
		b.Run("sample="+sample, func(b *testing.B) {
			g := benchGateway(b, "builtin:echo", `tracing: {endpoint: "`+collector.URL+`", sample: `+sample+`}`)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodGet, "/bench", nil)
					r.RemoteAddr = "192.0.2.7:40000"
					w := httptest.NewRecorder()
					g.Handler().ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d", w.Code)
					}
				}
			})
		})
	}
}

// BenchmarkProxy measures whole requests over loopback TCP, client to
// upstream, through a plain httputil.ReverseProxy and through the gateway
// on the memory store, with the same transport settings.
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024},
	})
	defer plain.Close()
	g := benchGateway(b, up.URL)
	gw := httptest.NewServer(g.Handler())
	defer gw.Close()
	for _, c := range []struct{ name, url string }{{"plain", plain.URL}, {"gateway", gw.URL}} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}}
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(c.url + "/bench")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
