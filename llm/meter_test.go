package llm_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/llm"
)

// Bodies as the upstreams send them.
const (
	openaiChat = `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! How can I assist you today?", "refusal": null, "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29, "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
  "service_tier": "default"
}
`
	openaiChatStream = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

`
	responses       = `{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","error":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove...","annotations":[]}]}],"parallel_tool_calls":true,"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}`
	responsesStream = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"in_progress","model":"gpt-4.1","output":[],"usage":null}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}

event: response.completed
data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"completed","model":"gpt-4.1","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there!","annotations":[]}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48}}}

`
	anthropic       = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":2000,"cache_read_input_tokens":1000,"cache_creation":{"ephemeral_5m_input_tokens":2000,"ephemeral_1h_input_tokens":0},"output_tokens":503,"service_tier":"standard"}}`
	anthropicStream = `event: message_start
data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-opus-4-6","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":50,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}

event: message_stop
data: {"type":"message_stop"}

`
)

// A Gemini body and stream (alt=sse), which report usage at paths of
// their own, the stream's every chunk a running count.
const (
	gemini       = `{"candidates":[{"content":{"parts":[{"text":"Hi there"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":7,"totalTokenCount":18},"modelVersion":"gemini-2.0-flash"}`
	geminiStream = `data: {"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":2}}

data: {"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":7,"totalTokenCount":18}}

`
)

var geminiPaths = llm.MeterOptions{Paths: &llm.Paths{Input: []string{"usageMetadata", "promptTokenCount"},
	Output: []string{"usageMetadata", "candidatesTokenCount"}, Total: []string{"usageMetadata", "totalTokenCount"}}}

const (
	jsonCT = "application/json"
	sseCT  = "text/event-stream"
)

type meterCase struct {
	name, ct, body string
	o              llm.MeterOptions
	want           llm.Usage // its Final is set by write: see final
	ok             bool
	partial        bool // the last count came from Anthropic's message_start
}

// final is whether c's usage is Final: it gave a count, and its last did
// not come from a message_start.
func (c meterCase) final() bool {
	w := c.want
	return c.ok && !c.partial && !(w.Input == 0 && w.Output == 0 && w.Total == 0 && w.Malformed)
}

