// Package llm reads what an LLM API call costs in tokens: ParseRequest
// reads, from a request body, the model and the most output it may
// cost, for an estimate reserved before the call; a Meter reads, from
// the response body as it streams by, the usage the upstream reported,
// to settle at. Both know the OpenAI chat completions and responses APIs
// and the Anthropic messages API, and need no telling which one it is.
package llm

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/jsonscan"
)

// ErrBadRequest is wrapped by every error ParseRequest returns for a
// body it refuses.
var ErrBadRequest = errors.New("llm: bad request body")

// DefaultFields are the fields read for Request.MaxOutput when
// RequestOptions.Fields is empty: the OpenAI chat completions ones (the
// current name, then the deprecated one, which is also Anthropic's) and
// the OpenAI responses one.
var DefaultFields = []string{"max_completion_tokens", "max_tokens", "max_output_tokens"}

// maxFields is how many fields RequestOptions.Fields may name.
const maxFields = 32

// RequestOptions tells ParseRequest what to read.
type RequestOptions struct {
	// Fields names the top-level integer fields that bound the output,
	// in order: the first one present gives Request.MaxOutput. Empty
	// means DefaultFields. They must be distinct, and neither "model"
	// nor "stream".
	Fields []string
}

// Request is what ParseRequest read from a request body.
type Request struct {
	Model string // the model named, "" when none
	// MaxOutput is the value of the first of the fields present, or -1
	// when none is.
	MaxOutput int64
	// Choices is how many answers the request asks for (OpenAI's "n"):
	// each may use MaxOutput. 1 when it names none.
	Choices int64
	Stream  bool  // whether a streamed response was asked for
	Bytes   int64 // the length of the body
}

// ParseRequest reads a JSON request body of the OpenAI chat completions
// or responses API or of the Anthropic messages API, in one pass that
// allocates next to nothing however large the body is.
//
// It is strict, so that what it reads is what any upstream reads: it
// refuses, with an error wrapping ErrBadRequest, a body that is not
// exactly one JSON object; a key it reads that appears twice, or in
// another case ("Model": Go's encoding/json takes the last of twins and
// matches keys case-insensitively, other parsers take the first or match
// exactly); a model that is not a string, a stream that is not a
// boolean, and a field that is not a non-negative integer fitting an
// int64 (1e3, 1.5, "100", -1 are refused; 0 is read). A null is read as
// the key being absent. Invalid options are an error that does not wrap
// ErrBadRequest.
func ParseRequest(body []byte, o RequestOptions) (Request, error) {
	fields := o.Fields
	if len(fields) == 0 {
		fields = DefaultFields
	}
	if err := checkFields(fields); err != nil {
		return Request{}, err
	}
	// names[0] is model, names[1] stream, names[2] n, then the fields.
	const model, stream, choices, fixed = 0, 1, 2, 3
	var namesBuf [maxFields + fixed]string
	names := append(append(namesBuf[:0], "model", "stream", "n"), fields...)
	var vals [maxFields]int64
	var seen, present uint64 // bit k: names[k] was read; and was not null

	r := Request{MaxOutput: -1, Choices: 1, Bytes: int64(len(body))}
	s := jsonscan.Scanner{B: body}
	if s.Peek() != '{' {
		if s.I >= len(s.B) {
			return Request{}, bad("the body is empty, not a JSON object")
		}
		return Request{}, bad("the body is not a JSON object")
	}
	s.I++
	var keyBuf [64]byte
	for first := true; ; first = false {
		key, more, err := s.NextKey(first, keyBuf[:])
		if err != nil {
			return Request{}, bad("not valid JSON: %v", err)
		}
		if !more {
			break
		}
		k := -1
		for j, n := range names {
			if string(key) == n || len(key) >= len(n) && bytes.EqualFold(key, []byte(n)) {
				k = j
				break
			}
		}
		if k < 0 {
			if err := s.Skip(1); err != nil {
				return Request{}, bad("not valid JSON: %v", err)
			}
			continue
		}
		name := names[k]
		if string(key) != name {
			return Request{}, bad("key %q differs from %q only in case", string(key), name)
		}
		if seen&(1<<k) != 0 {
			return Request{}, bad("duplicate key %q", name)
		}
		seen |= 1 << k
		c := s.Peek()
		if c == 'n' { // null, the only literal starting so
			if err := s.Literal(); err != nil {
				return Request{}, bad("not valid JSON: %v", err)
			}
			continue
		}
		present |= 1 << k
		switch {
		case k == model:
			if c != '"' {
				return Request{}, wrong(&s, name, "a string")
			}
			raw, esc, err := s.Str()
			if err != nil {
				return Request{}, bad("not valid JSON: %v", err)
			}
			if !utf8.Valid(raw) {
				return Request{}, bad("model is not valid UTF-8")
			}
			if esc {
				r.Model = string(jsonscan.Unescape(nil, raw))
			} else {
				r.Model = string(raw)
			}
		case k == stream:
			if c != 't' && c != 'f' {
				return Request{}, wrong(&s, name, "a boolean")
			}
			if err := s.Literal(); err != nil {
				return Request{}, bad("not valid JSON: %v", err)
			}
			r.Stream = c == 't'
		default:
			if c != '-' && (c < '0' || c > '9') {
				return Request{}, wrong(&s, name, "a non-negative integer")
			}
			num, err := s.Number()
			if err != nil {
				return Request{}, bad("not valid JSON: %v", err)
			}
			n, ok := jsonscan.Count(num)
			if !ok {
				return Request{}, bad("%s is %s, not a non-negative integer that fits 64 bits", name, clip(num))
			}
			if k == choices {
				r.Choices = n
				continue
			}
			vals[k-fixed] = n
		}
	}
	if s.Peek(); s.I < len(s.B) {
		return Request{}, bad("data after the JSON object at byte %d", s.I)
	}
	for j := range fields {
		if present&(1<<(j+fixed)) != 0 {
			r.MaxOutput = vals[j]
			break
		}
	}
	return r, nil
}

// wrong is the error for a value of the wrong kind at i for name.
func wrong(s *jsonscan.Scanner, name, want string) error {
	kind := "not JSON"
	switch c := s.Peek(); {
	case c == '{':
		kind = "an object"
	case c == '[':
		kind = "an array"
	case c == '"':
		kind = "a string"
	case c == 't' || c == 'f':
		kind = "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		kind = "a number"
	}
	return bad("%s is %s, not %s", name, kind, want)
}

func checkFields(fields []string) error {
	if len(fields) > maxFields {
		return fmt.Errorf("llm: RequestOptions.Fields names %d fields, more than %d", len(fields), maxFields)
	}
	for i, f := range fields {
		if f == "" || f == "model" || f == "stream" || f == "n" {
			return fmt.Errorf("llm: RequestOptions.Fields: %q cannot be a field", f)
		}
		for _, g := range fields[:i] {
			if f == g {
				return fmt.Errorf("llm: RequestOptions.Fields names %q twice", f)
			}
		}
	}
	return nil
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, args...)...)
}

// clip is b for an error message, cut short when long.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}
