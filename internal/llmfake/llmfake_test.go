package llmfake_test

import (
	"bufio"
	"context"
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
	"github.com/openai/openai-go/v3/responses"

	"github.com/tollgate/tollgate/internal/llmfake"
	"github.com/tollgate/tollgate/llm"
)

// metered is an http.Client transport that tees each response body into
// a Meter, so that the Meter reads the very bytes the SDK read.
type metered struct {
	mu     sync.Mutex
	meters []*llm.Meter
}

func (m *metered) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	meter := llm.NewMeter(resp.Header.Get("Content-Type"), llm.MeterOptions{})
	m.mu.Lock()
	m.meters = append(m.meters, meter)
	m.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, meter), resp.Body}
	return resp, nil
}

// last is the usage the Meter of the last response read.
func (m *metered) last(t *testing.T) (llm.Usage, bool) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.meters) != 1 {
		t.Fatalf("%d responses, want 1", len(m.meters))
	}
	return m.meters[0].Usage()
}

// upstream serves a Fake made with o, and returns it, its URL and a
// client metering what it answers.
func upstream(t *testing.T, o llmfake.Options) (*llmfake.Fake, *httptest.Server, *metered, *http.Client) {
	f := llmfake.New(o)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	m := &metered{}
	return f, srv, m, &http.Client{Transport: m}
}

// record is the one Record of f, once srv has ended its requests.
func record(t *testing.T, f *llmfake.Fake, srv *httptest.Server) llmfake.Record {
	t.Helper()
	srv.Close() // waits for the handlers
	rs := f.Records()
	if len(rs) != 1 {
		t.Fatalf("%d records, want 1: %+v", len(rs), rs)
	}
	return rs[0]
}

// The prompt of the SDK tests, its tokens as the fake counts them.
const prompt = "Say hello to the rate limiter, twice." // 37 bytes: 10 tokens
const promptTokens = 10

type sdkCase struct {
	name    string
	o       llmfake.Options
	max     int64             // the request's output bound, 0 for none
	headers map[string]string // the request's
	stream  bool
	usage   bool // chat stream: include_usage
	text    int  // the tokens of text answered
	// What must be reported: the fake's record, the SDK's usage, the
	// Meter's read.
	in, out  int64
	reported bool
	meter    llm.Usage
}

func chatCases() []sdkCase {
	return []sdkCase{
		{name: "the configured output", o: llmfake.Options{OutputTokens: 7}, text: 7,
			in: promptTokens, out: 7, reported: true, meter: llm.Usage{Input: promptTokens, Output: 7, Total: promptTokens + 7}},
		{name: "the request's bound cuts the output", o: llmfake.Options{OutputTokens: 7}, max: 3, text: 3,
			in: promptTokens, out: 3, reported: true, meter: llm.Usage{Input: promptTokens, Output: 3, Total: promptTokens + 3}},
		{name: "the header sets the output", headers: map[string]string{llmfake.HeaderOutputTokens: "5"}, text: 5,
			in: promptTokens, out: 5, reported: true, meter: llm.Usage{Input: promptTokens, Output: 5, Total: promptTokens + 5}},
		{name: "an output of 0", headers: map[string]string{llmfake.HeaderOutputTokens: "0"},
			in: promptTokens, out: 0, reported: true, meter: llm.Usage{Input: promptTokens, Total: promptTokens}},
		{name: "usage omitted", o: llmfake.Options{Usage: llmfake.Omit}, text: 16},
		{name: "a negative output", headers: map[string]string{llmfake.HeaderUsage: "negative"}, text: 16,
			in: promptTokens, out: -1, reported: true, meter: llm.Usage{Input: promptTokens, Total: promptTokens - 1, Malformed: true}},
		{name: "a huge output", o: llmfake.Options{Usage: llmfake.Huge}, text: 16,
			in: promptTokens, out: llmfake.HugeTokens, reported: true,
			meter: llm.Usage{Input: promptTokens, Output: llmfake.HugeTokens, Total: promptTokens + llmfake.HugeTokens}},
	}
}

