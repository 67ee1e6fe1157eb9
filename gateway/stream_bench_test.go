package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/llmfake"
	"github.com/tollgate/tollgate/policy"
)

// BenchmarkStream measures whole chat-completion streams (64 chunks and
// a usage event) over loopback TCP through a plain httputil.ReverseProxy
// and through the gateway on the memory store, charging requests alone
// and settling tokens, as the bench's LLM suite does.
func BenchmarkStream(b *testing.B) {
	up := httptest.NewServer(llmfake.New(llmfake.Options{OutputTokens: 64}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024},
	})
	defer plain.Close()
	gw := func(tokens string) string {
		p, err := policy.Parse([]byte(`version: bench
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: open}
plans:
  open:
    limits:
      - {name: rpm, rate: 100000000, period: 1m}
      - {name: tpm, rate: 10000000000, period: 1m, unit: tokens}
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: "`+up.URL+`"`+tokens+`}
`), "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		g, err := gateway.New(gateway.Options{Policy: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(g.Close)
		s := httptest.NewServer(g.Handler())
		b.Cleanup(s.Close)
		return s.URL
	}
	body := `{"model":"bench","max_tokens":64,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Write about rate limits."}]}`
	for _, c := range []struct{ name, url string }{{"plain", plain.URL}, {"requests", gw("")}, {"tokens", gw(", tokens: {}")}} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}}
			b.ReportAllocs()
			b.SetParallelism(16)
			cpu0 := processCPU()
			defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
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

// processCPU is the CPU time this process has used, in nanoseconds: a
// cost per stream that the machine's other load moves less than the time
// a stream takes.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkServeChat measures what the gateway adds to a chat request
// before and after its upstream: a POST with a JSON body to the
// in-process builtin:echo, charging requests alone and settling tokens.
func BenchmarkServeChat(b *testing.B) {
	body := `{"model":"bench","max_tokens":64,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Write about rate limits."}]}`
	for _, c := range []struct{ name, tokens string }{{"requests", ""}, {"tokens", ", tokens: {}"}} {
		p, err := policy.Parse([]byte(`version: bench
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: open}
plans:
  open:
    limits:
      - {name: rpm, rate: 100000000, period: 1m}
      - {name: tpm, rate: 10000000000, period: 1m, unit: tokens}
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: "builtin:echo"`+c.tokens+`}
`), "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		g, err := gateway.New(gateway.Options{Policy: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(g.Close)
		h := g.Handler()
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					r.RemoteAddr = "192.0.2.7:40000"
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
