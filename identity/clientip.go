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
	parse := addrPrefix
	if strings.Contains(s, "/") {
		parse = netip.ParsePrefix
	}
	p, err := parse(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// addrPrefix returns the network of the one address s, which must have
// no zone.
func addrPrefix(s string) (netip.Prefix, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zone %q not allowed", a.Zone())
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
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
	return a.IsValid() && slices.ContainsFunc(t.prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
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
	}
	a, _ := walk(peer, trusted, fwd, true, seen) // no lines: the peer
	return a, true
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

// PeerAddr returns the address of the immediate peer (r.RemoteAddr),
// unmapped, ignoring every forwarding header.
func PeerAddr(r *http.Request) (netip.Addr, bool) {
	return ClientIP(r, TrustedProxies{})
}
