package identity

// The forwarding headers' lists, as ClientIP walks them: X-Forwarded-For
// and Forwarded (RFC 7239) entries read from the right, within the byte
// and hop bounds, and the node addresses they name.

import (
	"net/netip"
	"strings"
)

// walk walks the comma-separated list in lines from right to left, starting
// from the trusted peer, as ClientIP describes. forwarded selects the
// Forwarded syntax (quoted strings, for= parameters) over X-Forwarded-For.
// If seen is not nil, each address taken is appended to it. open reports
// that the walk ran out of entries with every hop trusted, rather than
// stopping at an untrusted client, an entry it could not vouch for, or a
// bound.
func walk(peer netip.Addr, trusted TrustedProxies, lines []string, forwarded bool, seen *[]netip.Addr) (client netip.Addr, open bool) {
	w := chainWalk{forwarded: forwarded, client: peer}
	budget := maxForwardedBytes + 1 // the first line has no separator
	for i := len(lines) - 1; i >= 0; i-- {
		if budget <= 0 {
			return w.client, false
		}
		budget-- // the separator between lines; bounds runs of empty lines
		line := lines[i]
		cut := false
		if len(line) > budget {
			line, cut = line[len(line)-budget:], true
		}
		budget -= len(line)
		if !w.line(line, cut, trusted, seen) {
			return w.client, false
		}
	}
	return w.client, true
}

// A chainWalk is the state of walk: the client so far (the last hop
// taken) and the number of hops taken. The trusted proxies and the
// addresses seen are kept apart, passed to each step: in the struct,
// escape analysis would take them for part of the client returned and
// move them to the heap.
type chainWalk struct {
	forwarded bool
	client    netip.Addr
	hops      int
}

// line walks the entries of one header line from right to left,
// appending each address taken to seen if it is not nil; cut says the
// line's left end lies beyond the byte budget. It reports whether the
// walk goes on to the line before.
func (w *chainWalk) line(line string, cut bool, trusted TrustedProxies, seen *[]netip.Addr) bool {
	for {
		j := lastSeparator(line, w.forwarded)
		if j == malformedList || (j < 0 && cut) {
			// An unterminated quoted string, or an entry
			// whose left end lies beyond the byte budget.
			return false
		}
		if entry := trimOWS(line[j+1:]); entry != "" && !w.hop(entry, trusted, seen) {
			return false
		}
		if j < 0 {
			return true
		}
		line = line[:j]
	}
}

// hop takes one non-empty entry as the client, and reports whether the
// walk goes on past it: false at the hop bound, for an entry that is not
// an address, and for an address not in trusted, the client.
func (w *chainWalk) hop(entry string, trusted TrustedProxies, seen *[]netip.Addr) bool {
	if w.hops == MaxForwardedHops {
		return false
	}
	w.hops++
	a, ok := parseEntry(entry, w.forwarded)
	if !ok {
		return false
	}
	w.client = a
	if seen != nil {
		*seen = append(*seen, a)
	}
	return trusted.Contains(a)
}

// lastSeparator returns the index of the last list separator in s, in
// the Forwarded syntax or X-Forwarded-For's, as lastForwardedSeparator
// and lastXFFSeparator do.
func lastSeparator(s string, forwarded bool) int {
	if forwarded {
		return lastForwardedSeparator(s)
	}
	return lastXFFSeparator(s)
}

// parseEntry returns the address of one list entry: a Forwarded element
// (parseForwardedElement) or an X-Forwarded-For node.
func parseEntry(entry string, forwarded bool) (netip.Addr, bool) {
	if forwarded {
		return parseForwardedElement(entry)
	}
	return parseNode(entry, false)
}

// malformedList is returned by the separator scanners for a list that
// cannot be split.
const malformedList = -2

// lastXFFSeparator returns the index of the last comma in s, or -1.
func lastXFFSeparator(s string) int {
	return strings.LastIndexByte(s, ',')
}

// lastForwardedSeparator returns the index of the last comma in s that is
// not inside a quoted string, -1 if there is none, or malformedList if a
// quoted string is not terminated. Scanning from the right keeps the
// elements appended by trusted proxies (the right end) independent of
// whatever the client put further left, such as an unbalanced quote. The
// scan is linear: each quote looks back only over the backslashes that
// directly precede it.
func lastForwardedSeparator(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ',':
			return i
		case '"':
			// s[i] closes a quoted string: skip it.
			if i = openingQuote(s, i); i < 0 {
				return malformedList
			}
		}
	}
	return -1
}

// openingQuote returns the index of the quote that opens the quoted
// string s[i] closes: the first one left of i not escaped by an odd
// number of backslashes; -1 if there is none.
func openingQuote(s string, i int) int {
	for j := i - 1; j >= 0; j-- {
		if s[j] == '"' && !escapedAt(s, j) {
			return j
		}
	}
	return -1
}

// escapedAt reports whether s[j] is escaped: whether an odd number of
// backslashes directly precede it.
func escapedAt(s string, j int) bool {
	n := 0
	for k := j - 1; k >= 0 && s[k] == '\\'; k-- {
		n++
	}
	return n%2 == 1
}

