package identity

import "strings"

// The classes of bytes the parsers here tell apart, as bits of
// byteClasses.
const (
	classAlnum      = 1 << iota // ASCII letters and digits
	classTchar                  // may appear in an RFC 9110 token
	classNode                   // may appear in an unquoted for= value
	classQuoted                 // may appear in a quoted string
	classBase64URL              // the base64url alphabet
	classObfuscated             // an obfuscated identifier, after its '_'
	classOWS                    // optional whitespace: SP and HTAB
	classVisible                // visible ASCII, 0x21 to 0x7e
	classDot                    // '.', which separates a JWS's parts
)

// byteClasses holds, for each byte, the classes it belongs to.
var byteClasses = newByteClasses()

// newByteClasses returns byteClasses: each class the bytes of its
// sets, classVisible the visible ASCII bytes, and classQuoted HTAB, SP,
// visible ASCII and obs-text (every byte from SP on but DEL).
func newByteClasses() [256]uint16 {
	const alnum = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	sets := []struct {
		classes uint16
		bytes   string
	}{
		{classAlnum | classTchar | classNode | classBase64URL | classObfuscated, alnum},
		{classTchar | classNode, "!#$%&'*+-.^_`|~"},
		// The ':', '[' and ']' that real proxies send unquoted
		// although RFC 7239 asks for quotes.
		{classNode, ":[]"},
		{classBase64URL, "-_"},
		{classObfuscated, "._-"},
		{classOWS | classQuoted, " \t"},
		{classDot, "."},
	}
	var t [256]uint16
	for _, set := range sets {
		for i := range len(set.bytes) {
			t[set.bytes[i]] |= set.classes
		}
	}
	for c := 0x21; c < 0x100; c++ {
		t[c] |= classQuoted
	}
	for c := 0x21; c < 0x7f; c++ {
		t[c] |= classVisible
	}
	t[0x7f] &^= classQuoted
	return t
}

// is reports whether c belongs to one of classes.
func is(c byte, classes uint16) bool { return byteClasses[c]&classes != 0 }

// trimOWS returns s without its leading and trailing optional whitespace.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// isOWS reports whether c is optional whitespace: SP or HTAB.
func isOWS(c byte) bool { return is(c, classOWS) }

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool { return is(c, classAlnum) }

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool { return is(c, classTchar) }

// isNodeChar reports whether c may appear in an unquoted for= value: token
// characters plus the ':', '[' and ']' that real proxies send unquoted
// although RFC 7239 asks for quotes.
func isNodeChar(c byte) bool { return is(c, classNode) }

// isQuotedChar reports whether c may appear in a quoted string, directly
// or escaped: HTAB, SP, visible ASCII and obs-text.
func isQuotedChar(c byte) bool { return is(c, classQuoted) }

// isBase64URL reports whether c is in the base64url alphabet.
func isBase64URL(c byte) bool { return is(c, classBase64URL) }
