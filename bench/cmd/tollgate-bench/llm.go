package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/llmfake"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// llmRow is one cell of the streaming table: one target, streams in
// flight at once, closed loop.
type llmRow struct {
	target   string
	prompt   string  // the request's size: llmPrompts' name
	streams  float64 // whole streams per second
	lat      summary // of a whole stream
	errors   int
	firstErr string
}

// llmPolicy charges each stream an estimate and settles it at its usage:
// requests and tokens budgets that never refuse.
const llmPolicy = `version: bench
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: open}
plans:
  open:
    limits:
      - {name: rpm, rate: 100000000, period: 1m}
      - {name: tpm, rate: 10000000000, period: 1m, unit: tokens}
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: "UPSTREAM", tokens: {}}
`

// llmInFlight is the streams each cell keeps in flight.
const llmInFlight = 64

// llmBody is a stream's request of the prompt given: 64 tokens,
// streamed, with usage.
func llmBody(prompt string) string {
	return `{"model":"bench","max_tokens":64,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + prompt + `"}]}`
}

// llmPrompts are the prompts each target is loaded with: one line, and
// 16 KiB (a conversation of some length, which the gateway reads for
// credentials and for its estimate before it sends it on).
var llmPrompts = []struct{ name, text string }{
	{"short", "Write about rate limits."},
	{"16 KiB", strings.Repeat(`Tell me more about rate limits, \"quoted\" and all. `, 16<<10/52)},
}

// runLLMSuite streams the same chat completions (64 chunks each, from an
// OpenAI-compatible upstream) through the plain proxy and through the
// gateway on each store, settling each stream's tokens, side by side.
func runLLMSuite(srv *redistest.Server, dur time.Duration) []llmRow {
	up := serve(llmfake.New(llmfake.Options{OutputTokens: 64}))
	u, _ := url.Parse(up)
	plain := serve(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, ErrorLog: log.New(io.Discard, "", 0)})
	targets := []target{{"plain httputil.ReverseProxy", plain}}
	for _, name := range []string{"memory store, requests only", "memory store", "redis store"} {
		store, _, _ := strings.Cut(name, " ")
		src := strings.ReplaceAll(llmPolicy, "UPSTREAM", up)
		if strings.HasSuffix(name, "only") {
			src = strings.ReplaceAll(src, ", tokens: {}", "") // the same gateway, charging requests alone
		}
		p, err := policy.Parse([]byte(src), "bench.yaml")
		if err != nil {
			fatal(err)
		}
		redisURL := ""
		if store == "redis" {
			redisURL = "redis://" + srv.Addr + "/0"
		}
		g, err := gateway.New(gateway.Options{Policy: p, RedisURL: redisURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			fatal(err)
		}
		pub, adm := listen(), listen()
		go g.Serve(context.Background(), pub, adm)
		targets = append(targets, target{"tollgate (" + name + ")", "http://" + pub.Addr().String()})
	}
	time.Sleep(500 * time.Millisecond) // let the Redis store connect
	var rows []llmRow
	for _, pr := range llmPrompts {
		body := llmBody(pr.text)
		runs := make([][]llmRow, len(targets))
		for rep := range repeats {
			// Each run starts at another target, so that no target is
			// always measured first (or last) in a round.
			for j := range targets {
				i := (j + rep) % len(targets)
				t := targets[i]
				row := streamLoad(t.name, t.url+"/v1/chat/completions", body, dur)
				row.prompt = pr.name
				fmt.Fprintf(os.Stderr, "llm: %-40s %-6s prompt %7.0f streams/s p50 %s p99 %s ms, %d errors %s\n",
					row.target, pr.name, row.streams, ms(row.lat.p50), ms(row.lat.p99), row.errors, row.firstErr)
				runs[i] = append(runs[i], row)
			}
		}
		for _, rs := range runs {
			row := rs[0]
			row.streams = median(rs, func(r llmRow) float64 { return r.streams })
			row.lat = medianLatency(rs, func(r llmRow) summary { return r.lat })
			for _, r := range rs[1:] {
				row.errors += r.errors
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// streamLoad keeps llmInFlight streams to u in flight for dur, each read
// to its end, and counts the whole ones.
func streamLoad(name, u, body string, dur time.Duration) llmRow {
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var lats latencies
	var mu sync.Mutex
	var ok, errs atomic.Int64
	row := llmRow{target: name}
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for range llmInFlight {
		wg.Go(func() {
			part := lats.part(1024)
			for time.Now().Before(stop) {
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					if errs.Add(1) == 1 {
						mu.Lock()
						row.firstErr = err.Error()
						mu.Unlock()
					}
					continue
				}
				ok.Add(1)
				part = append(part, time.Since(t0))
			}
			mu.Lock()
			lats.add(part)
			mu.Unlock()
		})
	}
	wg.Wait()
	row.streams = float64(ok.Load()) / time.Since(start).Seconds()
	row.errors = int(errs.Load())
	row.lat = lats.summary()
	time.Sleep(time.Second) // let the servers drop the cell's connections
	return row
}

// llmMarkdown writes the streaming table: each target's whole streams per
// second, as a share of the plain proxy's in the same run.
func (r *report) llmMarkdown(w func(string, ...any)) {
	w("## 6. Streaming LLM calls, settled by the token\n\n")
	w("%d chat-completion streams in flight, each 64 chunks and a usage event from an OpenAI-compatible upstream in this process, read to the end, closed loop. Through the gateway each stream reserves its estimate and settles at its usage (one more store call); \"requests only\" is the same gateway with the route charging requests alone, which isolates what settling costs.\n\n", llmInFlight)
	w("| target | prompt | streams/s | of the plain proxy | p50 ms | p99 ms | errors |\n|---|---|---:|---:|---:|---:|---:|\n")
	base := map[string]float64{} // the plain proxy's, by prompt
	for _, row := range r.llm {
		if strings.HasPrefix(row.target, "plain") {
			base[row.prompt] = row.streams
		}
	}
	for _, row := range r.llm {
		share := "-"
		if b := base[row.prompt]; b > 0 {
			share = fmt.Sprintf("%.0f%%", 100*row.streams/b)
		}
		w("| %s | %s | %.0f | %s | %s | %s | %d |\n", row.target, row.prompt, row.streams, share, ms(row.lat.p50), ms(row.lat.p99), row.errors)
	}
	w("\nThe target is the gateway with settlement within 5%% of the plain proxy's streams per second.\n\n")
}