// TestMeter: the usage of every shape, read the same whatever the writes
// the body comes in, and whatever the line ends of an event stream.
func TestMeter(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, c := range []meterCase{
		{name: "OpenAI chat", ct: "application/json", body: openaiChat,
			want: llm.Usage{Input: 19, Output: 10, Total: 29}, ok: true},
		{name: "OpenAI chat stream with include_usage: the last chunk", ct: sseCT, body: openaiChatStream,
			want: llm.Usage{Input: 9, Output: 2, Total: 11}, ok: true},
		{name: "OpenAI chat stream without include_usage", ct: sseCT,
			body: strings.ReplaceAll(strings.Split(openaiChatStream, "\n\n")[0], `,"usage":null`, "") + "\n\ndata: [DONE]\n\n"},
		{name: "OpenAI responses", ct: "application/json; charset=utf-8", body: responses,
			want: llm.Usage{Input: 36, Output: 87, Total: 123}, ok: true},
		{name: "OpenAI responses stream: response.completed", ct: "text/event-stream; charset=utf-8", body: responsesStream,
			want: llm.Usage{Input: 37, Output: 11, Total: 48}, ok: true},
		{name: "Anthropic: the cache counts as input", ct: jsonCT, body: anthropic,
			want: llm.Usage{Input: 2095 + 2000 + 1000, Output: 503, Total: 2095 + 2000 + 1000 + 503}, ok: true},
		{name: "Anthropic stream: message_start's input, message_delta's output", ct: sseCT, body: anthropicStream,
			want: llm.Usage{Input: 175, Output: 15, Total: 190}, ok: true},
		{name: "Anthropic stream whose message_delta gives input too, and nulls", ct: sseCT,
			body: strings.Replace(anthropicStream, `"usage":{"output_tokens":15}`, `"usage":{"input_tokens":30,"cache_creation_input_tokens":null,"cache_read_input_tokens":0,"output_tokens":15}`, 1),
			want: llm.Usage{Input: 130, Output: 15, Total: 145}, ok: true},
		{name: "a stream cut before message_delta: what was seen, not final", ct: sseCT, body: anthropicStream[:strings.Index(anthropicStream, "event: message_delta")],
			want: llm.Usage{Input: 175, Output: 1, Total: 176}, ok: true, partial: true},
		{name: "an event not ended by a blank line is not read", ct: sseCT,
			body: "data: {\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n"},
		{name: "a JSON body cut short has no usage", ct: jsonCT, body: openaiChat[:len(openaiChat)-40]},
		{name: "a JSON body with data after it has none", ct: jsonCT, body: openaiChat + "{}"},
		{name: "a content type with parameters and capitals", ct: " Application/JSON ; charset=utf-8", body: openaiChat,
			want: llm.Usage{Input: 19, Output: 10, Total: 29}, ok: true},
		{name: "a +json type", ct: "application/vnd.api+json", body: `{"usage":{"input_tokens":1,"output_tokens":2}}`,
			want: llm.Usage{Input: 1, Output: 2, Total: 3}, ok: true},
		{name: "text/plain has no usage", ct: "text/plain", body: openaiChat},
		{name: "no content type, no usage", ct: "", body: openaiChat},
		{name: "text/json is no JSON type here", ct: "text/json", body: openaiChat},
		{name: "a JSON body past MaxJSON is read: only its usage is held", ct: jsonCT, o: llm.MeterOptions{MaxJSON: 64},
			body: `{"choices":[{"message":{"content":"` + long + long + `"}}],"usage":{"input_tokens":1,"output_tokens":2},"x":"` + long + `"}`,
			want: llm.Usage{Input: 1, Output: 2, Total: 3}, ok: true},
		{name: "a usage past MaxJSON has none", ct: jsonCT, o: llm.MeterOptions{MaxJSON: 64},
			body: `{"usage":{"input_tokens":1,"x":"` + long + `"}}`},
		{name: "usage given twice: each count's last", ct: jsonCT,
			body: `{"usage":{"input_tokens":1,"output_tokens":2},"choices":[],"usage":{"output_tokens":5}}`,
			want: llm.Usage{Input: 1, Output: 5, Total: 6}, ok: true},
		{name: "a key that holds usage, escaped quotes, brackets in strings", ct: jsonCT,
			body: `{"my_usage":{"input_tokens":9},"t":"}\"usage\":{[","usage":{"input_tokens":1}}`,
			want: llm.Usage{Input: 1, Total: 1}, ok: true},
		{name: "an unclosed string is no body", ct: jsonCT, body: `{"usage":{"input_tokens":1},"t":"}`},
		{name: "unmatched brackets are no body", ct: jsonCT, body: `{"usage":{"input_tokens":1},"t":[}`},
		{name: "a key without its colon is no body", ct: jsonCT, body: `{"usage" {"input_tokens":1}}`},
		{name: "a JSON body of MaxJSON is read", ct: jsonCT, body: openaiChat, o: llm.MeterOptions{MaxJSON: len(openaiChat)},
			want: llm.Usage{Input: 19, Output: 10, Total: 29}, ok: true},
		{name: "usage null is none", ct: jsonCT, body: `{"usage":null}`},
		{name: "an empty usage is none", ct: jsonCT, body: `{"usage":{}}`},
		{name: "usage in the text, escaped, is not usage", ct: sseCT,
			body: `data: {"choices":[{"delta":{"content":"\"usage\":{\"prompt_tokens\":1}"}}]}` + "\n\n"},
		{name: "usage deeper than a response or message is not usage", ct: jsonCT,
			body: `{"choices":[{"usage":{"prompt_tokens":1}}],"response":{"message":{"usage":{"input_tokens":5}}}}`},
		{name: "an escaped key is that key", ct: jsonCT, body: `{"u\u0073age":{"input_t\u006fkens":3,"output_tokens":4}}`,
			want: llm.Usage{Input: 3, Output: 4, Total: 7}, ok: true},
		{name: "the last report wins per field", ct: sseCT,
			body: "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n" +
				"data: {\"usage\":{\"completion_tokens\":3}}\n\n",
			want: llm.Usage{Input: 5, Output: 3, Total: 6}, ok: true},
		{name: "multi-line data is joined with LF", ct: sseCT,
			body: "data: {\"usage\":\ndata: {\"input_tokens\":7,\ndata:\"output_tokens\":8}}\n\n",
			want: llm.Usage{Input: 7, Output: 8, Total: 15}, ok: true},
		{name: "comments, other fields, no space after the colon, a byte order mark", ct: sseCT,
			body: "\xEF\xBB\xBF: hello\nid: 1\nretry: 5\nevent: x\ndata:{\"usage\":{\"input_tokens\":7,\"output_tokens\":8}}\n: bye\n\n",
			want: llm.Usage{Input: 7, Output: 8, Total: 15}, ok: true},
		{name: "only one space after the colon is dropped", ct: sseCT,
			body: "data:  {\"usage\":{\"input_tokens\":7,\"output_tokens\":8}}\n\n",
			want: llm.Usage{Input: 7, Output: 8, Total: 15}, ok: true},
		{name: "a field named data-ish is not data", ct: sseCT,
			body: "datum: {\"usage\":{\"input_tokens\":7}}\n\ndata : {\"usage\":{\"input_tokens\":7}}\n\n"},
		{name: "a byte order mark after the start is not one", ct: sseCT,
			body: "data: {}\n\n\xEF\xBB\xBFdata: {\"usage\":{\"input_tokens\":7}}\n\n"},
		{name: "half a byte order mark spoils the first line only", ct: sseCT,
			body: "\xEF\xBBdata: {\"usage\":{\"input_tokens\":7}}\n\ndata: {\"usage\":{\"input_tokens\":8}}\n\n",
			want: llm.Usage{Input: 8, Total: 8}, ok: true},
		{name: "a line of data that is not JSON is no report", ct: sseCT,
			body: "data: {\"usage\":{\"input_tokens\":7}} x\n\ndata: \"usage\"\n\n"},

		{name: "a negative count is malformed and not taken", ct: jsonCT, body: `{"usage":{"input_tokens":5,"output_tokens":-3}}`,
			want: llm.Usage{Input: 5, Total: 5, Malformed: true}, ok: true},
		{name: "a fraction", ct: jsonCT, body: `{"usage":{"input_tokens":5.5,"output_tokens":3}}`,
			want: llm.Usage{Output: 3, Total: 3, Malformed: true}, ok: true},
		{name: "an exponent", ct: jsonCT, body: `{"usage":{"prompt_tokens":1e3}}`, want: llm.Usage{Malformed: true}, ok: true},
		{name: "a string", ct: jsonCT, body: `{"usage":{"total_tokens":"10"}}`, want: llm.Usage{Malformed: true}, ok: true},
		{name: "too large for int64", ct: jsonCT, body: `{"usage":{"output_tokens":9223372036854775808}}`, want: llm.Usage{Malformed: true}, ok: true},
		{name: "usage not an object", ct: jsonCT, body: `{"usage":12}`, want: llm.Usage{Malformed: true}, ok: true},
		{name: "an input that overflows, summed", ct: jsonCT,
			body: `{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":1,"output_tokens":2}}`,
			want: llm.Usage{Input: 9223372036854775807, Output: 2, Total: 9223372036854775807, Malformed: true}, ok: true},
		{name: "huge but whole is a count, the caller's to cap", ct: jsonCT, body: `{"usage":{"input_tokens":1000000000000000}}`,
			want: llm.Usage{Input: 1e15, Total: 1e15}, ok: true},
		{name: "a malformed count stays malformed after good reports", ct: sseCT,
			body: "data: {\"usage\":{\"output_tokens\":-1}}\n\ndata: {\"usage\":{\"output_tokens\":4}}\n\n",
			want: llm.Usage{Output: 4, Total: 4, Malformed: true}, ok: true},

		{name: "an event past MaxEvent is passed over, the next is read", ct: sseCT, o: llm.MeterOptions{MaxEvent: 64},
			body: "data: {\"usage\":{\"input_tokens\":1},\"x\":\"" + long + "\"}\n\ndata: {\"usage\":{\"input_tokens\":2}}\n\n",
			want: llm.Usage{Input: 2, Total: 2}, ok: true},
		{name: "an event of lines each short but past MaxEvent together", ct: sseCT, o: llm.MeterOptions{MaxEvent: 64},
			body: "data: {\"usage\":{\"input_tokens\":1},\ndata: \"x\":\"" + long[:40] + "\"}\n\n"},
		{name: "an event of MaxEvent is read", ct: sseCT, o: llm.MeterOptions{MaxEvent: 64},
			body: "data: {\"usage\":{\"input_tokens\":1},\"x\":\"" + long[:64-len(`{"usage":{"input_tokens":1},"x":""}`)] + "\"}\n\n",
			want: llm.Usage{Input: 1, Total: 1}, ok: true},
		{name: "a long comment does not spoil the event", ct: sseCT, o: llm.MeterOptions{MaxEvent: 64},
			body: ":" + long + "\ndata: {\"usage\":{\"input_tokens\":1}}\n:" + long + "\n\n",
			want: llm.Usage{Input: 1, Total: 1}, ok: true},

		{name: "paths: a Gemini body, never final till passed on whole", ct: jsonCT, o: geminiPaths, body: gemini,
			want: llm.Usage{Input: 11, Output: 7, Total: 18}, ok: true, partial: true},
		{name: "paths: a Gemini stream's running counts, the last wins", ct: sseCT, o: geminiPaths, body: geminiStream,
			want: llm.Usage{Input: 11, Output: 7, Total: 18}, ok: true, partial: true},
		{name: "paths: the path's keys, not the known shapes' beside them", ct: jsonCT, o: llm.MeterOptions{Paths: &llm.Paths{
			Input: []string{"usage", "billed_units", "input_tokens"}, Output: []string{"usage", "billed_units", "output_tokens"}}},
			body: `{"usage":{"tokens":{"input_tokens":71,"output_tokens":10},"input_tokens":99,"billed_units":{"input_tokens":5,"output_tokens":10}}}`,
			want: llm.Usage{Input: 5, Output: 10, Total: 15}, ok: true, partial: true},
		{name: "paths: a total alone says so", ct: jsonCT, o: llm.MeterOptions{Paths: &llm.Paths{Total: []string{"meta", "tokens"}}},
			body: `{"meta":{"tokens":42}}`, want: llm.Usage{Total: 42, TotalOnly: true}, ok: true, partial: true},
		{name: "paths: the known shapes are not read", ct: jsonCT, o: geminiPaths, body: openaiChat},
		{name: "paths: a path through a value that is no object is not followed", ct: sseCT, o: geminiPaths,
			body: "data: {\"usageMetadata\":[{\"promptTokenCount\":3}]}\n\ndata: {\"usageMetadata\":\"x\"}\n\n"},
		{name: "paths: a count that is not a whole number is malformed", ct: jsonCT, o: geminiPaths,
			body: `{"usageMetadata":{"promptTokenCount":-1,"candidatesTokenCount":2}}`,
			want: llm.Usage{Output: 2, Total: 2, Malformed: true}, ok: true, partial: true},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t) })
		if c.ct == sseCT {
			for _, end := range []string{"\r\n", "\r"} {
				c := c
				c.body = strings.ReplaceAll(c.body, "\n", end)
				t.Run(fmt.Sprintf("%s, lines ended by %q", c.name, end), func(t *testing.T) { c.check(t) })
			}
		}
	}
}

