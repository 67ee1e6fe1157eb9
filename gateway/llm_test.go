package gateway_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/llmfake"
	"github.com/tollgate/tollgate/internal/redistest"
)

// The keys the SDKs send: their digests are the policy's keys, so the
// gateway charges them (and forwards them, as a provider's keys).
const (
	openaiKey    = "sk-tollgate-test"
	anthropicKey = "sk-ant-tollgate-test"
)

func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// llmPolicy has a token route per API in front of UPSTREAM, on plan
// free: requests and tokens, and for the Anthropic model input and
// output apart. The tokens budget's algorithm, rate, period and burst
// are the test's.
var llmPolicy = `version: llm1
identity: {secret: 0123456789abcdef0123456789abcdef}
headers: {llm: true}
plans:
  free:
    limits:
      - {name: rpm, algorithm: fixed_window, rate: 100000, period: 1h}
      - {name: tpm, algorithm: ALG, rate: TPM, period: TPERIOD, burst: TBURST, unit: tokens}
      - {name: in, algorithm: fixed_window, rate: 5000000, period: 1h, unit: input_tokens, models: [claude-sonnet-4-5]}
      - {name: out, algorithm: fixed_window, rate: 5000000, period: 1h, unit: output_tokens, models: [claude-sonnet-4-5]}
api_keys:
  - {id: openai, digest: "` + digest(openaiKey) + `", plan: free}
  - {id: anthropic, digest: "` + digest(anthropicKey) + `", plan: free}
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: UPSTREAM, tokens: {bytes_per_input_token: 1, default_output: 100}}
  - {name: messages, method: POST, path: /v1/messages, upstream: UPSTREAM, tokens: {bytes_per_input_token: 1, default_output: 100}}
`

const llmCapacity = 5_000_000

// budget is a tokens budget of llmPolicy.
type budget struct {
	alg         string
	rate, burst int64 // burst 0: rate
	period      string
}

// hourly is the tokens budget most tests use: more than they spend, in a
// window the still clock never leaves.
var hourly = budget{alg: "fixed_window", rate: llmCapacity, period: "1h"}

// llmGateway starts the fake upstream and a gateway in front of it on
// the store of redisURL ("": memory), its clock still unless live.
func llmGateway(t *testing.T, o llmfake.Options, redisURL string, tpm budget, live bool) (*llmfake.Fake, *running) {
	t.Helper()
	f := llmfake.New(o)
	up := httptest.NewServer(f)
	t.Cleanup(up.Close)
	src := strings.NewReplacer("ALG", tpm.alg, "TPM", strconv.FormatInt(tpm.rate, 10), "TPERIOD", tpm.period,
		"TBURST", strconv.FormatInt(cmp.Or(tpm.burst, tpm.rate), 10)).Replace(llmPolicy)
	p := fixture.Parse(t, src, up.URL)
	var g *running
	if live {
		g = start(t, p, redisURL)
	} else {
		g = startStill(t, p, redisURL)
	}
	return f, g
}

// sized is an SDK's transport that records the size of each request
// body it sends: the gateway's estimate of its input.
type sized struct {
	mu    sync.Mutex
	sizes []int64
}

func (s *sized) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		s.mu.Lock()
		s.sizes = append(s.sizes, int64(len(b)))
		s.mu.Unlock()
	}
	return client.Transport.RoundTrip(r)
}

func (s *sized) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, x := range s.sizes {
		n += x
	}
	return n
}

func openaiClient(g *running, tr http.RoundTripper, retries int, more ...ooption.RequestOption) openai.Client {
	return openai.NewClient(append([]ooption.RequestOption{ooption.WithBaseURL(g.public + "/v1/"), ooption.WithAPIKey(openaiKey),
		ooption.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}), ooption.WithMaxRetries(retries)}, more...)...)
}

// postChat posts body to g's chat route as the openai key's client.
func postChat(t *testing.T, g *running, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.public+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+openaiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// charged returns the tokens the gateway's store holds charged to the
// openai key's tokens budget: a probe of known estimate (its body's
// bytes, max_tokens 0) reads what remains.
func charged(t *testing.T, g *running) int64 {
	t.Helper()
	body := `{"model":"probe","max_tokens":0,"messages":[]}`
	resp := postChat(t, g, body)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	left, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the probe: %d, x-ratelimit-remaining-tokens %q", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"))
	}
	return llmCapacity - int64(len(body)) - left
}

