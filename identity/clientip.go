package identity

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// TrustedProxies is a set of networks whose X-Forwarded-For / Forwarded
// headers are believed. The zero value trusts nobody.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies parses a list of networks in CIDR notation
// ("10.0.0.0/8", "::1/128") or bare addresses ("127.0.0.1" means
// 127.0.0.1/32, "::1" means ::1/128). Surrounding spaces are ignored, host
// bits set in a prefix are cleared ("10.1.2.3/8" is 10.0.0.0/8), and an
// IPv4-mapped IPv6 network ("::ffff:10.0.0.0/104") is stored as the IPv4
// network it maps. The error names the first bad entry.
//
// IPv4 and IPv6 are separate address families: "::/0" does not trust IPv4
// peers, "0.0.0.0/0" does not trust IPv6 peers.
func ParseTrustedProxies(cidrs []string) (TrustedProxies, error) {
	if len(cidrs) == 0 {
		return TrustedProxies{}, nil
	}
	prefixes := make([]netip.Prefix, 0, len(cidrs))
	for i, s := range cidrs {
		p, err := parseTrusted(strings.TrimSpace(s))
		if err != nil {
			return TrustedProxies{}, fmt.Errorf("parsing trusted proxies: entry %d %q: %w", i, s, err)
		}
		prefixes = append(prefixes, p)
	}
	return TrustedProxies{prefixes: prefixes}, nil
}