// check writes c's body in one write, byte by byte, and split in two
// at every byte (in three, each third split so, for short bodies).
func (c meterCase) check(t *testing.T) {
	t.Helper()
	b := []byte(c.body)
	c.write(t, "in one write", b)
	var one [][]byte
	for i := range b {
		one = append(one, b[i:i+1])
	}
	c.write(t, "byte by byte", one...)
	for i := range b {
		c.write(t, fmt.Sprintf("split at %d", i), b[:i], b[i:])
		if len(b) < 400 {
			for j := i; j < len(b); j++ {
				c.write(t, fmt.Sprintf("split at %d and %d", i, j), b[:i], b[i:j], b[j:])
			}
		}
	}
}

func (c meterCase) write(t *testing.T, how string, parts ...[]byte) {
	t.Helper()
	m := llm.NewMeter(c.ct, c.o)
	for _, p := range parts {
		if n, err := m.Write(p); n != len(p) || err != nil {
			t.Fatalf("%s: Write gave %d, %v", how, n, err)
		}
		if m.Held() > m.Limit() {
			t.Fatalf("%s: holds %d bytes, more than %d", how, m.Held(), m.Limit())
		}
	}
	want := c.want
	want.Final = c.final()
	if u, ok := m.Usage(); u != want || ok != c.ok {
		t.Fatalf("%s: got %+v, %v; want %+v, %v", how, u, ok, want, c.ok)
	}
}

