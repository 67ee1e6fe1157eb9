package llm

import (
	"bytes"

	"github.com/tollgate/tollgate/internal/jsonscan"
)

// A picker reads a JSON object written to it in parts and keeps, of its
// members, only those whose key is one of keys: the rest of the body
// passes through a small state machine that follows its strings and
// nesting, and is never held. So a body of any length costs the meter
// what its usage members take, at most limit bytes.
//
// It checks the body's structure (one object, its strings closed and
// its brackets matched, nothing after it), not the values it passes
// over; the members it keeps are parsed whole, as strictly as ever.
type picker struct {
	keys  []string         // the keys kept (unescaped)
	limit int              // the most buf may hold
	buf   []byte           // '{' and each member kept, followed by ','
	key   [maxPickKey]byte // the raw key being read
	keyN  int              // its length so far, or -1 when longer than the array

	state      uint8
	depth      int  // arrays and objects open, the top object included
	inStr, esc bool // in a string; just after its backslash
	keep       bool // the member being read is kept
	bad        bool // the body is not one JSON object
	over       bool // the members kept are longer than limit
}

// The states of a picker.
const (
	pickBefore   uint8 = iota // before the top object
	pickKey                   // in the top object, where a key (or '}') is next
	pickInKey                 // in a key of the top object
	pickAfterKey              // after a key, where ':' is next
	pickValue                 // in a member's value
	pickAfter                 // after the top object
)

// maxPickKey bounds the key held to compare: a longer key is no key
// kept (theirs are short).
const maxPickKey = 64

func newPicker(keys []string, limit int) *picker {
	return &picker{keys: keys, limit: limit, buf: append(make([]byte, 0, 64), '{')}
}

// write reads p, the next bytes of the body.
func (k *picker) write(p []byte) {
	for len(p) > 0 && !k.bad {
		if k.inStr {
			p = k.str(p)
			continue
		}
		c := p[0]
		p = p[1:]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			k.hold(c)
			continue
		}
		switch {
		case k.state == pickBefore:
			k.bad = c != '{'
			k.state, k.depth = pickKey, 1
		case k.state == pickAfter:
			k.bad = true
		case k.depth > 1:
			k.nested(c)
		case k.state == pickKey:
			switch c {
			case '"':
				k.inStr, k.state, k.keyN = true, pickInKey, 0
			case '}':
				k.state, k.depth = pickAfter, 0
			default:
				k.bad = true
			}
		case k.state == pickAfterKey:
			k.bad = c != ':'
			k.state, k.keep = pickValue, k.kept()
			if k.keep {
				k.hold('"')
				k.holdAll(k.key[:k.keyN])
				k.holdAll([]byte(`":`))
			}
		default: // a value of the top object
			switch c {
			case ',', '}':
				if k.keep {
					k.hold(',')
				}
				k.keep, k.state = false, pickKey
				if c == '}' {
					k.state, k.depth = pickAfter, 0
				}
			default:
				k.nested(c)
			}
		}
	}
}

// nested reads c, outside strings, within a value.
func (k *picker) nested(c byte) {
	switch c {
	case '{', '[':
		k.depth++
	case '}', ']':
		k.depth--
	case '"':
		k.inStr = true
	}
	k.hold(c)
}

// str reads p within a string, up to its end, and returns the rest.
func (k *picker) str(p []byte) []byte {
	if k.esc {
		k.esc = false
		k.text(p[:1])
		return p[1:]
	}
	i := bytes.IndexAny(p, `"\`)
	if i < 0 {
		k.text(p)
		return nil
	}
	k.text(p[:i])
	switch p[i] {
	case '\\':
		k.esc = true
		k.text(p[i : i+1])
	default:
		k.inStr = false
		if k.state == pickInKey {
			k.state = pickAfterKey
		} else {
			k.hold('"')
		}
	}
	return p[i+1:]
}

// text reads b, a part of a string: a key's, or a value's.
func (k *picker) text(b []byte) {
	if k.state == pickInKey {
		if k.keyN >= 0 && k.keyN+len(b) <= maxPickKey {
			k.keyN += copy(k.key[k.keyN:], b)
		} else {
			k.keyN = -1 // no key kept is this long
		}
		return
	}
	k.holdAll(b)
}

// kept reports whether the key just read is one of keys.
func (k *picker) kept() bool {
	if k.keyN < 0 {
		return false
	}
	key := k.key[:k.keyN]
	var buf [maxPickKey]byte
	if bytes.IndexByte(key, '\\') >= 0 {
		key = jsonscan.Unescape(buf[:0], key)
	}
	for _, want := range k.keys {
		if string(key) == want {
			return true
		}
	}
	return false
}

func (k *picker) hold(c byte) {
	if !k.keep || k.over {
		return
	}
	if len(k.buf) >= k.limit {
		k.over, k.buf = true, k.buf[:1]
		return
	}
	k.buf = append(grow(k.buf, 1, k.limit), c)
}

func (k *picker) holdAll(b []byte) {
	if !k.keep || k.over {
		return
	}
	if len(b) > k.limit-len(k.buf) {
		k.over, k.buf = true, k.buf[:1]
		return
	}
	k.buf = appendBounded(k.buf, b, k.limit)
}

// object returns the members kept as one JSON object, and whether the
// body was one whole JSON object whose kept members fit.
func (k *picker) object() ([]byte, bool) {
	if k.bad || k.over || k.state != pickAfter {
		return nil, false
	}
	if n := len(k.buf); n > 1 {
		k.buf[n-1] = '}' // the last member's ','
		return k.buf, true
	}
	return []byte("{}"), true
}
