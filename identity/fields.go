package identity

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Fields are the names of the query, body and cookie fields that a
// server behind may read a credential from. Each is matched however a
// common framework spells it ([ParamIs]).
type Fields []string

// DefaultFields are the fields common frameworks read a credential from:
// access_token (RFC 6750; passport, Doorkeeper, Laravel Passport's query),
// bearer_token (Doorkeeper) and api_token (Laravel's token guard).
var DefaultFields = Fields{"access_token", "bearer_token", "api_token"}

// Is reports whether some framework reads the field name (as it came,
// escaped, from a query, a form or a cookie) as one of f: decoded as
// most do, or with ASP.NET's %uXXXX escapes too.
func (f Fields) Is(escaped string) bool {
	if plainName(escaped) {
		// The usual name: read alike by all, compared without allocating.
		return slices.ContainsFunc(f, func(want string) bool { return plainIs(escaped, want) })
	}
	return slices.ContainsFunc(nameReadings(escaped), f.isName)
}

// plainIs reports whether some framework reads a plain field name
// (plainName) as want: compared ignoring case, without allocating, when
// want is plain too.
func plainIs(name, want string) bool {
	if plainName(want) {
		return strings.EqualFold(name, want)
	}
	return ParamIs(name, want)
}

// plainName reports whether a field name is read alike by every parser:
// ASCII letters, digits, '_' and '-' only (the base64url alphabet).
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return false
		}
	}
	return true
}

// nameReadings are the names an escaped field name decodes to: as
// url.QueryUnescape decodes it (none if it does not), and as classic
// ASP.NET does, which also decodes %uXXXX.
func nameReadings(escaped string) []string {
	var out []string
	if n, err := url.QueryUnescape(escaped); err == nil {
		out = append(out, n)
	}
	if strings.Contains(strings.ToLower(escaped), "%u") {
		out = append(out, percentU(escaped))
	}
	return out
}

// percentU decodes %uXXXX escapes and, leniently, the others, as classic
// ASP.NET's HttpUtility.UrlDecode does (a bad escape stays as written).
func percentU(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b.WriteByte(' ')
		case '%':
			i += writeEscape(&b, s, i)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// writeEscape writes to b the escape that starts at s[i] == '%', decoded
// as percentU decodes it (%uXXXX or %XX; a bad escape as its '%'), and
// returns how many bytes after the '%' it took.
func writeEscape(b *strings.Builder, s string, i int) int {
	if i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') {
		if v, err := strconv.ParseUint(s[i+2:i+6], 16, 16); err == nil {
			b.WriteRune(rune(v))
			return 5
		}
	} else if i+2 < len(s) {
		if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
			b.WriteByte(byte(v))
			return 2
		}
	}
	b.WriteByte('%')
	return 0
}

// QueryTokens returns the values of the pairs of a query (or form) that
// name one of f, split wherever a server could split them ('&' or ';').
// A name that does not decode is one only in ASP.NET's reading; a value
// of such a pair that does not decode is an error wrapping
// ErrMalformedKey (servers read it differently). Errors never hold a
// value.
func (f Fields) QueryTokens(raw string) ([]string, error) {
	var tokens []string
	for pair := range strings.FieldsFuncSeq(raw, isQuerySeparator) {
		name, value, _ := strings.Cut(pair, "=")
		if !f.Is(name) {
			continue
		}
		v, err := url.QueryUnescape(value)
		if err != nil || strings.Contains(strings.ToLower(value), "%u") {
			return nil, fmt.Errorf("parsing a credential field: %w: its value does not decode alike everywhere", ErrMalformedKey)
		}
		tokens = append(tokens, v)
	}
	return tokens, nil
}

// isQuerySeparator reports whether r separates the pairs of a query or
// a form to some server: '&', or ';'.
func isQuerySeparator(r rune) bool { return r == '&' || r == ';' }

// CookieTokens returns the values of the request's cookies that name one
// of f, as PHP ($_REQUEST without a request_order), classic ASP.NET
// (Request[name]) and cookie-parser read them: split at ';' and ',',
// unquoted, and percent-decoded as well where that reads otherwise.
func (f Fields) CookieTokens(h http.Header) []string {
	var tokens []string
	for _, line := range h["Cookie"] {
		for pair := range strings.FieldsFuncSeq(line, func(r rune) bool { return r == ';' || r == ',' }) {
			name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
			if f.Is(strings.TrimSpace(name)) {
				tokens = appendCookieValue(tokens, value)
			}
		}
	}
	return tokens
}

// appendCookieValue appends to tokens the readings of the value of a
// credential cookie: unquoted, and percent-decoded as well where that
// reads otherwise.
func appendCookieValue(tokens []string, value string) []string {
	value = strings.Trim(strings.TrimSpace(value), `"`)
	tokens = append(tokens, value)
	// Decoded by some ('+' a space to PHP, not to
	// decodeURIComponent): each reading is a credential, and
	// two that differ are refused.
	if v, err := url.QueryUnescape(value); err == nil && v != value && utf8.ValidString(v) {
		tokens = append(tokens, v)
	}
	return tokens
}