// TestPathsCheck: paths the Meter could not read are refused.
func TestPathsCheck(t *testing.T) {
	for _, c := range []struct {
		p    llm.Paths
		want string // "" for none
		why  string
	}{
		{llm.Paths{Total: []string{"usage", "n"}}, "", "one path is enough"},
		{llm.Paths{}, "at least one", "no path"},
		{llm.Paths{Input: []string{"usage", ""}}, "empty key", "an empty key"},
		{llm.Paths{Input: []string{"usage"}, Output: []string{"usage", "out"}}, "prefix", "a count cannot also hold one"},
		{llm.Paths{Input: []string{"u", "n"}, Output: []string{"u", "n"}}, "prefix", "two counts at one place"},
	} {
		err := c.p.Check()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Check() = %v, want %q", c.why, err, c.want)
		}
	}
}

// TestMeterPartway: an event stream's usage is what the events so far
// reported, and a JSON body's is there only once the body is whole.
func TestMeterPartway(t *testing.T) {
	m := llm.NewMeter(sseCT, llm.MeterOptions{})
	i := strings.Index(anthropicStream, "event: content_block_start")
	m.Write([]byte(anthropicStream[:i]))
	if u, ok := m.Usage(); !ok || u != (llm.Usage{Input: 175, Output: 1, Total: 176}) { // not Final: message_start's
		t.Fatalf("after message_start: %+v, %v", u, ok)
	}
	m.Write([]byte(anthropicStream[i:]))
	if u, ok := m.Usage(); !ok || u != (llm.Usage{Input: 175, Output: 15, Total: 190, Final: true}) {
		t.Fatalf("at the end: %+v, %v", u, ok)
	}

	j := llm.NewMeter(jsonCT, llm.MeterOptions{})
	j.Write([]byte(openaiChat[:100]))
	if u, ok := j.Usage(); ok {
		t.Fatalf("a part of a JSON body gave %+v", u)
	}
	j.Write([]byte(openaiChat[100:]))
	if u, ok := j.Usage(); !ok || u.Total != 29 {
		t.Fatalf("the whole JSON body gave %+v, %v", u, ok)
	}
}

