// Package llmfake is an LLM API upstream for tests: it answers the OpenAI
// chat completions and responses APIs and the Anthropic messages API,
// streamed or not, as the real ones do, with usage it decides by rule,
// and keeps what usage it reported to each request so that a test can
// check the accounting of what passed through to the token.
package llmfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/llm"
)

// UsageMode is what usage the fake reports.
type UsageMode int

// The usage modes.
const (
	Report   UsageMode = iota // the usage as it is
	Omit                      // no usage at all
	Negative                  // an output of -1 tokens, impossible
	Huge                      // an output of 1<<53 tokens, past any cap
)

// HugeTokens is the output Huge reports.
const HugeTokens = 1 << 53

// Headers of a request that change the fake's answer to it alone.
const (
	// HeaderOutputTokens is the output wanted, in place of
	// Options.OutputTokens (still bounded by the request's max).
	HeaderOutputTokens = "X-Fake-Output-Tokens"
	// HeaderUsage is the usage mode, in place of Options.Usage:
	// "report", "omit", "negative" or "huge".
	HeaderUsage = "X-Fake-Usage"
	// HeaderCacheReadTokens is the cache_read_input_tokens the messages
	// API reports, on top of input_tokens.
	HeaderCacheReadTokens = "X-Fake-Cache-Read-Tokens"
)

// Options shape the fake's answers.
type Options struct {
	// OutputTokens is the output of an answer, unless the request's
	// max_completion_tokens, max_tokens or max_output_tokens is lower.
	// 0 means 16.
	OutputTokens int64
	// Chunks is how many pieces of text a stream sends, or 0 for one a
	// token.
	Chunks int
	// Delay is the wait before each piece of text of a stream; a client
	// gone meanwhile ends it.
	Delay time.Duration
	// Usage is what usage is reported.
	Usage UsageMode
}

// Record is the usage the fake reported to one request.
type Record struct {
	API    string // "chat", "responses" or "messages"
	Model  string
	Stream bool
	// Input and Output are the last counts reported, as a Meter reads
	// them: Input holds the messages API's cache reads.
	Input, Output int64
	Reported      bool // whether any usage was written
	Complete      bool // whether the whole answer was written
}

// Fake is an http.Handler serving POST /v1/chat/completions,
// /v1/responses and /v1/messages.
type Fake struct {
	o       Options
	mu      sync.Mutex
	records []Record
	calls   int // answered, for ids
}

// New returns a Fake answering as o says.
func New(o Options) *Fake {
	if o.OutputTokens == 0 {
		o.OutputTokens = 16
	}
	return &Fake{o: o}
}

// Records returns the usage reported so far, a Record a request in the
// order they ended.
func (f *Fake) Records() []Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Record(nil), f.records...)
}

// Totals returns the sums of the input and output reported so far.
func (f *Fake) Totals() (input, output int64) {
	for _, r := range f.Records() {
		input += r.Input
		output += r.Output
	}
	return input, output
}

// InputTokens is the prompt the fake counts for a request body: a token
// for each 4 bytes (rounded up) of the text of its messages, system
// prompt, instructions and input.
func InputTokens(body []byte) (int64, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, err
	}
	return (int64(textBytes(v, "")) + 3) / 4, nil
}