func parseTrusted(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("empty entry")
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("zone %q not allowed", a.Zone())
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Prefixes returns the trusted networks as Contains sees them: masked, and
// IPv4-mapped IPv6 networks as the IPv4 networks they map.
func (t TrustedProxies) Prefixes() []netip.Prefix { return slices.Clone(t.prefixes) }

// Contains reports whether a is in one of the trusted networks. An
// IPv4-mapped IPv6 address is unmapped first, and a zone is ignored.
func (t TrustedProxies) Contains(a netip.Addr) bool {
	if len(t.prefixes) == 0 {
		return false
	}
	a = normalize(a)
	if !a.IsValid() {
		return false
	}
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// MaxForwardedHops bounds how many addresses are examined from forwarding
// headers.
const MaxForwardedHops = 32

// maxForwardedBytes bounds how many bytes of forwarding header values are
// examined, counted from the right. Every header line costs at least one
// byte, so thousands of empty lines are bounded too.
const maxForwardedBytes = 8 << 10

const (
	headerXFF       = "X-Forwarded-For"
	headerForwarded = "Forwarded"
)

// ClientIP returns the client address of r.
//
// It starts from r.RemoteAddr, which must be host:port as net/http sets it;
// if it is unparsable, ClientIP returns the zero Addr and false. If that
// peer is not in trusted, the peer is the client and no header is read.
//
// Otherwise ClientIP walks the forwarding chain from right to left: the
// entries of all X-Forwarded-For header lines (comma separated,
// concatenated in order), or the for= parameters of the Forwarded header
// (RFC 7239). Each hop that is itself trusted is skipped; the first
// untrusted address is the client. If every hop is trusted, the leftmost
// one examined is the client.
//
// A trusted proxy writes one of the two headers and passes the other on
// as its client sent it, so when a request carries both, either may be
// the client's own. Both are walked, and they must tell one story: the
// same addresses from the right, except that a chain that ran out with
// every hop trusted may be continued by the other (a CDN that speaks
// X-Forwarded-For behind a proxy that speaks both). The longer chain is
// then the answer. Otherwise the client cannot be determined, and
// ClientIP returns the zero Addr and false: whichever header the client
// wrote would name whom it is charged as.
//
// Whatever the walk cannot vouch for ends it, and the last good address
// (initially the peer, otherwise the trusted proxy that sent the entry) is
// returned: a malformed entry, a Forwarded element without for=, "unknown",
// an obfuscated identifier such as "_hidden", the MaxForwardedHops limit, or
// the 8 KiB limit on header bytes examined (counted from the right). So a
// value from further left, which the client may have chosen, is never
// returned. Empty list elements are ignored, as RFC 9110 asks.
//
// Ports ("1.2.3.4:80", "[::1]:80") and zones are stripped, and the result
// is unmapped (an IPv4-mapped IPv6 address becomes IPv4).
func ClientIP(r *http.Request, trusted TrustedProxies) (netip.Addr, bool) {
	return clientIP(r, trusted, nil)
}

// ClientChain is [ClientIP] that also returns the forwarding chain it
// vouches for: the client, then each trusted proxy the request passed
// through after it, in order, up to but not including the peer (nil when
// the client is the peer). It is what X-Forwarded-For should say once
// entries the client wrote itself, left of the client, are dropped.
func ClientChain(r *http.Request, trusted TrustedProxies) (netip.Addr, []netip.Addr, bool) {
	var seen []netip.Addr
	a, ok := clientIP(r, trusted, &seen)
	slices.Reverse(seen)
	return a, seen, ok
}

// clientIP is ClientIP; if seen is not nil, the addresses walked are
// appended to it, right to left, up to the client.
func clientIP(r *http.Request, trusted TrustedProxies, seen *[]netip.Addr) (netip.Addr, bool) {
	if r == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	peer := normalize(ap.Addr())
	if !trusted.Contains(peer) {
		return peer, true
	}
	xff, fwd := r.Header[headerXFF], r.Header[headerForwarded]
	switch {
	case len(xff) > 0 && len(fwd) > 0:
		return walkBoth(peer, trusted, xff, fwd, seen)
	case len(xff) > 0:
		a, _ := walk(peer, trusted, xff, false, seen)
		return a, true
	case len(fwd) > 0:
		a, _ := walk(peer, trusted, fwd, true, seen)
		return a, true
	}
	return peer, true
}

// walkBoth walks the X-Forwarded-For lines xff and the Forwarded lines
// fwd, and returns the client they agree on, as ClientIP describes, or
// false if they disagree. If seen is not nil, the addresses of the chain
// answered are appended to it, right to left.
func walkBoth(peer netip.Addr, trusted TrustedProxies, xff, fwd []string, seen *[]netip.Addr) (netip.Addr, bool) {
	var xs, fs []netip.Addr
	xa, xopen := walk(peer, trusted, xff, false, &xs)
	fa, fopen := walk(peer, trusted, fwd, true, &fs)
	short, long, a := xs, fs, fa
	shortOpen := xopen
	if len(xs) > len(fs) {
		short, long, a, shortOpen = fs, xs, xa, fopen
	}
	if !slices.Equal(short, long[:len(short)]) {
		return netip.Addr{}, false
	}
	if len(short) < len(long) && !shortOpen {
		// The shorter chain stopped (at an entry it could not vouch
		// for, or a bound) where the other goes on.
		return netip.Addr{}, false
	}
	if seen != nil {
		*seen = append(*seen, long...)
	}
	return a, true
}

// walk walks the comma-separated list in lines from right to left, starting
// from the trusted peer, as ClientIP describes. forwarded selects the
// Forwarded syntax (quoted strings, for= parameters) over X-Forwarded-For.
// If seen is not nil, each address taken is appended to it. open reports
// that the walk ran out of entries with every hop trusted, rather than
// stopping at an untrusted client, an entry it could not vouch for, or a
// bound.
func walk(peer netip.Addr, trusted TrustedProxies, lines []string, forwarded bool, seen *[]netip.Addr) (client netip.Addr, open bool) {
	w := chainWalk{trusted: trusted, forwarded: forwarded, client: peer}
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
		if !w.line(line, cut, seen) {
			return w.client, false
		}
	}
	return w.client, true
}

// A chainWalk is the state of walk: the client so far (the last hop
// taken) and the number of hops taken. The addresses seen are kept
// apart, passed to each step: in the struct, escape analysis would take
// them for part of the client returned and move them to the heap.
type chainWalk struct {
	trusted   TrustedProxies
	forwarded bool
	client    netip.Addr
	hops      int
}

// line walks the entries of one header line from right to left,
// appending each address taken to seen if it is not nil; cut says the
// line's left end lies beyond the byte budget. It reports whether the
// walk goes on to the line before.
func (w *chainWalk) line(line string, cut bool, seen *[]netip.Addr) bool {
	for {
		j := lastSeparator(line, w.forwarded)
		if j == malformedList || (j < 0 && cut) {
			// An unterminated quoted string, or an entry
			// whose left end lies beyond the byte budget.
			return false
		}
		if entry := trimOWS(line[j+1:]); entry != "" && !w.hop(entry, seen) {
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
// an address, and for an untrusted address, the client.
func (w *chainWalk) hop(entry string, seen *[]netip.Addr) bool {
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
	return w.trusted.Contains(a)
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
			// s[i] closes a quoted string; find the quote that opens
			// it, the first one to the left not escaped by an odd
			// number of backslashes.
			j := i - 1
			for ; j >= 0; j-- {
				if s[j] != '"' {
					continue
				}
				n := 0
				for k := j - 1; k >= 0 && s[k] == '\\'; k-- {
					n++
				}
				if n%2 == 0 {
					break
				}
			}
			if j < 0 {
				return malformedList
			}
			i = j
		}
	}
	return -1
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
		if i = skipOWS(el, next); i < len(el) {
			if el[i] != ';' {
				return netip.Addr{}, false
			}
			i++
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	return parseNode(node, true)
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
	var err error
	if strings.HasPrefix(s, "[") {
		var ok bool
		if a, ok = parseBracketedNode(s, obfPort); !ok {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// A single colon: IPv4 with a port.
		if !validPort(s[i+1:], obfPort) {
			return netip.Addr{}, false
		}
		if a, err = netip.ParseAddr(s[:i]); err != nil || !a.Is4() {
			return netip.Addr{}, false
		}
	} else if a, err = netip.ParseAddr(s); err != nil {
		// Bare IPv4, or bare IPv6 (no port possible).
		return netip.Addr{}, false
	}
	return normalize(a), true
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
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
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

// normalize strips the zone and unmaps IPv4-mapped IPv6 addresses.
func normalize(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}

// ClientPrefix returns the network a client is limited under: an IPv4
// address (a /32), or an IPv6 address's /64, so that one host cannot
// dodge a limit by rotating addresses within its /64. IPv4-mapped
// addresses count as IPv4 and zones are ignored. The zero Addr yields the
// zero Prefix.
func ClientPrefix(a netip.Addr) netip.Prefix {
	a = normalize(a)
	switch {
	case !a.IsValid():
		return netip.Prefix{}
	case a.Is4():
		return netip.PrefixFrom(a, 32)
	default:
		return netip.PrefixFrom(a, 64).Masked()
	}
}

// ClientGroup returns ClientPrefix of a as a string: an IPv4 address as a
// dotted quad ("203.0.113.7"), an IPv6 /64 as a prefix
// ("2001:db8:1:2::/64"). The zero Addr yields "".
func ClientGroup(a netip.Addr) string {
	p := ClientPrefix(a)
	switch {
	case !p.IsValid():
		return ""
	case p.Addr().Is4():
		return p.Addr().String()
	default:
		return p.String()
	}
}

// LoopbackHost reports whether host (a name or an address, without a
// port) names this machine: localhost, in any case, or a loopback
// address, IPv4-mapped ones included.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

func trimOWS(s string) string {
	for s != "" && isOWS(s[0]) {
		s = s[1:]
	}
	for s != "" && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isNodeChar reports whether c may appear in an unquoted for= value: token
// characters plus the ':', '[' and ']' that real proxies send unquoted
// although RFC 7239 asks for quotes.
func isNodeChar(c byte) bool {
	return isTchar(c) || c == ':' || c == '[' || c == ']'
}

// isQuotedChar reports whether c may appear in a quoted string, directly
// or escaped: HTAB, SP, visible ASCII and obs-text.
func isQuotedChar(c byte) bool {
	return c == '\t' || c >= 0x20 && c != 0x7f
}

// PeerAddr returns the address of the immediate peer (r.RemoteAddr),
// unmapped, ignoring every forwarding header.
func PeerAddr(r *http.Request) (netip.Addr, bool) {
	return ClientIP(r, TrustedProxies{})
}
