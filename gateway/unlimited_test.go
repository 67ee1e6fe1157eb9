package gateway_test

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// TestShadowFileKeepsGuards: with every rate limit of the file in shadow
// (shadow: true), the login guard and concurrency limits are still
// enforced, as the README promises: the sixth wrong password for an
// account is refused and never reaches the upstream.
func TestShadowFileKeepsGuards(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 0)
		p := quickstart(t, up.URL, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
			"version: quickstart-1", "version: quickstart-1\nshadow: true")
		g := start(t, p, redisURL)
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, fmt.Sprintf("203.0.113.%d", i), "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		if code := postLogin(t, g, "203.0.113.9", "/login", "application/json", `{"username":"alice","password":"demo"}`); code != 429 {
			t.Fatalf("the sixth attempt on a locked account: %d, want 429", code)
		}
	})
}

// unlimitedConfig is the quickstart with an unlimited plan "internal"
// (the key internal-key), and an allowlist naming the user carol, the
// tenant ops and the addresses 198.51.100.0/24; 127/8 is trusted, so
// tests choose client addresses and users.
func unlimitedConfig(t *testing.T, upstream string) *policy.Policy {
	t.Helper()
	p := quickstart(t, upstream, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
		"  pro:       {algorithm: sliding_log, rate: 1000, period: 1m}", "  pro:       {algorithm: sliding_log, rate: 1000, period: 1m}\n  internal: {unlimited: true}",
		"api_keys:\n", fmt.Sprintf("allowlist: {users: [carol], tenants: [ops], addresses: [198.51.100.0/24]}\napi_keys:\n"+
			"  - {id: internal, digest: %q, plan: internal}\n  - {id: ops, digest: %q, tenant: ops, plan: free}\n",
			identity.KeyDigest("internal-key"), identity.KeyDigest("ops-key")))
	return p
}

// TestUnlimitedAndAllowlist: an unlimited plan's key, an allowlisted
// user, tenant and address are counted (budget "unlimited") and never
// refused by a rate limit (the plan's, a route's own shaping limit),
// while the subjects beside them are limited as before; the guards
// still apply to them: an invalid key from an allowlisted address is a
// 401 charged to that address, and a login from it cannot guess
// passwords past the lock.
func TestUnlimitedAndAllowlist(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		// Accepts the password demo. Invalid keys count in a fixed window
		// of a minute: a clock that stands still.
		g := startStill(t, unlimitedConfig(t, policy.BuiltinEcho), redisURL)
		count := func(name string, n int, header ...string) (ok, refused int) {
			for i := 0; i < n; i++ {
				switch code := get(t, g.public+"/api/items", header...).StatusCode; code {
				case 200:
					ok++
				case 429:
					refused++
				default:
					t.Fatalf("%s: %d", name, code)
				}
			}
			return ok, refused
		}
		for _, c := range []struct {
			name   string
			header []string
			want   int
		}{
			{"an unlimited plan's key", []string{"X-API-Key", "internal-key"}, 150},
			{"an allowlisted user", []string{"X-User-ID", "carol"}, 150},
			{"an allowlisted tenant's key", []string{"X-API-Key", "ops-key"}, 150},
			{"an allowlisted address", []string{"X-Forwarded-For", "198.51.100.5"}, 150},
			{"another user (free: 100)", []string{"X-User-ID", "dave"}, 100},
			{"another address (anonymous: 20)", []string{"X-Forwarded-For", "203.0.113.5"}, 20},
		} {
			if ok, _ := count(c.name, 150, c.header...); ok != c.want {
				t.Errorf("%s: %d of 150 admitted, want %d", c.name, ok, c.want)
			}
		}
		if got := metric(t, g, `tollgate_decisions_total{budget="unlimited",outcome="allowed",plan="internal",route_group="api"}`); got != 150 {
			t.Errorf("the unlimited plan's requests counted %v, want 150", got)
		}
		// A route's own limit (webhooks: 10/s, burst 1, held up to 2 s)
		// does not refuse or delay an unlimited subject either. On the
		// still clock a charged one would be: the 22nd refused, each
		// before it held 100 ms longer than the last. A delay comes only
		// from a budget charged, and every decision is counted under the
		// budget that made it: all 30 under "unlimited" is none charged.
		for i := 0; i < 30; i++ {
			if code := get(t, g.public+"/api/webhooks", "X-API-Key", "internal-key").StatusCode; code != 200 {
				t.Fatalf("webhook %d: %d", i, code)
			}
		}
		if got := metric(t, g, `tollgate_decisions_total{budget="unlimited",outcome="allowed",plan="internal",route_group="webhooks"}`); got != 30 {
			t.Errorf("the unlimited plan's webhooks counted %v under budget unlimited, want 30 (none charged to the shaping limit)", got)
		}
		// Guards: invalid keys from an allowlisted address are limited.
		for i := 0; i < 10; i++ {
			if code := get(t, g.public+"/api/items", "X-API-Key", fmt.Sprintf("guess-%d", i), "X-Forwarded-For", "198.51.100.6").StatusCode; code != 401 {
				t.Fatalf("guess %d from an allowlisted address: %d", i, code)
			}
		}
		if code := get(t, g.public+"/api/items", "X-API-Key", "guess", "X-Forwarded-For", "198.51.100.6").StatusCode; code != 429 {
			t.Fatalf("11th guess from an allowlisted address: %d, want 429", code)
		}
		for i := 0; i < 5; i++ {
			if code := postLogin(t, g, "198.51.100.7", "/login", "application/json", `{"username":"alice","password":"guess"}`); code != 401 {
				t.Fatalf("wrong password %d: %d", i, code)
			}
		}
		if code := postLogin(t, g, "198.51.100.7", "/login", "application/json", `{"username":"alice","password":"demo"}`); code != 429 {
			t.Fatalf("a locked account from an allowlisted address: %d, want 429", code)
		}
	})
}
