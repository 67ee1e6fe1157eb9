package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/llm"
	"github.com/tollgate/tollgate/policy"
)

// cutWriter is a client that takes the first n bytes written, then is
// gone: later writes fail.
type cutWriter struct {
	*httptest.ResponseRecorder
	n int
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if w.n <= 0 {
		return 0, errors.New("the client went away")
	}
	k := min(len(p), w.n)
	w.n -= k
	w.ResponseRecorder.Write(p[:k])
	if k < len(p) {
		return k, errors.New("the client went away")
	}
	return k, nil
}

// TestMeterWriterUsage: what a token call's response reported, by how
// far it reached the client.
func TestMeterWriterUsage(t *testing.T) {
	const (
		sse      = "text/event-stream"
		start    = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
		delta    = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":30}}\n\n"
		stop     = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		chat     = `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`
		reported = true
	)
	for _, c := range []struct {
		name     string
		ct       string
		status   int
		header   string // the usage header's value
		parts    []string
		reach    int  // bytes the client takes, -1 for all
		returned bool // the handler returned (else it panicked, as a proxy cut short does)
		want     engine.Usage
	}{
		{"a whole stream: its final usage", sse, 200, "", []string{start, delta, stop}, -1, true, engine.Usage{Input: 10, Output: 30, Reported: reported}},
		{"the client gone after the final event: it had reached the client", sse, 200, "", []string{start, delta, stop}, len(start + delta), false,
			engine.Usage{Input: 10, Output: 30, Reported: reported}},
		{"the client gone before the final event: message_start's partial count is not the call's", sse, 200, "", []string{start, delta, stop}, len(start) + 5, false,
			engine.Usage{}},
		{"the upstream cut before the final event: the estimate", sse, 200, "", []string{start}, -1, false, engine.Usage{}},
		{"a final event written but not taken by the client", sse, 200, "", []string{start, delta}, len(start), false, engine.Usage{}},
		{"a whole JSON body", "application/json", 200, "", []string{chat[:20], chat[20:]}, -1, true, engine.Usage{Input: 7, Output: 3, Reported: reported}},
		{"a JSON body cut short", "application/json", 200, "", []string{chat[:20], chat[20:]}, 20, false, engine.Usage{}},
		{"an error answered whole without usage: failed (the engine settles it at nothing)", "application/json", 429, "", []string{`{"error":"slow down"}`}, -1, true, engine.Usage{Failed: true}},
		{"an error cut short: the estimate", "application/json", 502, "", []string{`{"error":"bad gateway"}`}, 3, false, engine.Usage{}},
		{"a usage header on a whole response: its total", "application/json", 200, "123", []string{`{}`}, -1, true, engine.Usage{Output: 123, Reported: reported, TotalOnly: true}},
		{"a usage header on a response cut short: the estimate", "application/json", 200, "123", []string{`{}`}, 0, false, engine.Usage{}},
		{"a malformed count is reported as impossible", "application/json", 200, "", []string{`{"usage":{"input_tokens":-1,"output_tokens":2}}`}, -1, true,
			engine.Usage{Output: 2, Reported: reported, Impossible: true}},
		{"a compressed body is not read", "application/json", 200, "", []string{chat}, -1, true, engine.Usage{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &cutWriter{ResponseRecorder: httptest.NewRecorder(), n: c.reach}
			if c.reach < 0 {
				rec.n = 1 << 30
			}
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Header.Set("Accept-Encoding", "gzip")
			w := meterTokens(rec, r, &policy.Tokens{UsageHeader: "X-Usage"})
			if r.Header.Get("Accept-Encoding") != "" {
				t.Errorf("Accept-Encoding %q passed on: the upstream would compress what the meter reads", r.Header.Get("Accept-Encoding"))
			}
			w.Header().Set("Content-Type", c.ct)
			if c.header != "" {
				w.Header().Set("X-Usage", c.header)
			}
			if c.name == "a compressed body is not read" {
				w.Header().Set("Content-Encoding", "gzip")
			}
			w.WriteHeader(c.status)
			for _, p := range c.parts {
				w.Write([]byte(p))
			}
			w.whole = c.returned
			if got := w.usage(); got != c.want {
				t.Errorf("usage %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestMeterWriterUsagePaths: a route's usage_paths are running counts,
// taken once the response has been passed on whole.
func TestMeterWriterUsagePaths(t *testing.T) {
	const (
		first = "data: {\"usageMetadata\":{\"promptTokenCount\":11,\"candidatesTokenCount\":2}}\n\n"
		last  = "data: {\"usageMetadata\":{\"promptTokenCount\":11,\"candidatesTokenCount\":7}}\n\n"
	)
	gemini := &llm.Paths{Input: []string{"usageMetadata", "promptTokenCount"}, Output: []string{"usageMetadata", "candidatesTokenCount"}}
	total := &llm.Paths{Total: []string{"meta", "tokens"}}
	for _, c := range []struct {
		name     string
		paths    *llm.Paths
		parts    []string
		returned bool
		want     engine.Usage
	}{
		{"a whole stream: its last count", gemini, []string{first, last}, true, engine.Usage{Input: 11, Output: 7, Reported: true}},
		{"a stream cut after its last chunk: a running count is never final, the estimate stands", gemini, []string{first, last}, false, engine.Usage{}},
		{"a total alone settles as a total", total, []string{`{"meta":{"tokens":42}}`}, true, engine.Usage{Output: 42, Reported: true, TotalOnly: true}},
	} {
		rec := httptest.NewRecorder()
		w := meterTokens(rec, httptest.NewRequest(http.MethodPost, "/", nil), &policy.Tokens{UsagePaths: c.paths})
		w.Header().Set("Content-Type", "text/event-stream")
		if c.paths == total {
			w.Header().Set("Content-Type", "application/json")
		}
		for _, p := range c.parts {
			w.Write([]byte(p))
		}
		w.whole = c.returned
		if got := w.usage(); got != c.want {
			t.Errorf("%s: usage %+v, want %+v", c.name, got, c.want)
		}
	}
}
