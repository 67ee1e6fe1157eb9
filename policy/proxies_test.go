package policy_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// cloudflare is Cloudflare's published edge ranges: a large, legitimate
// trusted_proxies list that must not warn.
var cloudflare = []string{
	"173.245.48.0/20", "103.21.244.0/22", "103.22.200.0/22", "103.31.4.0/22", "141.101.64.0/18",
	"108.162.192.0/18", "190.93.240.0/20", "188.114.96.0/20", "197.234.240.0/22", "198.41.128.0/17",
	"162.158.0.0/15", "104.16.0.0/13", "104.24.0.0/14", "172.64.0.0/13", "131.0.72.0/22",
	"2400:cb00::/32", "2606:4700::/32", "2803:f800::/32", "2405:b500::/32", "2405:8100::/32",
	"2a06:98c0::/29", "2c0f:f248::/32",
}

// TestTrustedProxiesWarnings: trusting every address lets any client write
// X-Forwarded-For (and the user header) and choose whom it is charged as.
// The policy still loads (check exits 0) but carries a warning, at the
// line of trusted_proxies, in whichever way the whole space is written.
func TestTrustedProxiesWarnings(t *testing.T) {
	const every, public, nat64 = "trusts every", "public", "NAT64"
	cases := []struct {
		name    string
		proxies []string
		want    []string // one substring per expected warning
	}{
		{"all IPv4", []string{"0.0.0.0/0"}, []string{every + " IPv4"}},
		{"all IPv6", []string{"::/0"}, []string{every + " IPv6"}},
		{"both", []string{"10.0.0.0/8", "::/0", "0.0.0.0/0"}, []string{every + " IPv4", every + " IPv6"}},
		{"IPv4 halves", []string{"0.0.0.0/1", "128.0.0.0/1"}, []string{every + " IPv4"}},
		{"IPv4 quarters, nested and repeated", []string{"192.0.0.0/2", "10.0.0.0/8", "0.0.0.0/2", "128.0.0.0/2", "64.0.0.0/2", "64.1.2.3", "0.0.0.0/2"}, []string{every + " IPv4"}},
		{"IPv4 from many pieces", append(pieces(), "0.0.0.0/9"), []string{every + " IPv4"}},
		{"IPv6 halves", []string{"::/1", "8000::/1"}, []string{every + " IPv6"}},
		{"IPv4 as mapped IPv6", []string{"::ffff:0:0/96"}, []string{every + " IPv4"}},
		{"IPv4 as mapped IPv6 halves", []string{"::ffff:0.0.0.0/97", "::ffff:128.0.0.0/97"}, []string{every + " IPv4"}},
		{"mapped and plain halves", []string{"::ffff:0.0.0.0/97", "128.0.0.0/1"}, []string{every + " IPv4"}},
		{"IPv6 without the mapped range", sansMapped(), []string{every + " IPv6"}},
		{"NAT64", []string{"64:ff9b::/96"}, []string{every + " IPv4 address as NAT64"}},
		{"NAT64 halves", []string{"64:ff9b::/97", "64:ff9b::8000:0/97"}, []string{every + " IPv4 address as NAT64"}},
		{"half of IPv4", []string{"0.0.0.0/1"}, []string{public + " IPv4"}},
		{"two /8s", []string{"8.0.0.0/8", "9.0.0.0/8"}, []string{public + " IPv4"}},
		{"/7", []string{"2.0.0.0/7"}, []string{public + " IPv4"}},
		{"global unicast", []string{"2000::/3"}, []string{public + " IPv6"}},
		{"an RIR's /12", []string{"2400::/12"}, []string{public + " IPv6"}},
		{"half of IPv4 through NAT64", []string{"64:ff9b::/97"}, []string{"addresses) as " + nat64}},
		{"private ranges", []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "fc00::/7", "fe80::/10", "::1"}, nil},
		{"non-unicast", []string{"224.0.0.0/4", "240.0.0.0/4", "ff00::/8"}, nil},
		{"one /8", []string{"8.0.0.0/8"}, nil},
		{"private /7 with a public half", []string{"10.0.0.0/7"}, nil},
		{"Cloudflare", cloudflare, nil},
		{"CloudFront IPv6", []string{"2600:9000::/28"}, nil},
		{"none", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			list := make([]string, len(c.proxies))
			for i, s := range c.proxies {
				list[i] = strconv.Quote(s)
			}
			src := strings.Replace(valid, "  anonymous_plan: free\n", "  anonymous_plan: free\n  trusted_proxies: ["+strings.Join(list, ", ")+"]\n", 1)
			p, err := policy.Parse([]byte(src), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Warnings) != len(c.want) {
				t.Fatalf("%d warnings, want %d: %v", len(p.Warnings), len(c.want), p.Warnings)
			}
			for i, w := range c.want {
				got := p.Warnings[i].String()
				if !strings.Contains(got, w) || !strings.HasPrefix(got, "p.yaml:6: identity.trusted_proxies: ") {
					t.Errorf("warning %d = %q, want p.yaml:6 and %q", i, got, w)
				}
			}
		})
	}
}

// pieces covers IPv4 except 0.0.0.0/9 with one prefix of each length.
func pieces() []string {
	var s []string
	for bits := 1; bits <= 8; bits++ {
		// The prefix of length bits whose first bits-1 bits are 0 and
		// whose last is 1.
		s = append(s, fmt.Sprintf("%d.0.0.0/%d", 256>>bits, bits))
	}
	return append(s, "0.128.0.0/9")
}

// sansMapped is IPv6 without ::ffff:0:0/96, which no peer ever has (the
// gateway unmaps IPv4-mapped peers), written as the prefixes beside it.
func sansMapped() []string {
	var s []string
	// Walk from ::/0 down to ::ffff:0:0/96, adding each sibling off the path.
	target := [16]byte{10: 0xff, 11: 0xff}
	for bits := 1; bits <= 96; bits++ {
		var a [16]byte
		copy(a[:], target[:])
		i, m := (bits-1)/8, byte(0x80>>((bits-1)%8))
		a[i] ^= m
		for j := range a {
			switch {
			case j > i:
				a[j] = 0
			case j == i:
				a[j] &^= m - 1
			}
		}
		s = append(s, fmt.Sprintf("%s/%d", ipv6(a), bits))
	}
	return s
}

func ipv6(a [16]byte) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, strconv.FormatUint(uint64(a[i])<<8|uint64(a[i+1]), 16))
	}
	return strings.Join(parts, ":")
}
