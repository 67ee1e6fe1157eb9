package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// jsonTokensDecoded is jsonTokens as encoding/json reads the body: the
// reference the in-place reader is held to. Numbers are decoded as
// json.Number: any JSON number is readable (1e400 is to JavaScript).
func (f Fields) jsonTokensDecoded(body []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, ErrUnreadableBody
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ErrUnreadableBody
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, nil
	}
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.Token() // '{'
	var tokens []string
	for dec.More() {
		t, _ := dec.Token()
		name, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, ErrUnreadableBody
		}
		if !f.isName(name) {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, ErrMalformedKey
		}
		tokens = append(tokens, s)
	}
	return tokens, nil
}

// FuzzJSONTokens: the credentials of a JSON body, and why there are
// none, are what encoding/json reads in it.
func FuzzJSONTokens(f *testing.F) {
	for _, s := range []string{`{"access_token":"K","a":{"access_token":"X"}}`, `{"ACCESS_TOKEN":"K\u00e9"}`,
		`{"\u0061ccess_token":"K","access_token":"L"}`, `{"access_token":["K"]}`, `{"access_token":null}`,
		`[{"access_token":"K"}]`, `{"access_token":"K"`, `{"a":1} {"access_token":"K"}`, "{\"api_key\":\"\xff\"}",
		`{"access_token":1,"x":}`, ` "s" `, `{"access.token":"K","access token":"L","access[token":"M"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := DefaultFields.jsonTokens(body)
		want, werr := DefaultFields.jsonTokensDecoded(body)
		for _, kind := range []error{ErrUnreadableBody, ErrMalformedKey} {
			if errors.Is(err, kind) != errors.Is(werr, kind) {
				t.Fatalf("%q: error %v, encoding/json's %v", body, err, werr)
			}
		}
		if (err == nil) != (werr == nil) || err == nil && !slices.Equal(got, want) {
			t.Fatalf("%q: %q, %v; encoding/json reads %q, %v", body, got, err, want, werr)
		}
	})
}

// FuzzPlainParam: a name plainParam passes has no reading but itself.
func FuzzPlainParam(f *testing.F) {
	for _, s := range []string{"access_token", "Api-Key", "a.b", "a[b", " x", "x\x00y", "ſ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !plainParam(name) {
			return
		}
		if names := ParamNames(name); len(names) != 1 || names[0] != name || paramReading(name, true) != name {
			t.Fatalf("%q: readings %q and %q", name, names, paramReading(name, true))
		}
	})
}

// BenchmarkJSONTokens reads the credentials of a 16 KiB chat request, in
// place and as encoding/json reads it (the ratio is what reading it in
// place saves).
func BenchmarkJSONTokens(b *testing.B) {
	msg := `{"role":"user","content":"` + strings.Repeat(`Tell me about rate limits, \"quoted\" and all. `, 20) + `"},`
	body := []byte(`{"model":"gpt-4o","stream":true,"max_tokens":512,"messages":[` + strings.Repeat(msg, 16) + `{"role":"user","content":"go"}]}`)
	for _, c := range []struct {
		name string
		read func([]byte) ([]string, error)
	}{{"in place", DefaultFields.jsonTokens}, {"encoding/json", DefaultFields.jsonTokensDecoded}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.read(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
