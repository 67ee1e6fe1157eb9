package policy

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// Trusting a peer means believing the client address it writes in
// X-Forwarded-For (and the user in identity.user_header), so every trusted
// address can choose whom its requests are charged to. These are the
// thresholds above which trusted_proxies draws a warning.
const (
	// PublicTrustBits4 and PublicTrustBits6: a trusted set whose public
	// part is larger than one /8 (IPv4) or one /24 (IPv6) draws a warning.
	// The largest legitimate lists, CDN edges, are far smaller: all of
	// Cloudflare's IPv4 ranges together hold about a /12, its IPv6
	// ranges fourteen /32s, CloudFront's IPv6 range is a /28. A set 16 to
	// 256 times larger than those includes networks anyone can rent.
	PublicTrustBits4 = 8
	PublicTrustBits6 = 24
)

var (
	allIPv4 = netip.MustParsePrefix("0.0.0.0/0")
	allIPv6 = netip.MustParsePrefix("::/0")
	// mappedIPv4 is ::ffff:0:0/96. The gateway unmaps such peers, so no
	// IPv6 peer is ever in it.
	mappedIPv4 = netip.MustParsePrefix("::ffff:0:0/96")
	// nat64 is the well-known NAT64 prefix (RFC 6052): behind a NAT64 or
	// SIIT translator, every IPv4 client arrives as an address in it.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")

	// nonPublic4 and nonPublic6 are the ranges that are not public
	// unicast: private, shared (CGNAT), loopback, link-local, reserved,
	// multicast and, for IPv6, the IPv4-mapped range. Disjoint.
	nonPublic4 = mustPrefixes("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4")
	nonPublic6 = mustPrefixes("::/128", "::1/128", "::ffff:0:0/96", "fc00::/7", "fe80::/10", "ff00::/8")
)

func mustPrefixes(s ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(s))
	for i, x := range s {
		ps[i] = netip.MustParsePrefix(x)
	}
	return ps
}

// TrustWarnings reports, in words, how much of the address space a
// trusted_proxies list trusts (as identity.TrustedProxies.Prefixes gives
// it: masked, mapped networks unmapped) when that is far more than any set of
// proxies: every IPv4 or IPv6 address (however it is written: 0.0.0.0/0,
// two /1s, ::ffff:0:0/96, which the gateway unmaps to all of IPv4), every
// IPv4 address as NAT64 presents it, or more public space than a /8
// (IPv4) or /24 (IPv6). It returns nil for a sensible list.
func TrustWarnings(trusted []netip.Prefix) []string {
	v4, v6, via64 := byFamily(trusted)
	const nat = " as NAT64 presents it (64:ff9b::/96)"
	whole6 := covers(append(slices.Clip(v6), mappedIPv4), allIPv6)
	var viaNAT64 string
	if !whole6 { // else said already
		viaNAT64 = trustWarning(via64, false, nonPublic4, PublicTrustBits4, "IPv4", nat)
	}
	var w []string
	for _, msg := range []string{
		trustWarning(v4, false, nonPublic4, PublicTrustBits4, "IPv4", ""),
		trustWarning(v6, whole6, nonPublic6, PublicTrustBits6, "IPv6", ""),
		viaNAT64,
	} {
		if msg != "" {
			w = append(w, msg)
		}
	}
	return w
}

// byFamily splits the valid prefixes of trusted into IPv4 and IPv6 ones,
// and returns as via64 the IPv4 addresses that the IPv6 ones trust as
// NAT64 presents them.
func byFamily(trusted []netip.Prefix) (v4, v6, via64 []netip.Prefix) {
	for _, p := range trusted {
		if !p.IsValid() {
			continue
		}
		if p.Addr().Is4() {
			v4 = append(v4, p)
			continue
		}
		v6 = append(v6, p)
		if q, ok := viaNAT64(p); ok {
			via64 = append(via64, q)
		}
	}
	return v4, v6, via64
}

