package engine_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// jwtConfig is the quickstart verifying bearer JWTs against idp's JWKS
// (RS256 and ES256, issuer and audience checked, plan and tenant from
// claims), with 127/8 trusted so tests choose client addresses.
func jwtConfig(t *testing.T, idp *jwttest.IdP) *policy.Policy {
	t.Helper()
	return fixture.Quickstart(t, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, `trusted_proxies: [127.0.0.0/8]
  jwt:
    jwks_url: `+idp.JWKSURL()+`
    issuer: https://idp.example
    audience: [tollgate-api]
    algorithms: [RS256, ES256]
    tenant_claim: org
    plan_claim: plan`)
}

// claimsAt is a token's claims for subject sub, valid at now for the
// issuer and audience of jwtConfig.
func claimsAt(sub string, now time.Time) jwttest.Claims {
	return jwttest.Valid(sub, now).With("iss", "https://idp.example").With("aud", []string{"tollgate-api"})
}

// TestJWTLimitedPerSubject: a valid token is charged to its subject
// under the plan its claim names (the free plan: exactly 100 a minute,
// whichever key signed the token and from whichever address), a token
// without a plan claim gets identity.user_plan, one naming no plan the
// same, and its RateLimit-Policy shows the plan applied; no subject or
// token reaches the logs.
func TestJWTLimitedPerSubject(t *testing.T) {
	c := fixture.StillClock()
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		rsa, ec := jwttest.NewKey(t, "RS256", "rsa-1"), jwttest.NewKey(t, "ES256", "ec-1")
		idp := jwttest.NewIdP(t, rsa, ec)
		logs := &fixture.SyncBuffer{}
		e := newEngine(t, jwtConfig(t, idp), s, c.Now, func(o *engine.Options) {
			o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		claims := func(sub string) jwttest.Claims { return claimsAt(sub, c.Now()) }
		pro := jwttest.Sign(t, rsa, claims("carol").With("plan", "pro"))
		if v := get(e, "/api/items", "", "Authorization", "Bearer "+pro); !v.Outcome.Admitted() || !strings.Contains(rateLimitPolicy(v), `"pro";q=1000`) {
			t.Fatalf("pro token: %v %v, RateLimit-Policy %q", v.Outcome, v.Reason, rateLimitPolicy(v))
		}
		// dave's tokens, signed by either key and sent from 100
		// addresses, share one budget: the free plan's 100 a minute.
		toks := []string{jwttest.Sign(t, rsa, claims("dave").With("plan", "free")), jwttest.Sign(t, ec, claims("dave").With("plan", "free"))}
		admitted := 0
		for i := 0; i < 110; i++ {
			switch v := get(e, "/api/items", fmt.Sprintf("203.0.113.%d", i), "Authorization", "Bearer "+toks[i%2]); {
			case v.Outcome.Admitted():
				admitted++
				if p := rateLimitPolicy(v); !strings.Contains(p, `"free.minute";q=100`) {
					t.Fatalf("free token: RateLimit-Policy %q", p)
				}
			case v.Outcome == engine.Refused:
			default:
				t.Fatalf("request %d: %v %v", i, v.Outcome, v.Reason)
			}
		}
		if admitted != 100 {
			t.Fatalf("one subject got %d through, want exactly 100", admitted)
		}
		// Another subject has its own budget.
		if v := get(e, "/api/items", "", "Authorization", "Bearer "+jwttest.Sign(t, rsa, claims("erin").With("plan", "free"))); !v.Outcome.Admitted() {
			t.Fatalf("another subject: %v %v", v.Outcome, v.Reason)
		}
		// No plan claim, or one naming no plan: the user plan (free).
		for _, cl := range []jwttest.Claims{claims("frank"), claims("grace").With("plan", "enterprise")} {
			if v := get(e, "/api/items", "", "Authorization", "Bearer "+jwttest.Sign(t, ec, cl)); !v.Outcome.Admitted() || !strings.Contains(rateLimitPolicy(v), `"free.minute"`) {
				t.Fatalf("plan %v: %v %v, RateLimit-Policy %q", cl["plan"], v.Outcome, v.Reason, rateLimitPolicy(v))
			}
		}
		for _, raw := range []string{"carol", "dave", pro, toks[0]} {
			if strings.Contains(logs.String(), raw) {
				t.Fatalf("the logs hold %q", raw)
			}
		}
	})
}

// TestJWTKeyRotation: the IdP rotates its keys (a new key in, the old
// one out); the first token signed by the new key makes the engine
// fetch the JWKS again instead of failing, and from then on tokens of
// the old key are refused as invalid (401).
func TestJWTKeyRotation(t *testing.T) {
	old, next := jwttest.NewKey(t, "RS256", "2026-04"), jwttest.NewKey(t, "RS256", "2026-05")
	idp := jwttest.NewIdP(t, old)
	c := fixture.StillClock()
	s := fixture.MemoryStore(t, c.Now)
	e := newEngine(t, jwtConfig(t, idp), s, c.Now)
	oldTok, newTok := jwttest.Sign(t, old, claimsAt("alice", c.Now())), jwttest.Sign(t, next, claimsAt("alice", c.Now()))
	if v := get(e, "/api/items", "", "Authorization", "Bearer "+oldTok); !v.Outcome.Admitted() {
		t.Fatalf("before the rotation: %v %v", v.Outcome, v.Reason)
	}
	idp.SetKeys(next)
	before := idp.Fetches.Load()
	if v := get(e, "/api/items", "", "Authorization", "Bearer "+newTok); !v.Outcome.Admitted() {
		t.Fatalf("a token of the key rotated in: %v %v", v.Outcome, v.Reason)
	}
	if n := idp.Fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS fetches for the new key, want 1", n)
	}
	if v := get(e, "/api/items", "", "Authorization", "Bearer "+oldTok); !invalidKey(v) {
		t.Fatalf("a token of the key rotated out: %v %v, want an invalid key (401)", v.Outcome, v.Reason)
	}
}
