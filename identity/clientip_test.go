package identity_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/identity"
)

// testTrusted is the proxy set most tests use: a private IPv4 network, a
// single IPv4 host, loopback IPv6 and a unique-local IPv6 network.
var testTrusted = mustTrusted("10.0.0.0/8", "192.0.2.1", "::1/128", "fd00::/8")

func mustTrusted(cidrs ...string) identity.TrustedProxies {
	t, err := identity.ParseTrustedProxies(cidrs)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseTrustedProxies(t *testing.T) {
	tp, err := identity.ParseTrustedProxies([]string{
		"10.0.0.0/8", " ::1/128 ", "127.0.0.1", "2001:db8::5", "172.16.9.9/12", "::ffff:100.64.0.0/106",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", true},
		{"11.0.0.1", false},
		{"::1", true},
		{"::2", false},
		{"127.0.0.1", true},
		{"127.0.0.2", false},
		{"2001:db8::5", true},
		{"2001:db8::6", false},
		{"172.31.255.255", true}, // host bits in "172.16.9.9/12" are cleared
		{"172.32.0.0", false},
		{"::ffff:10.9.9.9", true},  // mapped addresses are unmapped first
		{"::ffff:127.0.0.1", true}, // ... also for single hosts
		{"fe80::1%eth0", false},
		{"100.64.0.1", true}, // a mapped network is stored as IPv4
		{"100.128.0.1", false},
	}
	for _, tt := range tests {
		if got := tp.Contains(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Contains(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if tp.Contains(netip.Addr{}) {
		t.Error("Contains(zero Addr) = true")
	}
	var zero identity.TrustedProxies
	for _, a := range []string{"10.0.0.1", "::1", "0.0.0.0"} {
		if zero.Contains(netip.MustParseAddr(a)) {
			t.Errorf("zero TrustedProxies contains %s", a)
		}
	}
	if tp, err := identity.ParseTrustedProxies(nil); err != nil || tp.Contains(netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("ParseTrustedProxies(nil) = %v, %v; want empty set", tp, err)
	}
}

func TestParseTrustedProxiesErrors(t *testing.T) {
	for _, bad := range []string{"", "  ", "10.0.0.0/33", "10.0.0/8", "not-an-ip", "fe80::1%eth0", "1.2.3.4:80", "::1/129", "10.0.0.0/"} {
		_, err := identity.ParseTrustedProxies([]string{"10.0.0.0/8", bad})
		if err == nil {
			t.Errorf("ParseTrustedProxies(%q) succeeded", bad)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "parsing trusted proxies: ") || !strings.Contains(msg, `"`+bad+`"`) {
			t.Errorf("ParseTrustedProxies(%q) error %q does not name the entry", bad, msg)
		}
	}
}

// req builds a request from RemoteAddr and alternating header names and
// values; a name may repeat to make several lines.
func req(remote string, kv ...string) *http.Request {
	r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

const (
	xff = "X-Forwarded-For"
	fwd = "Forwarded"
)

func TestClientIP(t *testing.T) {
	tests := []struct {
		name   string
		r      *http.Request
		want   string // "" means ok == false
		custom *identity.TrustedProxies
	}{
		// The peer.
		{name: "untrusted peer", r: req("203.0.113.7:4000"), want: "203.0.113.7"},
		{name: "untrusted peer ignores XFF", r: req("203.0.113.7:4000", xff, "1.1.1.1"), want: "203.0.113.7"},
		{name: "untrusted peer ignores Forwarded", r: req("203.0.113.7:4000", fwd, "for=1.1.1.1"), want: "203.0.113.7"},
		{name: "untrusted IPv6 peer", r: req("[2001:db8::1]:4000", xff, "1.1.1.1"), want: "2001:db8::1"},
		{name: "peer zone stripped", r: req("[fe80::1%eth0]:80"), want: "fe80::1"},
		{name: "peer IPv4-mapped", r: req("[::ffff:203.0.113.7]:80"), want: "203.0.113.7"},
		{name: "trusted mapped peer", r: req("[::ffff:10.0.0.1]:80", xff, "1.1.1.1"), want: "1.1.1.1"},
		{name: "no port", r: req("203.0.113.7"), want: ""},
		{name: "empty RemoteAddr", r: req(""), want: ""},
		{name: "hostname", r: req("example.com:80"), want: ""},
		{name: "unix socket", r: req("@"), want: ""},
		{name: "trusted peer without headers", r: req("10.0.0.1:80"), want: "10.0.0.1"},
		{name: "nobody trusted", r: req("10.0.0.1:80", xff, "1.1.1.1"), want: "10.0.0.1", custom: &identity.TrustedProxies{}},

		// X-Forwarded-For.
		{name: "XFF single", r: req("10.0.0.1:80", xff, "203.0.113.7"), want: "203.0.113.7"},
		{name: "XFF skips trusted hops", r: req("10.0.0.1:80", xff, "203.0.113.7, 10.0.0.3, 10.0.0.2"), want: "203.0.113.7"},
		{name: "XFF first untrusted from the right", r: req("10.0.0.1:80", xff, "1.1.1.1, 203.0.113.7, 10.0.0.2"), want: "203.0.113.7"},
		{name: "XFF spoofed leftmost ignored", r: req("10.0.0.1:80", xff, "10.0.0.9, 198.51.100.1, 203.0.113.7"), want: "203.0.113.7"},
		{name: "XFF spoofed trusted-looking entry", r: req("10.0.0.1:80", xff, "6.6.6.6,10.0.0.5,203.0.113.7"), want: "203.0.113.7"},
		{name: "XFF multi-line", r: req("10.0.0.1:80", xff, "6.6.6.6, 203.0.113.7", xff, "10.0.0.2, 10.0.0.3"), want: "203.0.113.7"},
		{name: "XFF multi-line last line wins", r: req("10.0.0.1:80", xff, "6.6.6.6", xff, "203.0.113.7"), want: "203.0.113.7"},
		{name: "XFF multi-line walks into earlier line", r: req("10.0.0.1:80", xff, "6.6.6.6, 203.0.113.7", xff, "10.0.0.2", xff, "10.0.0.3"), want: "203.0.113.7"},
		{name: "XFF all trusted", r: req("10.0.0.1:80", xff, "10.0.0.4, 10.0.0.3, 10.0.0.2"), want: "10.0.0.4"},
		{name: "XFF ports stripped", r: req("10.0.0.1:80", xff, "203.0.113.7:5555"), want: "203.0.113.7"},
		{name: "XFF bracketed IPv6 port", r: req("10.0.0.1:80", xff, "[2001:db8::7]:5555"), want: "2001:db8::7"},
		{name: "XFF bracketed IPv6", r: req("10.0.0.1:80", xff, "[2001:db8::7]"), want: "2001:db8::7"},
		{name: "XFF bare IPv6", r: req("10.0.0.1:80", xff, "2001:db8::7"), want: "2001:db8::7"},
		{name: "XFF zone stripped", r: req("10.0.0.1:80", xff, "fe80::7%eth0"), want: "fe80::7"},
		{name: "XFF IPv4-mapped", r: req("10.0.0.1:80", xff, "::ffff:203.0.113.7"), want: "203.0.113.7"},
		{name: "XFF IPv4-mapped bracketed", r: req("10.0.0.1:80", xff, "[::ffff:203.0.113.7]:1"), want: "203.0.113.7"},
		{name: "XFF IPv4-mapped trusted hop", r: req("10.0.0.1:80", xff, "203.0.113.7, ::ffff:10.0.0.2"), want: "203.0.113.7"},
		{name: "XFF whitespace", r: req("10.0.0.1:80", xff, " \t203.0.113.7 ,\t10.0.0.2\t"), want: "203.0.113.7"},
		{name: "XFF empty elements ignored", r: req("10.0.0.1:80", xff, "203.0.113.7,, 10.0.0.2,"), want: "203.0.113.7"},
		{name: "XFF empty line", r: req("10.0.0.1:80", xff, ""), want: "10.0.0.1"},
		{name: "XFF IPv6 peer", r: req("[::1]:80", xff, "203.0.113.7, fd00::2"), want: "203.0.113.7"},

		// Both headers: a trusted proxy speaks one and passes on the other
		// as the client wrote it, so they must tell one story, read right
		// to left; where one chain stops short of the other with every
		// hop trusted, the longer goes on from it.
		{name: "XFF and Forwarded name different clients", r: req("10.0.0.1:80", fwd, "for=198.51.100.1", xff, "203.0.113.7"), want: ""},
		{name: "a client's XFF beside the proxy's Forwarded", r: req("10.0.0.1:80", fwd, "for=203.0.113.7", xff, "198.51.100.1"), want: ""},
		{name: "a client's Forwarded beside the proxy's XFF", r: req("10.0.0.1:80", xff, "203.0.113.7", fwd, "for=198.51.100.1"), want: ""},
		{name: "a client's XFF naming a trusted hop", r: req("10.0.0.1:80", fwd, "for=203.0.113.7", xff, "10.0.0.9"), want: ""},
		{name: "a client's empty XFF beside Forwarded", r: req("10.0.0.1:80", fwd, "for=203.0.113.7", xff, ""), want: "203.0.113.7"},
		{name: "a client's empty Forwarded beside XFF", r: req("10.0.0.1:80", xff, "203.0.113.7", fwd, ""), want: "203.0.113.7"},
		{name: "XFF and Forwarded agree", r: req("10.0.0.1:80", fwd, "for=6.6.6.6, for=203.0.113.7, for=10.0.0.2", xff, "203.0.113.7, 10.0.0.2"), want: "203.0.113.7"},
		{name: "as long, one stopped at unknown", r: req("10.0.0.1:80", fwd, "for=unknown, for=10.0.0.2", xff, "10.0.0.2"), want: "10.0.0.2"},
		{name: "XFF goes on from Forwarded's trusted hops", r: req("10.0.0.1:80", fwd, "for=10.0.0.3", xff, "203.0.113.7, 10.0.0.3"), want: "203.0.113.7"},
		{name: "Forwarded goes on from XFF's trusted hops", r: req("10.0.0.1:80", xff, "10.0.0.3", fwd, "for=203.0.113.7, for=10.0.0.3"), want: "203.0.113.7"},
		{name: "XFF goes on past a Forwarded that stopped", r: req("10.0.0.1:80", fwd, "for=unknown, for=10.0.0.3", xff, "198.51.100.1, 10.0.0.3"), want: ""},
		{name: "XFF and Forwarded differ on a trusted hop", r: req("10.0.0.1:80", fwd, "for=203.0.113.7, for=10.0.0.3", xff, "203.0.113.7, 10.0.0.4"), want: ""},

		// Malformed X-Forwarded-For entries end the walk at the last good address.
		{name: "XFF malformed rightmost", r: req("10.0.0.1:80", xff, "203.0.113.7, garbage"), want: "10.0.0.1"},
		{name: "XFF malformed after trusted hop", r: req("10.0.0.1:80", xff, "203.0.113.7, garbage, 10.0.0.2"), want: "10.0.0.2"},
		{name: "XFF unknown", r: req("10.0.0.1:80", xff, "203.0.113.7, unknown"), want: "10.0.0.1"},
		{name: "XFF hostname", r: req("10.0.0.1:80", xff, "203.0.113.7, evil.example"), want: "10.0.0.1"},
		{name: "XFF leading zeros", r: req("10.0.0.1:80", xff, "010.0.0.1"), want: "10.0.0.1"},
		{name: "XFF bad port", r: req("10.0.0.1:80", xff, "203.0.113.7:99999"), want: "10.0.0.1"},
		{name: "XFF empty port", r: req("10.0.0.1:80", xff, "203.0.113.7:"), want: "10.0.0.1"},
		{name: "XFF IPv4 in brackets", r: req("10.0.0.1:80", xff, "[203.0.113.7]"), want: "10.0.0.1"},
		{name: "XFF unterminated bracket", r: req("10.0.0.1:80", xff, "[2001:db8::7"), want: "10.0.0.1"},
		{name: "XFF junk after bracket", r: req("10.0.0.1:80", xff, "[2001:db8::7]x"), want: "10.0.0.1"},
		{name: "XFF quoted", r: req("10.0.0.1:80", xff, `"203.0.113.7"`), want: "10.0.0.1"},
		{name: "XFF CIDR", r: req("10.0.0.1:80", xff, "203.0.113.0/24"), want: "10.0.0.1"},
		{name: "XFF malformed hides spoof", r: req("10.0.0.1:80", xff, "6.6.6.6, x, 10.0.0.2, 10.0.0.3"), want: "10.0.0.2"},

		// Forwarded.
		{name: "Forwarded single", r: req("10.0.0.1:80", fwd, "for=203.0.113.7"), want: "203.0.113.7"},
		{name: "Forwarded quoted IPv6 and port", r: req("10.0.0.1:80", fwd, `for="[2001:db8::1]:4711"`), want: "2001:db8::1"},
		{name: "Forwarded quoted IPv6", r: req("10.0.0.1:80", fwd, `for="[2001:db8::1]"`), want: "2001:db8::1"},
		{name: "Forwarded quoted IPv4 port", r: req("10.0.0.1:80", fwd, `for="192.0.2.60:8080"`), want: "192.0.2.60"},
		{name: "Forwarded unquoted port", r: req("10.0.0.1:80", fwd, `for=192.0.2.60:8080`), want: "192.0.2.60"},
		{name: "Forwarded obfuscated port", r: req("10.0.0.1:80", fwd, `for="192.0.2.60:_abc"`), want: "192.0.2.60"},
		{name: "Forwarded case-insensitive name", r: req("10.0.0.1:80", fwd, "For=203.0.113.7;PROTO=https"), want: "203.0.113.7"},
		{name: "Forwarded other pairs", r: req("10.0.0.1:80", fwd, `proto=https; for=203.0.113.7; by="[fd00::1]";host="a;b,c"`), want: "203.0.113.7"},
		{name: "Forwarded chain", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for=203.0.113.7;proto=http, for="[fd00::2]"`), want: "203.0.113.7"},
		{name: "Forwarded multi-line", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for=203.0.113.7`, fwd, `for=10.0.0.2`), want: "203.0.113.7"},
		{name: "Forwarded comma in quotes", r: req("10.0.0.1:80", fwd, `for=203.0.113.7;host="x,for=6.6.6.6"`), want: "203.0.113.7"},
		{name: "Forwarded escaped quote", r: req("10.0.0.1:80", fwd, `for=203.0.113.7;ext="a\",for=6.6.6.6"`), want: "203.0.113.7"},
		{name: "Forwarded escaped backslash", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for=203.0.113.7;ext="a\\"`), want: "203.0.113.7"},
		{name: "Forwarded escaped backslash and quote", r: req("10.0.0.1:80", fwd, `for=6.6.6.6;x="a\\\", for=203.0.113.7"`), want: "6.6.6.6"},
		{name: "Forwarded escaped address", r: req("10.0.0.1:80", fwd, `for="\[2001:db8::1\]"`), want: "2001:db8::1"},
		{name: "Forwarded IPv4-mapped", r: req("10.0.0.1:80", fwd, `for="[::ffff:203.0.113.7]"`), want: "203.0.113.7"},
		{name: "Forwarded all trusted", r: req("10.0.0.1:80", fwd, `for=10.0.0.3, for=10.0.0.2`), want: "10.0.0.3"},
		{name: "Forwarded empty elements", r: req("10.0.0.1:80", fwd, `for=203.0.113.7, , ,for=10.0.0.2,`), want: "203.0.113.7"},
		{name: "Forwarded element without pairs", r: req("10.0.0.1:80", fwd, `for=203.0.113.7, ;, for=10.0.0.2`), want: "10.0.0.2"},
		{name: "Forwarded unterminated quote on the left", r: req("10.0.0.1:80", fwd, `for="6.6.6.6, for=203.0.113.7`), want: "203.0.113.7"},

		// Forwarded: whatever cannot be vouched for ends the walk.
		{name: "Forwarded unknown", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for=unknown`), want: "10.0.0.1"},
		{name: "Forwarded unknown quoted uppercase", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for="UNKNOWN", for=10.0.0.2`), want: "10.0.0.2"},
		{name: "Forwarded obfuscated", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for=_hidden`), want: "10.0.0.1"},
		{name: "Forwarded obfuscated after trusted", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for="_SEVKISEK", for=10.0.0.2`), want: "10.0.0.2"},
		{name: "Forwarded no for", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, proto=https`), want: "10.0.0.1"},
		{name: "Forwarded duplicate for", r: req("10.0.0.1:80", fwd, `for=6.6.6.6;for=203.0.113.7`), want: "10.0.0.1"},
		{name: "Forwarded unquoted IPv6", r: req("10.0.0.1:80", fwd, `for=2001:db8::1`), want: "2001:db8::1"},
		{name: "Forwarded unterminated quote", r: req("10.0.0.1:80", fwd, `for="203.0.113.7`), want: "10.0.0.1"},
		{name: "Forwarded stray quote", r: req("10.0.0.1:80", fwd, `for=203.0.113.7"`), want: "10.0.0.1"},
		{name: "Forwarded space around =", r: req("10.0.0.1:80", fwd, `for = 203.0.113.7`), want: "10.0.0.1"},
		{name: "Forwarded empty value", r: req("10.0.0.1:80", fwd, `for=`), want: "10.0.0.1"},
		{name: "Forwarded empty quoted value", r: req("10.0.0.1:80", fwd, `for=""`), want: "10.0.0.1"},
		{name: "Forwarded junk after value", r: req("10.0.0.1:80", fwd, `for="1.2.3.4"x`), want: "10.0.0.1"},
		{name: "Forwarded control in quotes", r: req("10.0.0.1:80", fwd, "for=\"1.2.3.4\x01\""), want: "10.0.0.1"},
		{name: "Forwarded bad port", r: req("10.0.0.1:80", fwd, `for="[2001:db8::1]:x"`), want: "10.0.0.1"},
		{name: "Forwarded malformed hides spoof", r: req("10.0.0.1:80", fwd, `for=6.6.6.6, for=bad!, for=10.0.0.2`), want: "10.0.0.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trusted := testTrusted
			if tt.custom != nil {
				trusted = *tt.custom
			}
			got, ok := identity.ClientIP(tt.r, trusted)
			if tt.want == "" {
				if ok || got.IsValid() {
					t.Fatalf("ClientIP = %v, %v; want zero Addr, false", got, ok)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("ClientIP = %v, %v; want %s, true", got, ok, tt.want)
			}
		})
	}
	if got, ok := identity.ClientIP(nil, testTrusted); ok || got.IsValid() {
		t.Errorf("ClientIP(nil) = %v, %v", got, ok)
	}
}

// TestClientIPBounded checks that hostile header sizes are handled within
// the documented bounds and still give a sensible, safe answer.
func TestClientIPBounded(t *testing.T) {
	many := func(entry string, n int) string {
		return strings.Repeat(entry+", ", n-1) + entry
	}
	mib := 1 << 20
	manyLines := make([]string, 0, 2*10000)
	for range 10000 {
		manyLines = append(manyLines, xff, "6.6.6.6")
	}
	manyLines = append(manyLines, xff, "203.0.113.7", xff, "10.0.0.2")
	// The client sits beyond 10,000 empty lines: every line costs budget.
	emptyLines := []string{xff, "6.6.6.6"}
	for range 10000 {
		emptyLines = append(emptyLines, xff, "")
	}
	emptyLines = append(emptyLines, xff, "10.0.0.2")
	tests := []struct {
		name string
		r    *http.Request
		want string
	}{
		{"10k spoofed entries then client", req("10.0.0.1:80", xff, many("6.6.6.6", 10000)+", 203.0.113.7, 10.0.0.2"), "203.0.113.7"},
		// Only MaxForwardedHops hops are examined: the leftmost of those is the answer.
		{"10k trusted entries", req("10.0.0.1:80", xff, "6.6.6.6, "+many("10.0.0.9", 9999)+", 10.0.0.2"), "10.0.0.9"},
		{"10k lines", req("10.0.0.1:80", manyLines...), "203.0.113.7"},
		{"10k empty lines", req("10.0.0.1:80", emptyLines...), "10.0.0.2"},
		{"1 MiB garbage then client", req("10.0.0.1:80", xff, strings.Repeat("x", mib)+", 203.0.113.7"), "203.0.113.7"},
		{"1 MiB entry", req("10.0.0.1:80", xff, strings.Repeat("1", mib)), "10.0.0.1"},
		{"1 MiB entry after trusted hop", req("10.0.0.1:80", xff, strings.Repeat("1", mib)+",10.0.0.2"), "10.0.0.2"},
		{"1 MiB of commas", req("10.0.0.1:80", xff, strings.Repeat(",", mib)), "10.0.0.1"},
		{"1 MiB of commas then client", req("10.0.0.1:80", xff, "6.6.6.6"+strings.Repeat(",", mib)+"203.0.113.7"), "203.0.113.7"},
		{"1 MiB IPv6 zone", req("10.0.0.1:80", xff, "fe80::1%"+strings.Repeat("z", mib)), "10.0.0.1"},
		{"1 MiB Forwarded quotes", req("10.0.0.1:80", fwd, strings.Repeat(`"`, mib)), "10.0.0.1"},
		{"1 MiB Forwarded escapes", req("10.0.0.1:80", fwd, `for="`+strings.Repeat(`\"`, mib/2)+`"`), "10.0.0.1"},
		{"1 MiB Forwarded backslashes", req("10.0.0.1:80", fwd, strings.Repeat(`\\\\\"`, mib/6)+`, for=203.0.113.7`), "203.0.113.7"},
		{"1 MiB Forwarded quoted pair", req("10.0.0.1:80", fwd, `for="`+strings.Repeat("a", mib)+`"`), "10.0.0.1"},
		{"1 MiB Forwarded semicolons", req("10.0.0.1:80", fwd, strings.Repeat(";", mib)+"for=203.0.113.7"), "10.0.0.1"},
		{"10k Forwarded elements", req("10.0.0.1:80", fwd, many("for=6.6.6.6", 10000)+`, for="[2001:db8::1]:4711", for=10.0.0.2`), "2001:db8::1"},
		{"10k trusted Forwarded elements", req("10.0.0.1:80", fwd, many("for=10.0.0.9", 10000)), "10.0.0.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := identity.ClientIP(tt.r, testTrusted)
			if !ok || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("ClientIP = %v, %v; want %s, true", got, ok, tt.want)
			}
		})
	}
}

// TestClientIPHopLimit checks the exact MaxForwardedHops boundary.
func TestClientIPHopLimit(t *testing.T) {
	chain := func(n int) string {
		hops := make([]string, n)
		for i := range hops {
			hops[i] = netip.AddrFrom4([4]byte{10, 0, 1, byte(n - i)}).String()
		}
		return "203.0.113.7, " + strings.Join(hops, ", ")
	}
	// MaxForwardedHops-1 trusted hops: the client is the next entry.
	if got, _ := identity.ClientIP(req("10.0.0.1:80", xff, chain(identity.MaxForwardedHops-1)), testTrusted); got != netip.MustParseAddr("203.0.113.7") {
		t.Errorf("%d trusted hops: got %v, want 203.0.113.7", identity.MaxForwardedHops-1, got)
	}
	// MaxForwardedHops trusted hops: the client is beyond the limit.
	want := netip.AddrFrom4([4]byte{10, 0, 1, identity.MaxForwardedHops})
	if got, _ := identity.ClientIP(req("10.0.0.1:80", xff, chain(identity.MaxForwardedHops)), testTrusted); got != want {
		t.Errorf("%d trusted hops: got %v, want %v", identity.MaxForwardedHops, got, want)
	}
}

func TestClientGroup(t *testing.T) {
	tests := []struct {
		addr string
		want string
	}{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
	}
	for _, tt := range tests {
		if got := identity.ClientGroup(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("ClientGroup(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if got := identity.ClientGroup(netip.Addr{}); got != "" {
		t.Errorf("ClientGroup(zero) = %q, want \"\"", got)
	}
}
