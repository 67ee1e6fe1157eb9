package engine_test

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// TestShadowFileKeepsGuards: with every rate limit of the file in shadow
// (shadow: true), the login guard and concurrency limits are still
// enforced, as docs/guides/shadow-and-simulate.md promises: the sixth
// wrong password for an account is refused (and so never reaches the upstream).
func TestShadowFileKeepsGuards(t *testing.T) {
	c := fixture.StillClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		p := fixture.Quickstart(t, append(trustLoopback, "version: quickstart-1", "version: quickstart-1\nshadow: true")...)
		e := newEngine(t, p, s, c.Now)
		for i := 0; i < 5; i++ {
			if v := login(e, "/login", fmt.Sprintf("203.0.113.%d", i), `{"username":"alice","password":"guess"}`); !v.Outcome.Admitted() {
				t.Fatalf("wrong password %d: %v %v, want admitted (for the upstream's 401)", i, v.Outcome, v.Reason)
			}
		}
		if v := login(e, "/login", "203.0.113.9", `{"username":"alice","password":"demo"}`); !refusedBy(v, engine.ReasonLoginLocked) {
			t.Fatalf("the sixth attempt on a locked account: %v %v, want refused (429) as locked", v.Outcome, v.Reason)
		}
	})
}

// unlimitedConfig is the quickstart with an unlimited plan "internal"
// (the key internal-key), and an allowlist naming the user carol, the
// tenant ops and the addresses 198.51.100.0/24; 127/8 is trusted, so
// tests choose client addresses and users.
func unlimitedConfig(t *testing.T) *policy.Policy {
	t.Helper()
	return fixture.Quickstart(t, append(trustLoopback,
		"  pro:       {algorithm: sliding_log, rate: 1000, period: 1m}", "  pro:       {algorithm: sliding_log, rate: 1000, period: 1m}\n  internal: {unlimited: true}",
		"api_keys:\n", fmt.Sprintf("allowlist: {users: [carol], tenants: [ops], addresses: [198.51.100.0/24]}\napi_keys:\n"+
			"  - {id: internal, digest: %q, plan: internal}\n  - {id: ops, digest: %q, tenant: ops, plan: free}\n",
			identity.KeyDigest("internal-key"), identity.KeyDigest("ops-key")))...)
}

// TestUnlimitedAndAllowlist: an unlimited plan's key, an allowlisted
// user, tenant and address are counted (budget "unlimited") and never
// refused by a rate limit (the plan's, a route's own shaping limit),
// while the subjects beside them are limited as before; the guards
// still apply to them: an invalid key from an allowlisted address is
// refused as invalid (401) and charged to that address, and a login from
// it cannot guess passwords past the lock.
func TestUnlimitedAndAllowlist(t *testing.T) {
	// Invalid keys count in a fixed window of a minute: a clock that
	// stands still.
	c := fixture.StillClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		m, err := engine.NewMetrics(nil)
		if err != nil {
			t.Fatal(err)
		}
		e := newEngine(t, unlimitedConfig(t), s, c.Now, func(o *engine.Options) { o.Metrics = m })
		count := func(name string, n int, from string, header ...string) (ok, refused int) {
			for i := 0; i < n; i++ {
				switch v := get(e, "/api/items", from, header...); {
				case v.Outcome.Admitted():
					ok++
				case v.Outcome == engine.Refused:
					refused++
				default:
					t.Fatalf("%s: %v %v", name, v.Outcome, v.Reason)
				}
			}
			return ok, refused
		}
		for _, c := range []struct {
			name   string
			from   string
			header []string
			want   int
		}{
			{"an unlimited plan's key", "", []string{"X-API-Key", "internal-key"}, 150},
			{"an allowlisted user", "", []string{"X-User-ID", "carol"}, 150},
			{"an allowlisted tenant's key", "", []string{"X-API-Key", "ops-key"}, 150},
			{"an allowlisted address", "198.51.100.5", nil, 150},
			{"another user (free: 100)", "", []string{"X-User-ID", "dave"}, 100},
			{"another address (anonymous: 20)", "203.0.113.5", nil, 20},
		} {
			if ok, _ := count(c.name, 150, c.from, c.header...); ok != c.want {
				t.Errorf("%s: %d of 150 admitted, want %d", c.name, ok, c.want)
			}
		}
		if got := counterValue(m.Decisions.WithLabelValues("unlimited", "api", "internal", "allowed")); got != 150 {
			t.Errorf("the unlimited plan's requests counted %v, want 150", got)
		}
		// A route's own limit (webhooks: 10/s, burst 1, held up to 2 s)
		// does not refuse or delay an unlimited subject either. On the
		// still clock a charged one would be: the 22nd refused, each
		// before it held 100 ms longer than the last. A delay comes only
		// from a budget charged, and every decision is counted under the
		// budget that made it: all 30 under "unlimited" is none charged.
		for i := 0; i < 30; i++ {
			if v := get(e, "/api/webhooks", "", "X-API-Key", "internal-key"); !v.Outcome.Admitted() || v.Delay != 0 {
				t.Fatalf("webhook %d: %v %v, delay %v", i, v.Outcome, v.Reason, v.Delay)
			}
		}
		if got := counterValue(m.Decisions.WithLabelValues("unlimited", "webhooks", "internal", "allowed")); got != 30 {
			t.Errorf("the unlimited plan's webhooks counted %v under budget unlimited, want 30 (none charged to the shaping limit)", got)
		}
		// Guards: invalid keys from an allowlisted address are limited.
		for i := 0; i < 10; i++ {
			if v := get(e, "/api/items", "198.51.100.6", "X-API-Key", fmt.Sprintf("guess-%d", i)); !invalidKey(v) {
				t.Fatalf("guess %d from an allowlisted address: %v %v, want an invalid key (401)", i, v.Outcome, v.Reason)
			}
		}
		if v := get(e, "/api/items", "198.51.100.6", "X-API-Key", "guess"); !refusedBy(v, engine.ReasonInvalidKeys) {
			t.Fatalf("11th guess from an allowlisted address: %v %v, want refused (429) for invalid keys", v.Outcome, v.Reason)
		}
		for i := 0; i < 5; i++ {
			if v := login(e, "/login", "198.51.100.7", `{"username":"alice","password":"guess"}`); !v.Outcome.Admitted() {
				t.Fatalf("wrong password %d: %v %v, want admitted (for the upstream's 401)", i, v.Outcome, v.Reason)
			}
		}
		if v := login(e, "/login", "198.51.100.7", `{"username":"alice","password":"demo"}`); !refusedBy(v, engine.ReasonLoginLocked) {
			t.Fatalf("a locked account from an allowlisted address: %v %v, want refused (429) as locked", v.Outcome, v.Reason)
		}
	})
}