// check fails t unless the fake's record, the SDK's usage and the
// Meter's agree with c.
func (c sdkCase) check(t *testing.T, rec llmfake.Record, sdkIn, sdkOut int64, meter llm.Usage, metered bool) {
	t.Helper()
	if !rec.Complete || rec.Reported != c.reported || rec.Input != c.in || rec.Output != c.out {
		t.Errorf("the fake recorded %+v; want %d in, %d out, reported %v, complete", rec, c.in, c.out, c.reported)
	}
	if sdkIn != c.in || sdkOut != c.out {
		t.Errorf("the SDK read %d in, %d out; want %d, %d", sdkIn, sdkOut, c.in, c.out)
	}
	want := c.meter
	want.Final = c.reported // a whole answer's usage is the one it ends with
	if want.Malformed {
		want.Final = meter.Final // moot: a malformed report is not believed
	}
	if metered != c.reported || meter != want {
		t.Errorf("the Meter read %+v, %v; want %+v, %v", meter, metered, want, c.reported)
	}
}

// TestOpenAIChat: the OpenAI SDK reads the fake's chat completions, and
// the usage it reads is the fake's record and the Meter's.
func TestOpenAIChat(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, c := range chatCases() {
			c.stream, c.usage = stream, stream
			t.Run(c.name+map[bool]string{false: "", true: ", streamed"}[stream], func(t *testing.T) {
				f, srv, m, hc := upstream(t, c.o)
				opts := []ooption.RequestOption{ooption.WithBaseURL(srv.URL + "/v1/"), ooption.WithAPIKey("sk-fake"),
					ooption.WithHTTPClient(hc), ooption.WithMaxRetries(0)}
				for k, v := range c.headers {
					opts = append(opts, ooption.WithHeader(k, v))
				}
				client := openai.NewClient(opts...)
				p := openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
				if c.max > 0 {
					p.MaxCompletionTokens = openai.Int(c.max)
				}
				var usage openai.CompletionUsage
				var text string
				if stream {
					p.StreamOptions.IncludeUsage = openai.Bool(true)
					s := client.Chat.Completions.NewStreaming(context.Background(), p)
					var acc openai.ChatCompletionAccumulator
					for s.Next() {
						chunk := s.Current()
						acc.AddChunk(chunk)
						if chunk.JSON.Usage.Valid() {
							usage = chunk.Usage
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					text = acc.Choices[0].Message.Content
				} else {
					resp, err := client.Chat.Completions.New(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					usage, text = resp.Usage, resp.Choices[0].Message.Content
				}
				if text != strings.Repeat(" tok", c.text) {
					t.Errorf("text %q, want %d tokens", text, c.text)
				}
				if c.reported && usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
					t.Errorf("a total of %d for %+v", usage.TotalTokens, usage)
				}
				u, ok := m.last(t)
				c.check(t, record(t, f, srv), usage.PromptTokens, usage.CompletionTokens, u, ok)
			})
		}
	}
}

// TestOpenAIChatStreamWithoutUsage: a stream not asked for its usage
// reports none, and its chunks carry no usage key.
func TestOpenAIChatStreamWithoutUsage(t *testing.T) {
	f, srv, m, hc := upstream(t, llmfake.Options{OutputTokens: 4})
	client := openai.NewClient(ooption.WithBaseURL(srv.URL+"/v1/"), ooption.WithAPIKey("sk-fake"), ooption.WithHTTPClient(hc), ooption.WithMaxRetries(0))
	s := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
	n := 0
	for s.Next() {
		if s.Current().JSON.Usage.Valid() {
			t.Errorf("a chunk with usage: %s", s.Current().RawJSON())
		}
		n++
	}
	if err := s.Err(); err != nil || n != 6 {
		t.Fatalf("%d chunks, %v; want 6 (role, 4 pieces, finish)", n, err)
	}
	if u, ok := m.last(t); ok {
		t.Errorf("the Meter read %+v", u)
	}
	if rec := record(t, f, srv); rec.Reported || !rec.Complete {
		t.Errorf("recorded %+v", rec)
	}
}

// TestOpenAIResponses: the OpenAI SDK reads the fake's responses API,
// streamed (to response.completed) or not.
func TestOpenAIResponses(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, c := range chatCases() {
			c.stream = stream
			t.Run(c.name+map[bool]string{false: "", true: ", streamed"}[stream], func(t *testing.T) {
				f, srv, m, hc := upstream(t, c.o)
				opts := []ooption.RequestOption{ooption.WithBaseURL(srv.URL + "/v1/"), ooption.WithAPIKey("sk-fake"),
					ooption.WithHTTPClient(hc), ooption.WithMaxRetries(0)}
				for k, v := range c.headers {
					opts = append(opts, ooption.WithHeader(k, v))
				}
				client := openai.NewClient(opts...)
				p := responses.ResponseNewParams{Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}}
				if c.max > 0 {
					p.MaxOutputTokens = openai.Int(c.max)
				}
				var usage responses.ResponseUsage
				var text string
				if stream {
					s := client.Responses.NewStreaming(context.Background(), p)
					for s.Next() {
						if e := s.Current(); e.Type == "response.completed" {
							usage, text = e.Response.Usage, e.Response.OutputText()
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
				} else {
					resp, err := client.Responses.New(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					usage, text = resp.Usage, resp.OutputText()
				}
				if text != strings.Repeat(" tok", c.text) {
					t.Errorf("text %q, want %d tokens", text, c.text)
				}
				u, ok := m.last(t)
				c.check(t, record(t, f, srv), usage.InputTokens, usage.OutputTokens, u, ok)
			})
		}
	}
}

// TestAnthropicMessages: the Anthropic SDK reads the fake's messages,
// streamed (accumulated by the SDK's Message.Accumulate) or not, cache
// reads counted as input.
func TestAnthropicMessages(t *testing.T) {
	cases := chatCases()
	cases = append(cases, sdkCase{name: "cache reads", headers: map[string]string{llmfake.HeaderCacheReadTokens: "100", llmfake.HeaderOutputTokens: "2"}, text: 2,
		in: promptTokens + 100, out: 2, reported: true, meter: llm.Usage{Input: promptTokens + 100, Output: 2, Total: promptTokens + 102}})
	for i := range cases {
		if cases[i].meter.Malformed { // no total_tokens: Input+Output
			cases[i].meter.Total = cases[i].meter.Input + cases[i].meter.Output
		}
	}
	for _, stream := range []bool{false, true} {
		for _, c := range cases {
			c.stream = stream
			t.Run(c.name+map[bool]string{false: "", true: ", streamed"}[stream], func(t *testing.T) {
				f, srv, m, hc := upstream(t, c.o)
				opts := []aoption.RequestOption{aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("sk-ant-fake"),
					aoption.WithHTTPClient(hc), aoption.WithMaxRetries(0)}
				for k, v := range c.headers {
					opts = append(opts, aoption.WithHeader(k, v))
				}
				client := anthropic.NewClient(opts...)
				max := c.max
				if max == 0 {
					max = 1000
				}
				p := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: max,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}}
				var msg anthropic.Message
				if stream {
					s := client.Messages.NewStreaming(context.Background(), p)
					for s.Next() {
						if err := msg.Accumulate(s.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
				} else {
					resp, err := client.Messages.New(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					msg = *resp
				}
				if len(msg.Content) != 1 || msg.Content[0].Text != strings.Repeat(" tok", c.text) {
					t.Errorf("content %+v, want %d tokens", msg.Content, c.text)
				}
				if want := map[bool]anthropic.StopReason{false: "end_turn", true: "max_tokens"}[c.max > 0]; msg.StopReason != want {
					t.Errorf("stop reason %q, want %q", msg.StopReason, want)
				}
				u, ok := m.last(t)
				in := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens + msg.Usage.CacheCreationInputTokens
				c.check(t, record(t, f, srv), in, msg.Usage.OutputTokens, u, ok)
			})
		}
	}
}

// TestCutStream: a client gone mid-stream ends it; the fake records what
// it reported until then, which is what a Meter read: for Anthropic the
// input and first output token of message_start, for OpenAI nothing.
func TestCutStream(t *testing.T) {
	for _, c := range []struct {
		path, body string
		events     int // sent before the first piece of text
		reported   bool
		meter      llm.Usage
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"12345678"}]}`,
			1, false, llm.Usage{}},
		{"/v1/responses", `{"model":"m","stream":true,"input":"12345678"}`, 1, false, llm.Usage{}},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"12345678"}]}`,
			3, true, llm.Usage{Input: 2, Output: 1, Total: 3}},
	} {
		t.Run(c.path, func(t *testing.T) {
			// The stream would take 100 s: a test that waited for it
			// would time out.
			f := llmfake.New(llmfake.Options{OutputTokens: 100, Delay: time.Second})
			srv := httptest.NewServer(f)
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+c.path, strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			m := llm.NewMeter(resp.Header.Get("Content-Type"), llm.MeterOptions{})
			// Read the events sent before the first piece of text.
			r := bufio.NewReader(io.TeeReader(resp.Body, m))
			for blank := 0; blank < c.events; {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if line == "\n" {
					blank++
				}
			}
			cancel()
			resp.Body.Close()
			rec := record(t, f, srv)
			if rec.Complete || rec.Reported != c.reported || rec.Input != c.meter.Input || rec.Output != c.meter.Output {
				t.Errorf("recorded %+v", rec)
			}
			if u, ok := m.Usage(); ok != c.reported || u != c.meter {
				t.Errorf("the Meter read %+v, %v; want %+v", u, ok, c.meter)
			}
		})
	}
}