// waitSettled waits until n token calls of route group have settled: a
// call settles once its response has reached the client, so the client
// may see the response first.
func waitSettled(t *testing.T, g *running, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := getBody(t, g.admin+"/metrics")
		var got float64
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "tollgate_llm_settles_total{") && strings.Contains(line, `route_group="`+group+`"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				got += v
			}
		}
		if int(got) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d calls of %s settled after 10 s", got, n, group)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reported sums the tokens the fake reported to requests answered whole,
// and counts the others.
func reported(f *llmfake.Fake) (tokens int64, cut int) {
	for _, r := range f.Records() {
		if r.Complete && r.Reported {
			tokens += r.Input + r.Output
		} else {
			cut++
		}
	}
	return tokens, cut
}

// TestLLMOpenAISDK: the OpenAI SDK's calls, streamed or not, through the
// gateway on each store: the tokens budget is charged exactly what the
// upstream reported, and the SDK reads the x-ratelimit headers.
func TestLLMOpenAISDK(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "" },
		"redis":  func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr + "/0" },
		"cluster": func(t *testing.T) string {
			cl := redistest.StartCluster(t, 3, 0)
			return "redis://" + cl.Addrs()[0] + "?addr=" + strings.Join(cl.Addrs()[1:], "&addr=")
		},
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			f, g := llmGateway(t, llmfake.Options{OutputTokens: 40}, url(t), hourly, false)
			c := openaiClient(g, client.Transport, 0)
			ctx := context.Background()
			for i, max := range []int64{100, 10, 0} {
				p := openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("hello ", 10*(i+1)))}}
				if max > 0 {
					p.MaxCompletionTokens = openai.Int(max)
				}
				var raw *http.Response
				resp, err := c.Chat.Completions.New(ctx, p, ooption.WithResponseInto(&raw))
				if err != nil {
					t.Fatal(err)
				}
				if raw.Header.Get("X-Ratelimit-Limit-Tokens") != strconv.Itoa(llmCapacity) || raw.Header.Get("X-Ratelimit-Remaining-Requests") == "" {
					t.Errorf("call %d: x-ratelimit headers %v", i, raw.Header)
				}
				if resp.Usage.TotalTokens == 0 {
					t.Errorf("call %d: no usage", i)
				}
				p.StreamOptions.IncludeUsage = openai.Bool(true)
				s := c.Chat.Completions.NewStreaming(ctx, p)
				for s.Next() {
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
			}
			waitSettled(t, g, "chat", 6)
			want, cut := reported(f)
			if got := charged(t, g); got != want || cut != 0 {
				t.Errorf("charged %d tokens, the upstream reported %d (%d calls cut short, want 0)", got, want, cut)
			}
		})
	}
}

// TestLLMConcurrentStreams: 64 streams at once through the gateway, a
// quarter of whose clients go away after the first chunk: the tokens
// budget is charged exactly what the upstream reported for the streams
// answered whole, plus each cut stream's estimate (its body's bytes and
// its max_completion_tokens), which is what a call keeps when its usage
// never reaches the gateway.
func TestLLMConcurrentStreams(t *testing.T) {
	t.Parallel() // its own gateway and Redis; its streams mostly wait
	const streams, max = 64, 200
	// A chunk a token, 20 ms apart: a whole stream (8 tokens) takes
	// 160 ms; one its client leaves asks for 200, seconds longer than
	// its cancel takes to reach the upstream on a loaded machine.
	f, g := llmGateway(t, llmfake.Options{OutputTokens: 8, Delay: 20 * time.Millisecond},
		"redis://"+redistest.Start(t).Addr+"/0", budget{alg: "token_bucket", rate: llmCapacity, period: "1h"}, false)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var estimates int64
	for i := range streams {
		wg.Go(func() {
			tr := &sized{}
			leave := i%4 == 0
			c := openaiClient(g, tr, 0)
			if leave {
				c = openaiClient(g, tr, 0, ooption.WithHeader(llmfake.HeaderOutputTokens, strconv.Itoa(max)))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxCompletionTokens: openai.Int(max),
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("x", 100+i))},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
			for s.Next() {
				if leave {
					cancel()
					break
				}
			}
			s.Close()
			if leave {
				mu.Lock()
				estimates += tr.total() + max
				mu.Unlock()
			} else if err := s.Err(); err != nil {
				t.Errorf("stream %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	waitSettled(t, g, "chat", streams) // the cut ones once the gateway sees them end
	want, cut := reported(f)
	if cut != streams/4 {
		t.Fatalf("%d streams cut short at the upstream, want %d", cut, streams/4)
	}
	if got := charged(t, g); got != want+estimates {
		t.Errorf("charged %d tokens; the upstream reported %d for the whole streams, and the cut ones' estimates are %d: want %d",
			got, want, estimates, want+estimates)
	}
}

// TestLLMRetryAfter: a call the tokens budget cannot take yet is refused
// with 429 and a Retry-After, and the OpenAI SDK's own retry, honouring
// it, gets through once the bucket has refilled.
func TestLLMRetryAfter(t *testing.T) {
	t.Parallel() // it waits for the refill
	// 600 tokens a second, a burst of 600: a call estimated at about
	// 550 (its body's bytes and max_completion_tokens 450) that uses
	// about 450 leaves too little for the next for most of a second.
	_, g := llmGateway(t, llmfake.Options{OutputTokens: 500}, "", budget{alg: "token_bucket", rate: 36000, burst: 600, period: "1m"}, true)
	var mu sync.Mutex
	var statuses []int
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := client.Transport.RoundTrip(r)
		if err == nil {
			mu.Lock()
			statuses = append(statuses, resp.StatusCode)
			mu.Unlock()
		}
		return resp, err
	})
	c := openaiClient(g, tr, 2)
	p := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxCompletionTokens: openai.Int(450),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	if _, err := c.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatalf("the SDK's retry did not get through: %v (statuses %v)", err, statuses)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(statuses) < 3 || statuses[1] != http.StatusTooManyRequests || statuses[len(statuses)-1] != http.StatusOK {
		t.Errorf("statuses %v, want 200, then 429 and a retry that passed", statuses)
	}
	t.Logf("the retry passed %v after the refusal", time.Since(start).Round(time.Millisecond))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestLLMAnthropicSDK: the Anthropic SDK's messages, streamed or not:
// the input and output budgets are each charged what the upstream
// reported of theirs, cache reads counting as input.
func TestLLMAnthropicSDK(t *testing.T) {
	f, g := llmGateway(t, llmfake.Options{OutputTokens: 30}, "redis://"+srv.Addr+"/0", hourly, false)
	c := anthropic.NewClient(aoption.WithBaseURL(g.public), aoption.WithAPIKey(anthropicKey),
		aoption.WithHTTPClient(client), aoption.WithMaxRetries(0), aoption.WithHeader(llmfake.HeaderCacheReadTokens, "7"))
	ctx := context.Background()
	for i := range 3 {
		p := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: int64(20 + 20*i),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("bonjour ", i+1)))}}
		if _, err := c.Messages.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		s := c.Messages.NewStreaming(ctx, p)
		var msg anthropic.Message
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitSettled(t, g, "messages", 6)
	var in, out int64
	for _, r := range f.Records() {
		in, out = in+r.Input, out+r.Output
	}
	settled := func(budget string) int64 {
		return int64(metric(t, g, fmt.Sprintf(`tollgate_llm_tokens_total{budget=%q,kind="settled",plan="free",route_group="messages"}`, budget)))
	}
	if got := settled("free.in"); got != in {
		t.Errorf("input budget settled at %d, the upstream reported %d", got, in)
	}
	if got := settled("free.out"); got != out {
		t.Errorf("output budget settled at %d, the upstream reported %d", got, out)
	}
	if got := settled("free.tpm"); got != in+out {
		t.Errorf("tokens budget settled at %d, the upstream reported %d", got, in+out)
	}
}

// TestLLMStoreCalls: a token call that settles costs Redis two script
// calls, its decision and its settle: one more than a call charged
// up front.
func TestLLMStoreCalls(t *testing.T) {
	t.Parallel() // a Redis of its own, whose calls it counts
	rs := redistest.Start(t)
	_, g := llmGateway(t, llmfake.Options{OutputTokens: 1000}, "redis://"+rs.Addr+"/0", hourly, false)
	c := rs.NewClient(t)
	// The body's bytes overstate its input: each call has a refund to settle.
	body := `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`
	const n = 20
	before := redistest.Calls(t, c, "evalsha", "eval", "fcall")
	for range n {
		resp := postChat(t, g, body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d", resp.StatusCode)
		}
	}
	waitSettled(t, g, "chat", n)
	if got := redistest.Calls(t, c, "evalsha", "eval", "fcall") - before; got != 2*n {
		t.Errorf("%d script calls for %d token calls, want %d: a decision and a settle each", got, n, 2*n)
	}
}

// TestLLMStreamHoldsItsSlot: a token route's concurrency slot is held
// until its stream ends, not until its headers are sent: a second call
// meanwhile is refused, and one after it passes.
func TestLLMStreamHoldsItsSlot(t *testing.T) {
	t.Parallel() // its stream mostly waits
	f := llmfake.New(llmfake.Options{OutputTokens: 10, Chunks: 10, Delay: 30 * time.Millisecond})
	up := httptest.NewServer(f)
	t.Cleanup(up.Close)
	src := strings.NewReplacer("ALG", "fixed_window", "TPM", strconv.Itoa(llmCapacity), "TPERIOD", "1h", "TBURST", strconv.Itoa(llmCapacity),
		"tokens: {bytes_per_input_token: 1, default_output: 100}}", "tokens: {bytes_per_input_token: 1, default_output: 100}, concurrency: {limit: 1}}").Replace(llmPolicy)
	g := startStill(t, fixture.Parse(t, src, up.URL), "")
	call := func(stream bool) *http.Response {
		body := fmt.Sprintf(`{"model":"m","max_tokens":10,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
		return postChat(t, g, body)
	}
	first := call(true)
	if first.StatusCode != http.StatusOK {
		t.Fatalf("the stream: %d", first.StatusCode)
	}
	// Its headers are here, its body still streaming (10 × 30 ms).
	second := call(false)
	io.Copy(io.Discard, second.Body)
	second.Body.Close()
	if second.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a call while the stream runs: %d, want 429 (the slot is the stream's)", second.StatusCode)
	}
	io.Copy(io.Discard, first.Body)
	first.Body.Close()
	waitSettled(t, g, "chat", 1)
	third := call(false)
	io.Copy(io.Discard, third.Body)
	third.Body.Close()
	if third.StatusCode != http.StatusOK {
		t.Errorf("a call after the stream ended: %d, want 200", third.StatusCode)
	}
}