// textBytes is the length of the strings in v that are text, v being
// the value of key (arrays handing their key down).
func textBytes(v any, key string) int {
	switch v := v.(type) {
	case string:
		switch key {
		case "content", "text", "system", "instructions", "input":
			return len(v)
		}
	case []any:
		n := 0
		for _, e := range v {
			n += textBytes(e, key)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range v {
			if k != "model" {
				n += textBytes(e, k)
			}
		}
		return n
	}
	return 0
}

// call is one request being answered.
type call struct {
	f       *Fake
	w       http.ResponseWriter
	r       *http.Request
	rec     Record
	mode    UsageMode
	id      string
	in      int64   // the prompt
	cache   int64   // cache reads (messages API)
	out     int64   // the output
	limited bool    // whether the request's max cut the output
	usage   bool    // chat stream: stream_options.include_usage
	pending *Record // the usage the answer being written reports
}

// ServeHTTP answers one call of an API, and records the usage it
// reported once the answer has ended.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	api := map[string]string{"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}[r.URL.Path]
	if api == "" {
		fail(w, http.StatusNotFound, "no such path: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	c, err := f.begin(w, r, api)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	defer func() {
		f.mu.Lock()
		f.records = append(f.records, c.rec)
		f.mu.Unlock()
	}()
	switch {
	case api == "chat" && c.rec.Stream:
		c.chatStream()
	case api == "chat":
		c.json(c.chatCompletion(c.text(0, c.out)))
	case api == "responses" && c.rec.Stream:
		c.responsesStream()
	case api == "responses":
		c.json(c.response("completed", c.text(0, c.out), true))
	case c.rec.Stream:
		c.messagesStream()
	default:
		c.json(c.message(c.text(0, c.out), true))
	}
}

func (f *Fake) begin(w http.ResponseWriter, r *http.Request, api string) (*call, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	req, err := llm.ParseRequest(body, llm.RequestOptions{})
	if err != nil {
		return nil, err
	}
	in, err := InputTokens(body)
	if err != nil {
		return nil, err
	}
	var opts struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &opts)
	c := &call{f: f, w: w, r: r, mode: f.o.Usage, in: in, out: f.o.OutputTokens, usage: opts.StreamOptions.IncludeUsage,
		rec: Record{API: api, Model: req.Model, Stream: req.Stream}}
	if h := r.Header.Get(HeaderOutputTokens); h != "" {
		if c.out, err = strconv.ParseInt(h, 10, 64); err != nil || c.out < 0 {
			return nil, fmt.Errorf("%s: %q is no count", HeaderOutputTokens, h)
		}
	}
	if h := r.Header.Get(HeaderCacheReadTokens); h != "" && api == "messages" {
		if c.cache, err = strconv.ParseInt(h, 10, 64); err != nil || c.cache < 0 {
			return nil, fmt.Errorf("%s: %q is no count", HeaderCacheReadTokens, h)
		}
	}
	if h := r.Header.Get(HeaderUsage); h != "" {
		m, ok := map[string]UsageMode{"report": Report, "omit": Omit, "negative": Negative, "huge": Huge}[h]
		if !ok {
			return nil, fmt.Errorf("%s: %q is no mode", HeaderUsage, h)
		}
		c.mode = m
	}
	if req.MaxOutput >= 0 && req.MaxOutput < c.out {
		c.out, c.limited = req.MaxOutput, true
	}
	f.mu.Lock()
	f.calls++
	c.id = strconv.Itoa(f.calls)
	f.mu.Unlock()
	return c, nil
}

// text is the output from token from to token to: " tok" each.
func (c *call) text(from, to int64) string { return strings.Repeat(" tok", int(to-from)) }

// pieces splits the output into the pieces a stream sends.
func (c *call) pieces() []string {
	n := int64(c.f.o.Chunks)
	if n <= 0 || n > c.out {
		n = c.out
	}
	var p []string
	for i := int64(0); i < n; i++ {
		p = append(p, c.text(i*c.out/n, (i+1)*c.out/n))
	}
	return p
}

// output is the output count to report, as the mode has it.
func (c *call) output(n int64) int64 {
	switch c.mode {
	case Negative:
		return -1
	case Huge:
		return HugeTokens
	}
	return n
}

// reports notes the usage the next write reports, once it is written.
func (c *call) reports(in, out int64) {
	c.pending = &Record{Input: in, Output: out}
}

// written notes that a write went out: its usage, if any, is reported.
func (c *call) written() {
	if p := c.pending; p != nil {
		c.rec.Input, c.rec.Output, c.rec.Reported = p.Input, p.Output, true
		c.pending = nil
	}
}

// wait waits for the delay before a piece, and tells whether the client
// is still there.
func (c *call) wait() bool {
	if c.f.o.Delay <= 0 {
		return c.r.Context().Err() == nil
	}
	t := time.NewTimer(c.f.o.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.r.Context().Done():
		return false
	}
}

func (c *call) json(v any) {
	b, _ := json.Marshal(v)
	c.w.Header().Set("Content-Type", "application/json")
	if _, err := c.w.Write(b); err == nil {
		c.written()
		c.rec.Complete = true
	}
}

func (c *call) startStream() {
	c.w.Header().Set("Content-Type", "text/event-stream")
	c.w.Header().Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
}

// event writes one server-sent event, named unless name is "", and
// tells whether it was sent.
func (c *call) event(name string, v any) bool {
	var b []byte
	if name != "" {
		b = append(b, "event: "+name+"\n"...)
	}
	data, ok := v.([]byte)
	if !ok {
		data, _ = json.Marshal(v)
	}
	b = append(append(append(b, "data: "...), data...), "\n\n"...)
	if _, err := c.w.Write(b); err != nil {
		return false
	}
	if http.NewResponseController(c.w).Flush() != nil {
		return false
	}
	c.written()
	return true
}

type obj = map[string]any