// TestMeterHolds: however long a body, a line or an event, a Meter holds
// no more than its bound and a few bytes (the bound and the measure are
// checked on each write of TestMeter and FuzzMeter too).
func TestMeterHolds(t *testing.T) {
	const maxEvent, maxJSON = 1000, 4000
	o := llm.MeterOptions{MaxEvent: maxEvent, MaxJSON: maxJSON}
	big := bytes.Repeat([]byte("x"), 10*maxJSON)
	for _, c := range []struct {
		name, ct string
		parts    [][]byte
		most     int
	}{
		{"a JSON body, past its bound", jsonCT, [][]byte{big[:maxJSON-10], big[:20], big}, maxJSON},
		{"a long data line", sseCT, [][]byte{[]byte("data: "), big, big, []byte("\n\n")}, maxEvent + 6},
		{"a long data line in one write", sseCT, [][]byte{append([]byte("data: "), big...)}, maxEvent + 6},
		{"a long comment, held not at all", sseCT, [][]byte{[]byte(":"), big, big}, 0},
		{"a long other field, held not at all", sseCT, [][]byte{[]byte("event: "), big}, 0},
		{"many data lines", sseCT, [][]byte{bytes.Repeat([]byte("data: xxxxxxxxx\n"), 10*maxEvent)}, maxEvent + 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := llm.NewMeter(c.ct, o)
			for _, p := range c.parts {
				m.Write(p)
				if m.Held() > c.most {
					t.Fatalf("holds %d bytes, more than %d", m.Held(), c.most)
				}
			}
		})
	}
}

