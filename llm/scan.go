package llm

import (
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is how deeply arrays and objects may nest, as in encoding/json.
const maxDepth = 10000

// scanner reads one JSON text from b, from i on, value by value, without
// allocating: strings come back as spans of b, values not wanted are
// skipped (and checked) in place.
type scanner struct {
	b []byte
	i int
}

// syntaxError is where and why b is not JSON.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

func (s *scanner) fail(msg string) error { return &syntaxError{off: s.i, msg: msg} }

// unexpected is the error for the byte at i, or for the end of b.
func (s *scanner) unexpected() error {
	if s.i >= len(s.b) {
		return s.fail("unexpected end of JSON")
	}
	return s.fail(fmt.Sprintf("invalid character %q", s.b[s.i]))
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte after whitespace, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// str reads a string at i and returns its raw contents (between the
// quotes) and whether they hold escapes.
func (s *scanner) str() (raw []byte, esc bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, s.unexpected()
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		for s.i < len(s.b) && plain[s.b[s.i]] {
			s.i++
		}
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, esc, nil
		case c == '\\':
			esc = true
			s.i++
			if s.i >= len(s.b) {
				return nil, false, s.unexpected()
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for k := 0; k < 4; k++ {
					if s.i >= len(s.b) || unhex(s.b[s.i]) < 0 {
						return nil, false, s.fail("invalid \\u escape")
					}
					s.i++
				}
			default:
				return nil, false, s.fail("invalid escape")
			}
		case c < 0x20:
			return nil, false, s.fail("control character in string")
		default:
			s.i++
		}
	}
	return nil, false, s.unexpected()
}

// plain tells the bytes that stand for themselves in a string.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// number reads a number at i and returns its text.
func (s *scanner) number() ([]byte, error) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return nil, s.unexpected()
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return nil, s.unexpected()
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return nil, s.unexpected()
		}
	}
	return s.b[start:s.i], nil
}

// digits skips a run of digits and reports whether there was one.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// literal reads true, false or null at i.
func (s *scanner) literal() error {
	for _, w := range [...]string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
			s.i += len(w)
			return nil
		}
	}
	return s.unexpected()
}

// key reads an object key and the colon after it.
func (s *scanner) key() (raw []byte, esc bool, err error) {
	s.ws()
	if raw, esc, err = s.str(); err != nil {
		return nil, false, err
	}
	if s.peek() != ':' {
		return nil, false, s.unexpected()
	}
	s.i++
	return raw, esc, nil
}

// next moves to the next key of an object whose '{' was read: more is
// false at its '}'. first tells whether no key was read yet.
func (s *scanner) next(first bool) (raw []byte, esc, more bool, err error) {
	switch c := s.peek(); {
	case c == '}':
		s.i++
		return nil, false, false, nil
	case c == ',' && !first:
		s.i++
	case first:
	default:
		return nil, false, false, s.unexpected()
	}
	raw, esc, err = s.key()
	return raw, esc, err == nil, err
}

// nextKey is next, with the key unescaped (into buf when it holds an
// escape, so that a key spelt with escapes is the key it spells).
func (s *scanner) nextKey(first bool, buf []byte) (key []byte, more bool, err error) {
	raw, esc, more, err := s.next(first)
	if esc {
		raw = unescape(buf[:0], raw)
	}
	return raw, more, err
}

// skip reads and checks one value of any kind, nested ones included,
// inside depth arrays and objects.
func (s *scanner) skip(depth int) error {
	var buf [64]byte
	open := buf[:0] // the '{' and '[' not yet closed
	for {
		// A value.
		switch c := s.peek(); c {
		case '{', '[':
			s.i++
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			if depth+len(open) == maxDepth {
				return s.fail("JSON nested too deeply")
			}
			if s.peek() == end {
				s.i++
				break
			}
			open = append(open, c)
			if c == '{' {
				if _, _, err := s.key(); err != nil {
					return err
				}
			}
			continue
		case '"':
			if _, _, err := s.str(); err != nil {
				return err
			}
		case 't', 'f', 'n':
			if err := s.literal(); err != nil {
				return err
			}
		default:
			if _, err := s.number(); err != nil {
				return err
			}
		}
		// After a value: close what ends here, or go on to the next one.
		for {
			if len(open) == 0 {
				return nil
			}
			top := open[len(open)-1]
			c := s.peek()
			if c == ',' {
				s.i++
				if top == '{' {
					if _, _, err := s.key(); err != nil {
						return err
					}
				}
				break
			}
			if top == '{' && c == '}' || top == '[' && c == ']' {
				s.i++
				open = open[:len(open)-1]
				continue
			}
			return s.unexpected()
		}
	}
}

// count reads the text of a number as a non-negative integer that fits
// an int64.
func count(num []byte) (int64, bool) {
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

// unescape appends the text of a string's raw contents to dst, as
// encoding/json decodes it: a lone surrogate, or a byte that is not
// UTF-8, becomes U+FFFD. raw must have been read by str.
func unescape(dst, raw []byte) []byte {
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