func (c *call) chatUsage() obj {
	out := c.output(c.out)
	c.reports(c.in, out)
	return obj{"prompt_tokens": c.in, "completion_tokens": out, "total_tokens": c.in + out,
		"prompt_tokens_details":     obj{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": obj{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
}

func (c *call) finish() string {
	if c.limited {
		return "length"
	}
	return "stop"
}

func (c *call) chatCompletion(text string) obj {
	v := obj{"id": "chatcmpl-fake-" + c.id, "object": "chat.completion", "created": 1700000000, "model": c.rec.Model,
		"choices": []obj{{"index": 0, "message": obj{"role": "assistant", "content": text, "refusal": nil, "annotations": []any{}},
			"logprobs": nil, "finish_reason": c.finish()}}}
	if c.mode != Omit {
		v["usage"] = c.chatUsage()
	}
	return v
}

func (c *call) chatChunk(delta obj, finish any) obj {
	v := obj{"id": "chatcmpl-fake-" + c.id, "object": "chat.completion.chunk", "created": 1700000000, "model": c.rec.Model,
		"choices": []obj{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	if c.usage {
		v["usage"] = nil
	}
	return v
}

func (c *call) chatStream() {
	c.startStream()
	if !c.event("", c.chatChunk(obj{"role": "assistant", "content": ""}, nil)) {
		return
	}
	for _, p := range c.pieces() {
		if !c.wait() || !c.event("", c.chatChunk(obj{"content": p}, nil)) {
			return
		}
	}
	if !c.event("", c.chatChunk(obj{}, c.finish())) {
		return
	}
	if c.usage && c.mode != Omit {
		last := obj{"id": "chatcmpl-fake-" + c.id, "object": "chat.completion.chunk", "created": 1700000000, "model": c.rec.Model,
			"choices": []any{}, "usage": c.chatUsage()}
		if !c.event("", last) {
			return
		}
	}
	c.rec.Complete = c.event("", []byte("[DONE]"))
}

func (c *call) response(status, text string, final bool) obj {
	v := obj{"id": "resp_fake_" + c.id, "object": "response", "created_at": 1700000000, "status": status, "error": nil,
		"incomplete_details": nil, "model": c.rec.Model, "output": []any{}, "usage": nil}
	if final {
		v["output"] = []obj{{"type": "message", "id": "msg_fake_" + c.id, "status": "completed", "role": "assistant",
			"content": []obj{{"type": "output_text", "text": text, "annotations": []any{}}}}}
		if c.mode != Omit {
			out := c.output(c.out)
			c.reports(c.in, out)
			v["usage"] = obj{"input_tokens": c.in, "input_tokens_details": obj{"cached_tokens": 0},
				"output_tokens": out, "output_tokens_details": obj{"reasoning_tokens": 0}, "total_tokens": c.in + out}
		}
	}
	return v
}

func (c *call) responsesStream() {
	c.startStream()
	seq := 0
	send := func(typ string, v obj) bool {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		return c.event(typ, v)
	}
	if !send("response.created", obj{"response": c.response("in_progress", "", false)}) {
		return
	}
	for _, p := range c.pieces() {
		if !c.wait() || !send("response.output_text.delta", obj{"item_id": "msg_fake_" + c.id, "output_index": 0, "content_index": 0, "delta": p}) {
			return
		}
	}
	c.rec.Complete = send("response.completed", obj{"response": c.response("completed", c.text(0, c.out), true)})
}

func (c *call) stopReason() string {
	if c.limited {
		return "max_tokens"
	}
	return "end_turn"
}

func (c *call) messageUsage(out int64) obj {
	out = c.output(out)
	c.reports(c.in+c.cache, out)
	return obj{"input_tokens": c.in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": c.cache,
		"output_tokens": out, "service_tier": "standard"}
}

func (c *call) message(text string, final bool) obj {
	v := obj{"id": "msg_fake_" + c.id, "type": "message", "role": "assistant", "model": c.rec.Model,
		"content": []obj{{"type": "text", "text": text}}, "stop_reason": c.stopReason(), "stop_sequence": nil}
	if !final {
		v["content"], v["stop_reason"] = []any{}, nil
	}
	if c.mode != Omit {
		out := c.out
		if !final {
			out = min(out, 1) // as the API does, the first token
		}
		v["usage"] = c.messageUsage(out)
	}
	return v
}

func (c *call) messagesStream() {
	c.startStream()
	send := func(typ string, v obj) bool {
		v["type"] = typ
		return c.event(typ, v)
	}
	if !send("message_start", obj{"message": c.message("", false)}) {
		return
	}
	if !send("content_block_start", obj{"index": 0, "content_block": obj{"type": "text", "text": ""}}) ||
		!send("ping", obj{}) {
		return
	}
	for _, p := range c.pieces() {
		if !c.wait() || !send("content_block_delta", obj{"index": 0, "delta": obj{"type": "text_delta", "text": p}}) {
			return
		}
	}
	if !send("content_block_stop", obj{"index": 0}) {
		return
	}
	delta := obj{"delta": obj{"stop_reason": c.stopReason(), "stop_sequence": nil}}
	if c.mode != Omit {
		delta["usage"] = obj{"output_tokens": c.output(c.out)}
		c.reports(c.in+c.cache, c.output(c.out))
	}
	if !send("message_delta", delta) {
		return
	}
	c.rec.Complete = send("message_stop", obj{})
}

// fail answers with an error in the shape of the APIs'.
func fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(obj{"type": "error", "error": obj{"type": "invalid_request_error", "message": msg}})
	w.Write(b)
}