// viaNAT64 returns the IPv4 addresses that the IPv6 prefix p holds as
// NAT64 presents them; ok is false when p and nat64 do not overlap.
func viaNAT64(p netip.Prefix) (v4 netip.Prefix, ok bool) {
	switch {
	case p.Bits() <= nat64.Bits() && p.Contains(nat64.Addr()):
		return allIPv4, true
	case p.Bits() > nat64.Bits() && nat64.Contains(p.Addr()):
		b := p.Addr().As16()
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b[12:])), p.Bits()-96), true
	}
	return netip.Prefix{}, false
}

// trustWarning returns the warning for a trusted set of one family
// ("IPv4" or "IPv6"), or "": when it covers the whole family (or whole
// says it does), or more public space than a /bits (nonPublic is the
// family's space that is not public). how says how the set is reached.
func trustWarning(set []netip.Prefix, whole bool, nonPublic []netip.Prefix, bits int, family, how string) string {
	if len(set) == 0 {
		return ""
	}
	all := allIPv4
	if family == "IPv6" {
		all = allIPv6
	}
	if whole || covers(set, all) {
		return fmt.Sprintf("trusts every %s address%s: any client can set X-Forwarded-For (and identity.user_header) and so choose whom it is limited as; list only your proxies' addresses", family, how)
	}
	if public := size(set) - overlap(set, nonPublic); public > math.Ldexp(1, all.Addr().BitLen()-bits) {
		return fmt.Sprintf("trusts more public %s space than a /%d (%.3g addresses)%s: every address in it can set X-Forwarded-For (and identity.user_header) and so choose whom it is limited as; CDN edge ranges are far smaller, so list only your proxies' addresses", family, bits, public, how)
	}
	return ""
}

// covers reports whether the union of set covers all of p. Two prefixes
// are either nested or disjoint, so p is covered if a prefix holds it, or
// else if both its halves are covered by the prefixes inside it.
func covers(set []netip.Prefix, p netip.Prefix) bool {
	var inner []netip.Prefix
	for _, s := range set {
		if s.Addr().BitLen() != p.Addr().BitLen() {
			continue
		}
		if s.Bits() <= p.Bits() && s.Contains(p.Addr()) {
			return true
		}
		if s.Bits() > p.Bits() && p.Contains(s.Addr()) {
			inner = append(inner, s)
		}
	}
	if len(inner) == 0 {
		return false
	}
	lo, hi := halves(p)
	return covers(inner, lo) && covers(inner, hi)
}

// halves returns the two halves of p (which is not a single address).
func halves(p netip.Prefix) (lo, hi netip.Prefix) {
	b := p.Bits()
	a := p.Addr().AsSlice()
	a[b/8] |= 0x80 >> (b % 8)
	hiAddr, _ := netip.AddrFromSlice(a)
	return netip.PrefixFrom(p.Addr(), b+1), netip.PrefixFrom(hiAddr, b+1)
}

// outermost returns the prefixes of set not inside another one: disjoint,
// with the same union. Sorted by address, then widest first, a prefix
// either lies inside the last one kept or starts a new one.
func outermost(set []netip.Prefix) []netip.Prefix {
	sorted := slices.Clone(set)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range sorted {
		if n := len(out); n > 0 && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// count is the number of addresses in p.
func count(p netip.Prefix) float64 { return math.Ldexp(1, p.Addr().BitLen()-p.Bits()) }

// size is the number of addresses in the union of set.
func size(set []netip.Prefix) float64 {
	n := 0.0
	for _, p := range outermost(set) {
		n += count(p)
	}
	return n
}

// overlap is the number of addresses in both the union of set and the
// union of the disjoint prefixes of other.
func overlap(set, other []netip.Prefix) float64 {
	n := 0.0
	for _, p := range outermost(set) {
		for _, q := range other {
			if p.Overlaps(q) {
				n += min(count(p), count(q))
			}
		}
	}
	return n
}
