package jsonscan_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/jsonscan"
)

// valid reports whether b is one JSON text, as the Scanner reads it.
func valid(b []byte) bool {
	s := jsonscan.Scanner{B: b}
	if s.Skip(0) != nil {
		return false
	}
	s.WS()
	return s.I == len(b)
}

// TestScanner: the Scanner takes exactly the texts encoding/json takes,
// and a string's text is encoding/json's.
func TestScanner(t *testing.T) {
	for _, c := range []struct {
		text string
		why  string
	}{
		{`{"a":[1,-0.5e+3,true,false,null,"x\u00e9\ud83d\ude00"]}`, "every kind of value"},
		{` {} `, "whitespace around"},
		{`{"a":1,}`, "a trailing comma"},
		{`{"a" 1}`, "a key without its colon"},
		{`[01]`, "a leading zero"},
		{`"\x"`, "an unknown escape"},
		{"\"a\tb\"", "a control character in a string"},
		{`"\ud800"`, "a lone surrogate (taken, as U+FFFD)"},
		{"\"\xff\"", "a byte that is not UTF-8 (taken, as U+FFFD)"},
		{`{"a":1}{}`, "two texts"},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), "nested deeper than encoding/json allows"},
		{strings.Repeat("[", 10000) + strings.Repeat("]", 10000), "nested as deep as it allows"},
	} {
		if got, want := valid([]byte(c.text)), json.Valid([]byte(c.text)); got != want {
			t.Errorf("%s: the Scanner takes it %v, encoding/json %v", c.why, got, want)
		}
	}
}

// FuzzScanner: on any input the Scanner agrees with encoding/json on
// what is JSON and on the text of a string.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\u00e9\ud83d\ude00\ud800x"`, `-0.1e-5`, "\"\xff\xfe\"", `[]`, `{"a":"\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := valid(b), json.Valid(b); got != want {
			t.Fatalf("%q: the Scanner takes it %v, encoding/json %v", b, got, want)
		}
		s := jsonscan.Scanner{B: b}
		var want string
		if s.Peek() != '"' || json.Unmarshal(b, &want) != nil {
			return // null unmarshals into a string too
		}
		raw, _, err := s.Str()
		if err != nil {
			t.Fatalf("%q: a string to encoding/json, not to the Scanner: %v", b, err)
		}
		if got := string(jsonscan.Unescape(nil, raw)); got != want {
			t.Fatalf("%q: the Scanner reads %q, encoding/json %q", b, got, want)
		}
	})
}
