package gateway

import (
	"net/netip"
	"testing"
)

// TestClientKey: a client's connections are counted under its IPv4
// address or its IPv6 /64, as identity.ClientGroup groups clients.
func TestClientKey(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{"203.0.113.7", "203.0.113.7/32"},
		{"::ffff:203.0.113.7", "203.0.113.7/32"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
	} {
		if got := clientKey(netip.MustParseAddr(tt.addr)); got.String() != tt.want {
			t.Errorf("clientKey(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
}
