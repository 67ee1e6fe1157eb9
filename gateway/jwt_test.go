package gateway_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/policy"
)

// jwtConfig is the quickstart verifying bearer JWTs against idp's JWKS
// (RS256 and ES256, issuer and audience checked, plan and tenant from
// claims), with 127/8 trusted so tests choose client addresses.
func jwtConfig(t *testing.T, upstream string, idp *jwttest.IdP) *policy.Policy {
	t.Helper()
	p := quickstart(t, upstream, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, `trusted_proxies: [127.0.0.0/8]
  jwt:
    jwks_url: `+idp.JWKSURL()+`
    issuer: https://idp.example
    audience: [tollgate-api]
    algorithms: [RS256, ES256]
    tenant_claim: org
    plan_claim: plan`)
	return p
}

const issuer = "https://idp.example"

func claims(sub string) jwttest.Claims { return claimsAt(sub, time.Now()) }

// claimsAt is claims for a gateway whose clock reads now.
func claimsAt(sub string, now time.Time) jwttest.Claims {
	return jwttest.Valid(sub, now).With("iss", issuer).With("aud", []string{"tollgate-api"})
}

// TestJWTLimitedPerSubject: a valid token is charged to its subject
// under the plan its claim names (the free plan: exactly 100 a minute,
// whichever key signed the token and from whichever address), a token
// without a plan claim gets identity.user_plan, one naming no plan the
// same, and its RateLimit-Policy shows the plan applied.
func TestJWTLimitedPerSubject(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		rsa, ec := jwttest.NewKey(t, "RS256", "rsa-1"), jwttest.NewKey(t, "ES256", "ec-1")
		idp := jwttest.NewIdP(t, rsa, ec)
		up := newUpstream(t)
		g := start(t, jwtConfig(t, up.URL, idp), redisURL)
		pro := jwttest.Sign(t, rsa, claims("carol").With("plan", "pro"))
		resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+pro)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"pro";q=1000`) {
			t.Fatalf("pro token: %d, RateLimit-Policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
		if got := up.lastHeader().Get("Authorization"); got != "Bearer "+pro {
			t.Fatalf("the upstream got Authorization %q, want the token charged", got)
		}
		// alice's tokens, signed by either key and sent from 100
		// addresses, share one budget: the free plan's 100 a minute.
		toks := []string{jwttest.Sign(t, rsa, claims("dave").With("plan", "free")), jwttest.Sign(t, ec, claims("dave").With("plan", "free"))}
		admitted := 0
		for i := 0; i < 110; i++ {
			resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+toks[i%2], "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
			switch resp.StatusCode {
			case 200:
				admitted++
				if p := resp.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"free.minute";q=100`) {
					t.Fatalf("free token: RateLimit-Policy %q", p)
				}
			case 429:
			default:
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
		if admitted != 100 {
			t.Fatalf("one subject got %d through, want exactly 100", admitted)
		}
		// Another subject has its own budget.
		if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+jwttest.Sign(t, rsa, claims("erin").With("plan", "free"))); resp.StatusCode != 200 {
			t.Fatalf("another subject: %d", resp.StatusCode)
		}
		// No plan claim, or one naming no plan: the user plan (free).
		for _, c := range []jwttest.Claims{claims("frank"), claims("grace").With("plan", "enterprise")} {
			resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+jwttest.Sign(t, ec, c))
			if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"free.minute"`) {
				t.Fatalf("plan %v: %d, RateLimit-Policy %q", c["plan"], resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
			}
		}
		for _, raw := range []string{"carol", "dave", pro, toks[0]} {
			if strings.Contains(g.logs.String(), raw) {
				t.Fatalf("the logs hold %q", raw)
			}
		}
	})
}

// TestInvalidJWTsChargedToTheAddress: every token that does not verify
// is a 401 problem (invalid-token), never reaches the upstream, and is
// charged to the client address's invalid-key budget exactly like an
// unknown API key: the 11th from one address is a 429, and so is then
// a valid token from it, while another address is unaffected.
func TestInvalidJWTsChargedToTheAddress(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		rsa := jwttest.NewKey(t, "RS256", "rsa-1")
		idp := jwttest.NewIdP(t, rsa)
		up := newUpstream(t)
		g := startStill(t, jwtConfig(t, up.URL, idp), redisURL) // a fixed window of a minute
		ok := claimsAt("alice", stillTime)
		bad := []struct{ name, token string }{
			{"expired", jwttest.Sign(t, rsa, ok.With("exp", stillTime.Add(-time.Hour)))},
			{"not yet valid", jwttest.Sign(t, rsa, ok.With("nbf", stillTime.Add(time.Hour)))},
			{"another issuer", jwttest.Sign(t, rsa, ok.With("iss", "https://evil.example"))},
			{"another audience", jwttest.Sign(t, rsa, ok.With("aud", []string{"billing"}))},
			{"alg none", jwttest.Unsigned(t, "rsa-1", ok)},
			{"HS256 keyed with the public key", jwttest.SignHMAC(t, rsa.PublicJSON(), "rsa-1", ok)},
			{"unknown kid", jwttest.Sign(t, jwttest.NewKey(t, "RS256", "rsa-9"), ok)},
			{"EdDSA, not allowed", jwttest.Sign(t, jwttest.NewKey(t, "EdDSA", "rsa-1"), ok)},
			{"garbage", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.garbage"},
			{"no subject", jwttest.Sign(t, rsa, ok.With("sub", nil))},
		}
		from := "X-Forwarded-For"
		for _, c := range bad {
			resp, body := getBody(t, g.public+"/api/items", "Authorization", "Bearer "+c.token, from, "198.51.100.7")
			if resp.StatusCode != 401 || !strings.Contains(string(body), httplimit.ProblemInvalidToken) ||
				resp.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
				t.Fatalf("%s: %d %s %q", c.name, resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
			}
		}
		valid := jwttest.Sign(t, rsa, ok)
		resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+bad[0].token, from, "198.51.100.7")
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("11th invalid token: %d", resp.StatusCode)
		}
		if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+valid, from, "198.51.100.7"); resp.StatusCode != 429 {
			t.Fatalf("a valid token from the penalised address: %d, want 429", resp.StatusCode)
		}
		// Invalid tokens and unknown API keys share the one budget.
		if resp := get(t, g.public+"/api/items", "X-API-Key", "guess", from, "198.51.100.7"); resp.StatusCode != 429 {
			t.Fatalf("an API key from the penalised address: %d, want 429", resp.StatusCode)
		}
		if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+valid, from, "198.51.100.8"); resp.StatusCode != 200 {
			t.Fatalf("a valid token from another address: %d", resp.StatusCode)
		}
		if up.hits.Load() != 1 {
			t.Fatalf("the upstream saw %d requests, want 1", up.hits.Load())
		}
		// A token and an X-API-Key that differ stay a 401, and API keys
		// still work beside tokens.
		if code := sendRaw(t, g.public+"/api/items", [][2]string{{"Authorization", "Bearer " + valid}, {"X-Api-Key", freeKey}, {"X-Forwarded-For", "198.51.100.9"}}); code != 401 {
			t.Fatalf("a token and a key: %d, want 401", code)
		}
		if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+freeKey, from, "198.51.100.9"); resp.StatusCode != 200 {
			t.Fatalf("an API key under a JWT policy: %d", resp.StatusCode)
		}
	})
}

// TestJWTKeyRotation: the IdP rotates its keys (a new key in, the old
// one out); the first token signed by the new key makes the gateway
// fetch the JWKS again instead of failing, and from then on tokens of
// the old key are refused.
func TestJWTKeyRotation(t *testing.T) {
	old, next := jwttest.NewKey(t, "RS256", "2026-04"), jwttest.NewKey(t, "RS256", "2026-05")
	idp := jwttest.NewIdP(t, old)
	up := newUpstream(t)
	g := start(t, jwtConfig(t, up.URL, idp), "")
	oldTok, newTok := jwttest.Sign(t, old, claims("alice")), jwttest.Sign(t, next, claims("alice"))
	if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+oldTok); resp.StatusCode != 200 {
		t.Fatalf("before the rotation: %d", resp.StatusCode)
	}
	idp.SetKeys(next)
	before := idp.Fetches.Load()
	if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+newTok); resp.StatusCode != 200 {
		t.Fatalf("a token of the key rotated in: %d", resp.StatusCode)
	}
	if n := idp.Fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS fetches for the new key, want 1", n)
	}
	if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+oldTok); resp.StatusCode != 401 {
		t.Fatalf("a token of the key rotated out: %d, want 401", resp.StatusCode)
	}
}

// TestJWTExample: examples/jwt.yaml as shipped, its JWKS URL pointed at
// an identity provider in process, serves tokens as it says.
func TestJWTExample(t *testing.T) {
	ec := jwttest.NewKey(t, "ES256", "ec-1")
	idp := jwttest.NewIdP(t, ec)
	b, err := os.ReadFile("../examples/jwt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://idp.example.com/.well-known/jwks.json"
	if !strings.Contains(string(b), url) {
		t.Fatalf("examples/jwt.yaml no longer names %s; update the test", url)
	}
	src := strings.Replace(string(b), url, idp.JWKSURL(), 1)
	p, err := policy.ParseEnv([]byte(src), "jwt-test.yaml", policy.Env{Vars: map[string]string{"TOLLGATE_SECRET": "0123456789abcdef0123"}})
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	c := jwttest.Valid("alice", time.Now()).With("iss", "https://idp.example.com/").With("aud", []string{"tollgate-api"})
	pro := "Bearer " + jwttest.Sign(t, ec, c.With("plan", "pro").With("org", "acme"))
	if resp := get(t, g.public+"/api/items", "Authorization", pro); resp.StatusCode != 200 ||
		!strings.Contains(resp.Header.Get("RateLimit-Policy"), `"pro.minute";q=1000`) || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"pro.tenant"`) {
		t.Fatalf("a pro token: %d %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	for i := 0; i < 3; i++ {
		if resp := get(t, g.public+"/api/users/u1/export", "Authorization", pro); resp.StatusCode != 200 {
			t.Fatalf("export %d: %d", i, resp.StatusCode)
		}
	}
	resp, body := getBody(t, g.public+"/api/users/u1/export", "Authorization", pro)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "export busy") {
		t.Fatalf("the 4th export: %d %s", resp.StatusCode, body)
	}
	internal := "Bearer " + jwttest.Sign(t, ec, c.With("sub", "bot").With("plan", "internal"))
	for i := 0; i < 150; i++ {
		if resp := get(t, g.public+"/api/items", "Authorization", internal); resp.StatusCode != 200 {
			t.Fatalf("internal %d: %d", i, resp.StatusCode)
		}
	}
	if resp := get(t, g.public+"/api/items", "Authorization", "Bearer "+jwttest.Sign(t, ec, c.With("aud", []string{"other"}))); resp.StatusCode != 401 {
		t.Fatalf("another audience: %d", resp.StatusCode)
	}
}