// parseForwardedElement returns the address in the for= parameter of one
// Forwarded element (pairs separated by semicolons, case-insensitive
// names). ok is false if the element is malformed, has no or two for=
// parameters, or if for= is not an address ("unknown", "_hidden").
func parseForwardedElement(el string) (netip.Addr, bool) {
	var node string
	found := false
	for i := skipOWS(el, 0); i < len(el); i = skipOWS(el, i) {
		if el[i] == ';' { // empty pair
			i++
			continue
		}
		name, value, next, ok := parseForwardedPair(el, i)
		if !ok {
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			node, found = value, true
		}
		if i, ok = pairEnd(el, next); !ok {
			return netip.Addr{}, false
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	return parseNode(node, true)
}

// pairEnd returns the index after the pair of a Forwarded element el
// that ends before el[next]: past the ';' that must follow it, after
// optional whitespace, unless the element ends there. ok is false if
// something else follows.
func pairEnd(el string, next int) (i int, ok bool) {
	if i = skipOWS(el, next); i == len(el) {
		return i, true
	}
	return i + 1, el[i] == ';'
}

// parseForwardedPair parses the name=value pair of a Forwarded element
// that starts at el[i], and returns the index after it. ok is false if
// the name is not a token or the value is empty or malformed.
func parseForwardedPair(el string, i int) (name, value string, next int, ok bool) {
	start := i
	for i < len(el) && isTchar(el[i]) {
		i++
	}
	name = el[start:i]
	if name == "" || i == len(el) || el[i] != '=' {
		return "", "", 0, false
	}
	if value, next, ok = parseForwardedValue(el, i+1); !ok || value == "" {
		return "", "", 0, false
	}
	return name, value, next, true
}

// parseForwardedValue parses the value of a Forwarded pair that starts
// at el[i]: a quoted string, returned unescaped, or the run of
// isNodeChar characters there (possibly empty). It returns the index
// after it.
func parseForwardedValue(el string, i int) (value string, next int, ok bool) {
	if i < len(el) && el[i] == '"' {
		return parseQuoted(el, i)
	}
	start := i
	for i < len(el) && isNodeChar(el[i]) {
		i++
	}
	return el[start:i], i, true
}

// skipOWS returns the index of the first byte of s from i on that is
// not optional whitespace, or len(s).
func skipOWS(s string, i int) int {
	for i < len(s) && isOWS(s[i]) {
		i++
	}
	return i
}

// parseQuoted parses the quoted string that starts at s[i] == '"' and
// returns its unescaped content and the index after the closing quote.
func parseQuoted(s string, i int) (value string, next int, ok bool) {
	i++ // opening quote
	start := i
	var b []byte // nil until an escape is seen
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			if b == nil {
				return s[start:i], i + 1, true
			}
			return string(b), i + 1, true
		case c == '\\':
			if i+1 == len(s) || !isQuotedChar(s[i+1]) {
				return "", 0, false
			}
			if b == nil {
				b = append([]byte(nil), s[start:i]...)
			}
			b = append(b, s[i+1])
			i += 2
		case isQuotedChar(c):
			if b != nil {
				b = append(b, c)
			}
			i++
		default:
			return "", 0, false
		}
	}
	return "", 0, false
}

// parseNode parses one address as it appears in X-Forwarded-For or in a
// Forwarded for= parameter: "192.0.2.60", "192.0.2.60:8080", "2001:db8::1",
// "[2001:db8::1]", "[2001:db8::1]:4711", optionally with a zone. In
// Forwarded (obfPort), the port may be obfuscated ("_abc"), which still
// identifies the address. "unknown" and obfuscated nodes are not
// addresses. The result is normalized.
func parseNode(s string, obfPort bool) (netip.Addr, bool) {
	var a netip.Addr
	var ok bool
	switch i := strings.IndexByte(s, ':'); {
	case strings.HasPrefix(s, "["):
		a, ok = parseBracketedNode(s, obfPort)
	case i >= 0 && strings.IndexByte(s[i+1:], ':') < 0:
		// A single colon: IPv4 with a port.
		a, ok = parseIPv4Node(s[:i], s[i+1:], obfPort)
	default:
		// Bare IPv4, or bare IPv6 (no port possible).
		var err error
		a, err = netip.ParseAddr(s)
		ok = err == nil
	}
	if !ok {
		return netip.Addr{}, false
	}
	return normalize(a), true
}

// parseIPv4Node parses an IPv4 node with a port, "192.0.2.60:8080", cut
// at its colon into host and port (obfuscated too if obfPort). The
// result is not normalized.
func parseIPv4Node(host, port string, obfPort bool) (netip.Addr, bool) {
	if !validPort(port, obfPort) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil && a.Is4()
}

// parseBracketedNode parses an IPv6 node in brackets, optionally with a
// port: "[2001:db8::1]", "[2001:db8::1]:4711". The result is not
// normalized.
func parseBracketedNode(s string, obfPort bool) (netip.Addr, bool) {
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return netip.Addr{}, false
	}
	if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfPort)) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s[1:end])
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether s is a decimal port, or, if obf, an obfuscated
// port ("_" followed by ALPHA / DIGIT / "." / "_" / "-", RFC 7239).
func validPort(s string, obf bool) bool {
	if obf && len(s) > 1 && s[0] == '_' {
		return validObfuscated(s[1:])
	}
	return validDecimalPort(s)
}

// validObfuscated reports whether s is made of the characters of an
// obfuscated identifier after its '_' (ALPHA / DIGIT / "." / "_" / "-").
func validObfuscated(s string) bool {
	for i := 0; i < len(s); i++ {
		if !is(s[i], classObfuscated) {
			return false
		}
	}
	return true
}

// validDecimalPort reports whether s is a port number, 0 to 65535, in
// at most five decimal digits.
func validDecimalPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}