// TestTotals: the records and totals of many requests, made at once,
// are the sums of what each was told.
func TestTotals(t *testing.T) {
	f := llmfake.New(llmfake.Options{})
	srv := httptest.NewServer(f)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			body := `{"model":"m","max_tokens":` + strconv.Itoa(i) + `,"stream":` + strconv.FormatBool(i%2 == 0) +
				`,"messages":[{"role":"user","content":"` + strings.Repeat("x", 4*i) + `"}]}`
			resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	srv.Close()
	in, out := f.Totals()
	// Inputs 0..19, outputs min(16, 0..19).
	if in != 190 || out != 120+4*16 || len(f.Records()) != 20 {
		t.Fatalf("totals %d in, %d out over %d records", in, out, len(f.Records()))
	}
}

// TestBadRequests: the fake refuses what an API would, and what the
// gateway's ParseRequest refuses, with a 400 in the APIs' error shape.
func TestBadRequests(t *testing.T) {
	f := llmfake.New(llmfake.Options{})
	srv := httptest.NewServer(f)
	defer srv.Close()
	for _, c := range []struct {
		name, path, body string
		header           [2]string
		status           int
	}{
		{"a twin max_tokens", "/v1/messages", `{"model":"m","max_tokens":1,"max_tokens":2}`, [2]string{}, 400},
		{"not JSON", "/v1/chat/completions", `{`, [2]string{}, 400},
		{"a bad output header", "/v1/chat/completions", `{"model":"m"}`, [2]string{llmfake.HeaderOutputTokens, "-3"}, 400},
		{"a bad usage header", "/v1/chat/completions", `{"model":"m"}`, [2]string{llmfake.HeaderUsage, "some"}, 400},
		{"no such path", "/v1/embeddings", `{"model":"m"}`, [2]string{}, 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+c.path, strings.NewReader(c.body))
			if c.header[0] != "" {
				req.Header.Set(c.header[0], c.header[1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(b), `"invalid_request_error"`) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}
	if rs := f.Records(); len(rs) != 0 {
		t.Fatalf("refused requests recorded: %+v", rs)
	}
}
