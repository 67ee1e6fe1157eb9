// Package jsonscan reads JSON in place, value by value, without
// allocating, as strictly as encoding/json: the one reader of request and
// response bodies that a decision depends on (credentials in a body, an
// LLM call's bounds and usage), so that they all read a body alike.
package jsonscan

import (
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how deeply arrays and objects may nest, as in encoding/json.
const MaxDepth = 10000

// Scanner reads one JSON text from B, from I on, value by value, without
// allocating: strings come back as spans of B, values not wanted are
// skipped (and checked) in place.
type Scanner struct {
	B []byte // the text
	I int    // where the next read starts
}

// syntaxError is where and why b is not JSON.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

func (s *Scanner) Fail(msg string) error { return &syntaxError{off: s.I, msg: msg} }

// Unexpected is the error for the byte  at I, or for the end of b.
func (s *Scanner) Unexpected() error {
	if s.I >= len(s.B) {
		return s.Fail("unexpected end of JSON")
	}
	return s.Fail(fmt.Sprintf("invalid character %q", s.B[s.I]))
}

// WS skips JSON whitespace.
func (s *Scanner) WS() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Peek is the next byte after whitespace, or 0 at the end.
func (s *Scanner) Peek() byte {
	s.WS()
	if s.I >= len(s.B) {
		return 0
	}
	return s.B[s.I]
}

// Str reads a string at I and returns its raw contents (between the
// quotes) and whether they hold escapes.
func (s *Scanner) Str() (raw []byte, esc bool, err error) {
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return nil, false, s.Unexpected()
	}
	s.I++
	start := s.I
	for s.I < len(s.B) {
		for s.I < len(s.B) && plain[s.B[s.I]] {
			s.I++
		}
		if s.I >= len(s.B) {
			break
		}
		c := s.B[s.I]
		switch {
		case c == '"':
			raw = s.B[start:s.I]
			s.I++
			return raw, esc, nil
		case c == '\\':
			esc = true
			s.I++
			if s.I >= len(s.B) {
				return nil, false, s.Unexpected()
			}
			switch s.B[s.I] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.I++
			case 'u':
				s.I++
				for k := 0; k < 4; k++ {
					if s.I >= len(s.B) || unhex(s.B[s.I]) < 0 {
						return nil, false, s.Fail("invalid \\u escape")
					}
					s.I++
				}
			default:
				return nil, false, s.Fail("invalid escape")
			}
		case c < 0x20:
			return nil, false, s.Fail("control character in string")
		default:
			s.I++
		}
	}
	return nil, false, s.Unexpected()
}

// plain tells the bytes that stand for themselves in a string.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Number reads a number at I and returns its text.
func (s *Scanner) Number() ([]byte, error) {
	start := s.I
	if s.I < len(s.B) && s.B[s.I] == '-' {
		s.I++
	}
	switch {
	case s.I < len(s.B) && s.B[s.I] == '0':
		s.I++
	case s.I < len(s.B) && s.B[s.I] >= '1' && s.B[s.I] <= '9':
		s.digits()
	default:
		return nil, s.Unexpected()
	}
	if s.I < len(s.B) && s.B[s.I] == '.' {
		s.I++
		if !s.digits() {
			return nil, s.Unexpected()
		}
	}
	if s.I < len(s.B) && (s.B[s.I] == 'e' || s.B[s.I] == 'E') {
		s.I++
		if s.I < len(s.B) && (s.B[s.I] == '+' || s.B[s.I] == '-') {
			s.I++
		}
		if !s.digits() {
			return nil, s.Unexpected()
		}
	}
	return s.B[start:s.I], nil
}

// digits skips a run of digits and reports whether there was one.
func (s *Scanner) digits() bool {
	start := s.I
	for s.I < len(s.B) && s.B[s.I] >= '0' && s.B[s.I] <= '9' {
		s.I++
	}
	return s.I > start
}

// Literal reads true, false or null at I.
func (s *Scanner) Literal() error {
	for _, w := range [...]string{"true", "false", "null"} {
		if len(s.B)-s.I >= len(w) && string(s.B[s.I:s.I+len(w)]) == w {
			s.I += len(w)
			return nil
		}
	}
	return s.Unexpected()
}

// Key reads an object key and the colon after it.
func (s *Scanner) Key() (raw []byte, esc bool, err error) {
	s.WS()
	if raw, esc, err = s.Str(); err != nil {
		return nil, false, err
	}
	if s.Peek() != ':' {
		return nil, false, s.Unexpected()
	}
	s.I++
	return raw, esc, nil
}

// Next moves to the next key of an object whose '{' was read: more is
// false at its '}'. first tells whether no key was read yet.
func (s *Scanner) Next(first bool) (raw []byte, esc, more bool, err error) {
	switch c := s.Peek(); {
	case c == '}':
		s.I++
		return nil, false, false, nil
	case c == ',' && !first:
		s.I++
	case first:
	default:
		return nil, false, false, s.Unexpected()
	}
	raw, esc, err = s.Key()
	return raw, esc, err == nil, err
}

// NextKey is Next, with the key as encoding/json decodes it: unescaped
// into buf when it holds an escape or a byte that is not UTF-8, so that a
// key spelt with escapes is the key it spells, and one of bytes that are
// not UTF-8 the key of U+FFFD that every decoder reads.
func (s *Scanner) NextKey(first bool, buf []byte) (key []byte, more bool, err error) {
	raw, esc, more, err := s.Next(first)
	if esc || !utf8.Valid(raw) {
		raw = Unescape(buf[:0], raw)
	}
	return raw, more, err
}

// Skip reads and checks one value of any kind, nested ones included,
// inside depth arrays and objects.
func (s *Scanner) Skip(depth int) error {
	var buf [64]byte
	open := buf[:0] // the '{' and '[' not yet closed
	for {
		// A value.
		switch c := s.Peek(); c {
		case '{', '[':
			s.I++
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			if depth+len(open) == MaxDepth {
				return s.Fail("JSON nested too deeply")
			}
			if s.Peek() == end {
				s.I++
				break
			}
			open = append(open, c)
			if c == '{' {
				if _, _, err := s.Key(); err != nil {
					return err
				}
			}
			continue
		case '"':
			if _, _, err := s.Str(); err != nil {
				return err
			}
		case 't', 'f', 'n':
			if err := s.Literal(); err != nil {
				return err
			}
		default:
			if _, err := s.Number(); err != nil {
				return err
			}
		}
		// After a value: close what ends here, or go on to the next one.
		for {
			if len(open) == 0 {
				return nil
			}
			top := open[len(open)-1]
			c := s.Peek()
			if c == ',' {
				s.I++
				if top == '{' {
					if _, _, err := s.Key(); err != nil {
						return err
					}
				}
				break
			}
			if top == '{' && c == '}' || top == '[' && c == ']' {
				s.I++
				open = open[:len(open)-1]
				continue
			}
			return s.Unexpected()
		}
	}
}

// Count reads the text of a number as a non-negative integer that fits
// an int64.
func Count(num []byte) (int64, bool) {
	if len(num) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// Unescape appends the text of a string's raw contents to dst, as
// encoding/json decodes it: a lone surrogate, or a byte that is not
// UTF-8, becomes U+FFFD. raw must have been read by Str.
func Unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			r, n := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw[i+1:])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2 = hex4(raw[i+3:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, raw[i])
		}
		i++
	}
	return dst
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r = r<<4 | rune(unhex(c))
	}
	return r
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
