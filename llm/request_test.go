package llm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/llm"
)

// TestParseRequest: the model, output bound and stream of the bodies of
// each API, and every body that could be read two ways refused.
func TestParseRequest(t *testing.T) {
	deep := strings.Repeat("[", 9999) + strings.Repeat("]", 9999)
	tooDeep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	for _, c := range []struct {
		name, body string
		fields     []string
		want       llm.Request // Bytes is filled in, and Choices when 0 (none named: 1)
		err        string      // a part of the error, "" for none
	}{
		{name: "OpenAI chat, its current field",
			body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`,
			want: llm.Request{Model: "gpt-4o", MaxOutput: 100, Stream: true}},
		{name: "Anthropic messages, max_tokens",
			body: `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			want: llm.Request{Model: "claude-sonnet-4-5", MaxOutput: 1024}},
		{name: "OpenAI responses, max_output_tokens",
			body: "{\n  \"model\": \"gpt-5\",\n  \"input\": \"hi\",\n  \"max_output_tokens\": 50,\n  \"stream\": false\n}\n",
			want: llm.Request{Model: "gpt-5", MaxOutput: 50}},
		{name: "no field: MaxOutput -1", body: `{"model":"m"}`, want: llm.Request{Model: "m", MaxOutput: -1}},
		{name: "n answers, each bounded by max_tokens", body: `{"model":"m","n":5,"max_tokens":100}`, want: llm.Request{Model: "m", MaxOutput: 100, Choices: 5}},
		{name: "n given twice", body: `{"n":1,"n":50}`, err: `duplicate key "n"`},
		{name: "n in another case", body: `{"N":50}`, err: "only in case"},
		{name: "n not a whole number", body: `{"n":"5"}`, err: "non-negative integer"},
		{name: "empty object", body: ` { } `, want: llm.Request{MaxOutput: -1}},
		{name: "0 is a bound", body: `{"max_tokens":0}`, want: llm.Request{MaxOutput: 0}},
		{name: "the largest int64", body: `{"max_tokens":9223372036854775807}`, want: llm.Request{MaxOutput: 9223372036854775807}},
		{name: "the first field of the list wins, wherever it is in the body",
			body: `{"max_tokens":10,"max_completion_tokens":20}`, want: llm.Request{MaxOutput: 20}},
		{name: "a null field is absent: the next one counts",
			body: `{"max_completion_tokens":null,"max_tokens":30,"stream":null,"model":null}`, want: llm.Request{MaxOutput: 30}},
		{name: "other fields given",
			body: `{"max_tokens":10,"max_tokens_to_sample":7}`, fields: []string{"max_tokens_to_sample"}, want: llm.Request{MaxOutput: 7}},
		{name: "a key not read may come twice",
			body: `{"messages":[],"messages":[1],"model":"m"}`, want: llm.Request{Model: "m", MaxOutput: -1}},
		{name: "a model's escapes are decoded",
			body: `{"model":"gpt\u002d4\ud83d\ude00\n"}`, want: llm.Request{Model: "gpt-4\U0001F600\n", MaxOutput: -1}},
		{name: "values not read are skipped, all kinds, deep",
			body: `{"a":[1,-2.5e+3,0.0,1E9,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9",{},[],{"b":{"c":[[]]}}],"d":` + deep + `,"max_tokens":5}`,
			want: llm.Request{MaxOutput: 5}},
		{name: "a key read, escaped, is that key", body: `{"max_tok\u0065ns":9}`, want: llm.Request{MaxOutput: 9}},

		{name: "twin model: Go reads the last, others the first", body: `{"model":"cheap","model":"dear"}`, err: `duplicate key "model"`},
		{name: "twin field", body: `{"max_tokens":1,"messages":[],"max_tokens":100000}`, err: `duplicate key "max_tokens"`},
		{name: "twin stream", body: `{"stream":false,"stream":true}`, err: `duplicate key "stream"`},
		{name: "a twin null is still a twin", body: `{"max_tokens":null,"max_tokens":1}`, err: `duplicate key "max_tokens"`},
		{name: "a twin hidden by an escape", body: `{"model":"cheap","mod\u0065l":"dear"}`, err: `duplicate key "model"`},
		{name: "a key in another case: Go's encoding/json matches it", body: `{"max_tokens":1,"Max_Tokens":100000}`, err: `differs from "max_tokens" only in case`},
		{name: "a key in another case, alone", body: `{"MODEL":"dear"}`, err: `differs from "model" only in case`},
		{name: "the Kelvin sign folds to k", body: "{\"max_to\u212aens\":5}", err: `only in case`},
		{name: "an exponent", body: `{"max_tokens":1e3}`, err: "max_tokens is 1e3, not a non-negative integer"},
		{name: "a fraction", body: `{"max_tokens":1.5}`, err: "max_tokens is 1.5"},
		{name: "a zero fraction", body: `{"max_tokens":100.0}`, err: "max_tokens is 100.0"},
		{name: "a string", body: `{"max_tokens":"100"}`, err: "max_tokens is a string, not a non-negative integer"},
		{name: "a negative", body: `{"max_tokens":-1}`, err: "max_tokens is -1"},
		{name: "minus zero", body: `{"max_tokens":-0}`, err: "max_tokens is -0"},
		{name: "too large for int64", body: `{"max_tokens":9223372036854775808}`, err: "max_tokens is 9223372036854775808"},
		{name: "huge", body: `{"max_tokens":` + strings.Repeat("9", 100) + `}`, err: "max_tokens is 9999"},
		{name: "a boolean field", body: `{"max_output_tokens":true}`, err: "max_output_tokens is a boolean"},
		{name: "an object field", body: `{"max_output_tokens":{}}`, err: "max_output_tokens is an object"},
		{name: "a number model", body: `{"model":4}`, err: "model is a number, not a string"},
		{name: "an array model", body: `{"model":["a"]}`, err: "model is an array, not a string"},
		{name: "a string stream", body: `{"stream":"true"}`, err: "stream is a string, not a boolean"},
		{name: "a number stream", body: `{"stream":1}`, err: "stream is a number, not a boolean"},
		{name: "a model not UTF-8", body: "{\"model\":\"a\xffb\"}", err: "model is not valid UTF-8"},
		{name: "a second object after", body: `{} {}`, err: "data after the JSON object at byte 3"},
		{name: "a byte after", body: `{"model":"m"}x`, err: "data after the JSON object"},
		{name: "an array", body: `[{"model":"m"}]`, err: "not a JSON object"},
		{name: "a string", body: `"model"`, err: "not a JSON object"},
		{name: "null", body: `null`, err: "not a JSON object"},
		{name: "empty", body: ``, err: "empty"},
		{name: "blank", body: " \n", err: "empty"},
		{name: "a byte order mark", body: "\xEF\xBB\xBF{}", err: "not a JSON object"},
		{name: "cut short", body: `{"model":"m","messages":[`, err: "unexpected end of JSON"},
		{name: "a trailing comma", body: `{"model":"m",}`, err: "not valid JSON"},
		{name: "a bad value skipped", body: `{"a":tru}`, err: "not valid JSON"},
		{name: "a bad number skipped", body: `{"a":01}`, err: "not valid JSON"},
		{name: "a bad number read", body: `{"max_tokens":-}`, err: "not valid JSON"},
		{name: "a control character in a string", body: "{\"a\":\"\x01\"}", err: "control character"},
		{name: "a bad escape", body: `{"a":"\x"}`, err: "invalid escape"},
		{name: "a bad \\u escape", body: `{"a":"\u12g4"}`, err: "invalid \\u escape"},
		{name: "a missing colon", body: `{"a" 1}`, err: "not valid JSON"},
		{name: "a key not a string", body: `{a:1}`, err: "not valid JSON"},
		{name: "a missing comma in an array", body: `{"a":[1 2]}`, err: "not valid JSON"},
		{name: "a mismatched bracket", body: `{"a":[1}`, err: "not valid JSON"},
		{name: "nested deeper than encoding/json allows", body: `{"a":` + tooDeep + `}`, err: "nested too deeply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := llm.ParseRequest([]byte(c.body), llm.RequestOptions{Fields: c.fields})
			if c.err != "" {
				if !errors.Is(err, llm.ErrBadRequest) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an ErrBadRequest with %q", got, err, c.err)
				}
				if got != (llm.Request{}) {
					t.Errorf("a refused body gave %+v", got)
				}
				return
			}
			c.want.Bytes = int64(len(c.body))
			if c.want.Choices == 0 {
				c.want.Choices = 1
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
			agrees(t, []byte(c.body), c.fields, got)
		})
	}
}

