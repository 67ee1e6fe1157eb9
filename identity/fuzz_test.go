package identity_test

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate/identity"
)

// fuzzHeader adds value to h as one line per "\n"-separated part; an empty
// value adds nothing.
func fuzzHeader(h http.Header, name, value string) {
	if value == "" {
		return
	}
	for _, line := range strings.Split(value, "\n") {
		h.Add(name, line)
	}
}

// FuzzClientIP feeds hostile RemoteAddr, X-Forwarded-For and Forwarded
// values (lines separated by "\n") to ClientIP with testTrusted.
func FuzzClientIP(f *testing.F) {
	seeds := []struct{ remote, xff, fwd string }{
		{"203.0.113.7:4000", "1.1.1.1", ""},
		{"10.0.0.1:80", "203.0.113.7, 10.0.0.2", ""},
		{"10.0.0.1:80", "6.6.6.6, 203.0.113.7\n10.0.0.2, 10.0.0.3", ""},
		{"10.0.0.1:80", "10.0.0.4, 10.0.0.3", ""},
		{"10.0.0.1:80", "203.0.113.7, garbage, 10.0.0.2", ""},
		{"10.0.0.1:80", "[2001:db8::7]:5555, ::ffff:10.0.0.2", ""},
		{"10.0.0.1:80", "fe80::7%eth0,,unknown", ""},
		{"10.0.0.1:80", "\n\n", ""},
		{"[::1]:80", "", `for="[2001:db8::1]:4711"`},
		{"[::1]:80", "", `for=192.0.2.60;proto=http;by=203.0.113.43, for="_hidden"`},
		{"[::ffff:10.0.0.1]:80", "", `For="[fd00::2]", for=unknown, for=10.0.0.2`},
		{"10.0.0.1:80", "", `for=6.6.6.6;x="a\\\", for=203.0.113.7"`},
		{"10.0.0.1:80", "", `for="6.6.6.6, for=203.0.113.7`},
		{"10.0.0.1:80", "", `for="\[2001:db8::1\]:_p"; ;, "`},
		{"[fe80::1%eth0]:80", "1.1.1.1", ""},
		{"10.0.0.1", "1.1.1.1", ""},
		{"", "", ""},
		{"10.0.0.1:80", strings.Repeat("10.0.0.9, ", 40) + "10.0.0.2", ""},
		{"10.0.0.1:80", strings.Repeat("x", 9000) + ", 203.0.113.7", ""},
		{"10.0.0.1:80", "", strings.Repeat(`\"`, 5000)},
		{"10.0.0.1:80", "198.51.100.1", "for=203.0.113.7"},
		{"10.0.0.1:80", "203.0.113.7, 10.0.0.3", "for=10.0.0.3"},
		{"10.0.0.1:80", "203.0.113.7, 10.0.0.2", "for=6.6.6.6, for=203.0.113.7, for=10.0.0.2"},
	}
	for _, s := range seeds {
		f.Add(s.remote, s.xff, s.fwd)
	}
	f.Fuzz(func(t *testing.T, remote, xffValue, fwdValue string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		fuzzHeader(r.Header, xff, xffValue)
		fuzzHeader(r.Header, fwd, fwdValue)

		got, ok := identity.ClientIP(r, testTrusted)
		ap, err := netip.ParseAddrPort(remote)
		if err != nil {
			if ok || got.IsValid() {
				t.Fatalf("unparsable RemoteAddr %q: got %v, %v", remote, got, ok)
			}
			return
		}
		peer := ap.Addr().WithZone("").Unmap()
		both := len(r.Header[xff]) > 0 && len(r.Header[fwd]) > 0
		if !ok && both && testTrusted.Contains(peer) {
			// The two headers tell two stories: which the client wrote
			// cannot be told, so no answer. Each alone has one.
			for _, name := range []string{xff, fwd} {
				one := &http.Request{RemoteAddr: remote, Header: http.Header{name: r.Header[name]}}
				if a, ok := identity.ClientIP(one, testTrusted); !ok || !a.IsValid() {
					t.Fatalf("%s alone: ClientIP = %v, %v", name, a, ok)
				}
			}
			return
		}
		if !ok || !got.IsValid() {
			t.Fatalf("ClientIP = %v, %v for RemoteAddr %q", got, ok, remote)
		}
		if got.Zone() != "" || got.Is4In6() {
			t.Fatalf("ClientIP = %v: not normalized", got)
		}
		if !testTrusted.Contains(peer) {
			if got != peer {
				t.Fatalf("untrusted peer %v: ClientIP = %v", peer, got)
			}
			return
		}
		if again, _ := identity.ClientIP(r, testTrusted); again != got {
			t.Fatalf("ClientIP not deterministic: %v then %v", got, again)
		}
		// Once the walk has found an untrusted client it never looks
		// further left, so nothing a client prepends can change it (or,
		// with both headers, can only make the two disagree: no answer).
		if got != peer && !testTrusted.Contains(got) {
			name := fwd
			if len(r.Header[xff]) > 0 {
				name = xff
			}
			r.Header[name] = append([]string{"6.6.6.6, for=6.6.6.6"}, r.Header[name]...)
			if spoofed, ok := identity.ClientIP(r, testTrusted); spoofed != got && (ok || !both) {
				t.Fatalf("prepending a line changed ClientIP from %v to %v", got, spoofed)
			}
		}
	})
}