// stream is an OpenAI chat stream of about n bytes, of small chunks.
func stream(n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}` + "\n\ndata: [DONE]\n\n")
	return b.Bytes()
}

// TestMeterAllocs: past the first events, reading a stream allocates
// nothing, its usage event included.
func TestMeterAllocs(t *testing.T) {
	body := stream(64 << 10)
	m := llm.NewMeter(sseCT, llm.MeterOptions{})
	m.Write(body)
	allocs := testing.AllocsPerRun(10, func() {
		for p := body; len(p) > 0; p = p[min(len(p), 100):] {
			m.Write(p[:min(len(p), 100)])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations to read a stream again", allocs)
	}
	if u, ok := m.Usage(); !ok || u.Total != 11 {
		t.Fatalf("got %+v, %v", u, ok)
	}
}

// BenchmarkMeter reads a 1 MiB stream of small chunks, in writes of the
// size of a network read and of one byte more than an event.
func BenchmarkMeter(b *testing.B) {
	body := stream(1 << 20)
	for _, size := range []int{4096, 215} {
		b.Run(fmt.Sprintf("writes of %d", size), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				m := llm.NewMeter(sseCT, llm.MeterOptions{})
				for p := body; len(p) > 0; p = p[min(len(p), size):] {
					m.Write(p[:min(len(p), size)])
				}
				if u, ok := m.Usage(); !ok || u.Total != 11 {
					b.Fatal(u, ok)
				}
			}
		})
	}
}

// FuzzMeter: any body, written in any pieces, is read without panicking,
// within the bounds, and as it is when written in one piece.
func FuzzMeter(f *testing.F) {
	for _, s := range []string{openaiChatStream, responsesStream, anthropicStream, geminiStream,
		"\xEF\xBB\xBFdata: {\"usage\":\r\ndata: {\"input_tokens\":7}}\r\r:x\ndata\n\n"} {
		f.Add(true, []byte(s), uint64(0x9e3779b97f4a7c15))
	}
	for _, s := range []string{openaiChat, responses, anthropic, gemini} {
		f.Add(false, []byte(s), uint64(7))
	}
	f.Fuzz(func(t *testing.T, sse bool, body []byte, cuts uint64) {
		ct := jsonCT
		if sse {
			ct = sseCT
		}
		for _, paths := range []*llm.Paths{nil, geminiPaths.Paths} {
			fuzzMeter(t, ct, llm.MeterOptions{MaxEvent: 256, MaxJSON: 512, Paths: paths}, body, cuts)
		}
	})
}

// fuzzMeter checks that body, metered in one write and in parts cut by
// cuts, reports the same usage within the bounds.
func fuzzMeter(t *testing.T, ct string, o llm.MeterOptions, body []byte, cuts uint64) {
	whole := llm.NewMeter(ct, o)
	whole.Write(body)
	parts := llm.NewMeter(ct, o)
	for p := body; len(p) > 0; {
		n := min(len(p), 1+int(cuts%17))
		cuts = cuts/17 + cuts<<59
		parts.Write(p[:n])
		p = p[n:]
		if parts.Held() > parts.Limit() || parts.Limit() > 512 {
			t.Fatalf("holds %d of %d bytes", parts.Held(), parts.Limit())
		}
	}
	u, ok := whole.Usage()
	pu, pok := parts.Usage()
	if u != pu || ok != pok {
		t.Fatalf("paths %v: in one write %+v, %v; in parts %+v, %v", o.Paths, u, ok, pu, pok)
	}
	if !ok && u != (llm.Usage{}) || u.Input < 0 || u.Output < 0 || u.Total < 0 {
		t.Fatalf("paths %v: got %+v, %v", o.Paths, u, ok)
	}
}