// TestParseRequestOptions: fields that cannot be read are an error of
// the caller's, not of the body's.
func TestParseRequestOptions(t *testing.T) {
	for _, c := range []struct {
		name   string
		fields []string
	}{
		{"the model is no field", []string{"model"}},
		{"the stream is no field", []string{"max_tokens", "stream"}},
		{"an empty name", []string{""}},
		{"a name twice", []string{"max_tokens", "max_tokens"}},
		{"too many", strings.Split(strings.Repeat("f,", 40)+"g", ",")},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := llm.ParseRequest([]byte(`{}`), llm.RequestOptions{Fields: c.fields})
			if err == nil || errors.Is(err, llm.ErrBadRequest) {
				t.Fatalf("got %v, want an error of the options", err)
			}
		})
	}
}

// agrees fails t unless encoding/json reads body as r says.
func agrees(t *testing.T, body []byte, fields []string, r llm.Request) {
	t.Helper()
	if !json.Valid(body) {
		t.Fatalf("accepted %q, which encoding/json finds invalid", body)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("accepted %q, which encoding/json does not read as an object: %v", body, err)
	}
	var model string
	var stream bool
	_ = json.Unmarshal(m["model"], &model)
	_ = json.Unmarshal(m["stream"], &stream)
	want := int64(-1)
	if len(fields) == 0 {
		fields = llm.DefaultFields
	}
	for _, f := range fields {
		var n *int64
		if err := json.Unmarshal(m[f], &n); err == nil && n != nil {
			want = *n
			break
		}
	}
	if model != r.Model || stream != r.Stream || want != r.MaxOutput {
		t.Fatalf("read %q as %+v; encoding/json reads model %q, stream %v, bound %d", body, r, model, stream, want)
	}
}