// FuzzAPIKey feeds hostile Authorization (lines separated by "\n") and
// X-API-Key values to APIKey, and the X-API-Key value to UserID.
func FuzzAPIKey(f *testing.F) {
	seeds := []struct {
		auth, key       string
		hasAuth, hasKey bool
	}{
		{"Bearer abc", "", true, false},
		{"bearer abc", "def", true, true},
		{"Basic dXNlcjpwYXNz", "key-1", true, true},
		{"Bearer ", "", true, false},
		{"Bearer", "key-1", true, true},
		{"Bearer abc\x01", "", true, false},
		{"", "abc\xff", false, true},
		{"", "", false, true},
		{"Bearer a\nBearer b", "", true, false},
		{"Bearerabc", "x y", true, true},
		{"", strings.Repeat("k", identity.MaxKeyLength+1), false, true},
		{"", "Zoë\u0085", false, true},
		{"", "", false, false},
	}
	for _, s := range seeds {
		f.Add(s.auth, s.key, s.hasAuth, s.hasKey)
	}
	f.Fuzz(func(t *testing.T, auth, apiKey string, hasAuth, hasKey bool) {
		h := http.Header{}
		if hasAuth {
			h["Authorization"] = strings.Split(auth, "\n")
		}
		if hasKey {
			h["X-Api-Key"] = []string{apiKey}
		}
		key, ok, err := identity.APIKey(h)
		switch {
		case err != nil:
			if !errors.Is(err, identity.ErrMalformedKey) {
				t.Fatalf("APIKey error %v does not wrap ErrMalformedKey", err)
			}
			if key != "" || ok {
				t.Fatalf("APIKey = %q, %v with error %v", key, ok, err)
			}
		case ok:
			if len(key) == 0 || len(key) > identity.MaxKeyLength {
				t.Fatalf("APIKey = %q: length %d", key, len(key))
			}
			for i := 0; i < len(key); i++ {
				if c := key[i]; c < 0x21 || c > 0x7e {
					t.Fatalf("APIKey = %q: byte %#x", key, c)
				}
			}
			if !strings.Contains(auth, key) && !strings.Contains(apiKey, key) {
				t.Fatalf("APIKey = %q is in no header", key)
			}
		default:
			if key != "" {
				t.Fatalf("APIKey = %q without ok", key)
			}
			if hasKey {
				t.Fatalf("X-API-Key %q present but APIKey found nothing", apiKey)
			}
		}

		u := http.Header{"X-Auth-User": {apiKey}}
		id, ok, err := identity.UserID(u, "X-Auth-User")
		switch {
		case err != nil:
			if !errors.Is(err, identity.ErrMalformedUser) || id != "" || ok {
				t.Fatalf("UserID = %q, %v, %v", id, ok, err)
			}
		case !ok:
			t.Fatalf("UserID found nothing in a present header")
		default:
			if id != apiKey || id == "" || len(id) > 256 || !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl) {
				t.Fatalf("UserID accepted %q", id)
			}
		}
	})
}