// FuzzParseRequest: any body is read without panicking, and one that is
// accepted is JSON that encoding/json reads the same way, even into a
// struct, which matches keys in any case.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100,"stream":true}`,
		`{"model":"m","max_tokens":1024,"messages":[{"content":[{"type":"text","text":"x"}]}]}`,
		`{"model":"m","input":"hi","max_output_tokens":50}`,
		`{"max_tok\u0065ns":9,"model":"\ud83d\ude00"}`,
		`{"max_tokens":null,"stream":null}`,
		`{"Model":"x"}`, `{"a":[1,-2.5e+3,true,null,{"b":"\n"}]}`, `{} `, `[`,
	} {
		f.Add([]byte(s))
	}
	type strict struct {
		Model               *string
		Stream              *bool
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxOutputTokens     *int64 `json:"max_output_tokens"`
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := llm.ParseRequest(body, llm.RequestOptions{})
		if err != nil {
			if !errors.Is(err, llm.ErrBadRequest) {
				t.Fatalf("%q: an error not ErrBadRequest: %v", body, err)
			}
			if json.Valid(body) && strings.Contains(err.Error(), "not valid JSON") {
				t.Fatalf("%q is valid JSON, but: %v", body, err)
			}
			return
		}
		if r.Bytes != int64(len(body)) {
			t.Fatalf("Bytes %d of a body of %d", r.Bytes, len(body))
		}
		agrees(t, body, nil, r)
		var s strict
		if err := json.Unmarshal(body, &s); err != nil {
			// A value not read is of no matter to the struct; a string
			// that is not UTF-8 is replaced, not refused.
			var ute *json.UnmarshalTypeError
			if !errors.As(err, &ute) {
				t.Fatalf("%q: %v", body, err)
			}
			return
		}
		bound := int64(-1)
		for _, n := range []*int64{s.MaxCompletionTokens, s.MaxTokens, s.MaxOutputTokens} {
			if n != nil {
				bound = *n
				break
			}
		}
		if s.Model != nil && *s.Model != r.Model || s.Stream != nil && *s.Stream != r.Stream || bound != r.MaxOutput {
			t.Fatalf("%q read as %+v; into a struct, encoding/json reads %+v", body, r, s)
		}
	})
}

// BenchmarkParseRequest reads a body of 1 MiB, nearly all of it messages.
func BenchmarkParseRequest(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"model":"gpt-4o","messages":[`)
	for body.Len() < 1<<20 {
		body.WriteString(`{"role":"user","content":"The quick brown fox jumps over the lazy dog, \"again\" and again.\n"},`)
		body.WriteString(`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"image_url","image_url":{"url":"data:x"}}],"n":[1,2.5,-3e2,true,null]},`)
	}
	body.WriteString(`{"role":"user","content":"end"}],"max_completion_tokens":4096,"stream":true}`)
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		r, err := llm.ParseRequest(body.Bytes(), llm.RequestOptions{})
		if err != nil || r.MaxOutput != 4096 {
			b.Fatal(r, err)
		}
	}
}
