package httplimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestInvalidJWTsChargedToTheAddress: every token that does not verify
// is a 401 problem (invalid-token), never reaches the service, and is
// charged to the client address's invalid-key budget exactly like an
// unknown API key: the 11th from one address is a 429, and so is then
// a valid token from it, while another address is unaffected.
func TestInvalidJWTsChargedToTheAddress(t *testing.T) {
	c := fixture.StillClock() // a fixed window of a minute
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, _ *redistest.Server) {
		rsa := jwttest.NewKey(t, "RS256", "rsa-1")
		idp := jwttest.NewIdP(t, rsa)
		// The quickstart verifying bearer JWTs against idp's JWKS, with
		// 127/8 trusted so the test chooses client addresses.
		p := fixture.Quickstart(t, fixture.JWT(idp.JWKSURL())...)
		h := newService(t, p, s, c.Now)
		now := c.Now()
		ok := jwttest.Valid("alice", now).With("iss", "https://idp.example").With("aud", []string{"tollgate-api"})
		bad := []struct{ name, token string }{
			{"expired", jwttest.Sign(t, rsa, ok.With("exp", now.Add(-time.Hour)))},
			{"not yet valid", jwttest.Sign(t, rsa, ok.With("nbf", now.Add(time.Hour)))},
			{"another issuer", jwttest.Sign(t, rsa, ok.With("iss", "https://evil.example"))},
			{"another audience", jwttest.Sign(t, rsa, ok.With("aud", []string{"billing"}))},
			{"alg none", jwttest.Unsigned(t, "rsa-1", ok)},
			{"HS256 keyed with the public key", jwttest.SignHMAC(t, rsa.PublicJSON(), "rsa-1", ok)},
			{"unknown kid", jwttest.Sign(t, jwttest.NewKey(t, "RS256", "rsa-9"), ok)},
			{"EdDSA, not allowed", jwttest.Sign(t, jwttest.NewKey(t, "EdDSA", "rsa-1"), ok)},
			{"garbage", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.garbage"},
			{"no subject", jwttest.Sign(t, rsa, ok.With("sub", nil))},
		}
		for _, c := range bad {
			rec := send(h, "GET", "/api/items", "198.51.100.7", "", "Authorization", "Bearer "+c.token)
			if rec.Code != 401 || !strings.Contains(rec.Body.String(), httplimit.ProblemInvalidToken) ||
				rec.Header().Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(rec.Header().Get("WWW-Authenticate"), `error="invalid_token"`) {
				t.Fatalf("%s: %d %s %q", c.name, rec.Code, rec.Body, rec.Header().Get("WWW-Authenticate"))
			}
		}
		valid := jwttest.Sign(t, rsa, ok)
		rec := send(h, "GET", "/api/items", "198.51.100.7", "", "Authorization", "Bearer "+bad[0].token)
		if rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("11th invalid token: %d", rec.Code)
		}
		if rec := send(h, "GET", "/api/items", "198.51.100.7", "", "Authorization", "Bearer "+valid); rec.Code != 429 {
			t.Fatalf("a valid token from the penalised address: %d, want 429", rec.Code)
		}
		// Invalid tokens and unknown API keys share the one budget.
		if rec := send(h, "GET", "/api/items", "198.51.100.7", "", "X-API-Key", "guess"); rec.Code != 429 {
			t.Fatalf("an API key from the penalised address: %d, want 429", rec.Code)
		}
		if rec := send(h, "GET", "/api/items", "198.51.100.8", "", "Authorization", "Bearer "+valid); rec.Code != 200 {
			t.Fatalf("a valid token from another address: %d", rec.Code)
		}
		if h.hits.Load() != 1 {
			t.Fatalf("the service saw %d requests, want 1", h.hits.Load())
		}
		// A token and an X-API-Key that differ stay a 401, and API keys
		// still work beside tokens.
		if rec := send(h, "GET", "/api/items", "198.51.100.9", "", "Authorization", "Bearer "+valid, "X-Api-Key", fixture.FreeKey); rec.Code != 401 {
			t.Fatalf("a token and a key: %d, want 401", rec.Code)
		}
		if rec := send(h, "GET", "/api/items", "198.51.100.9", "", "Authorization", "Bearer "+fixture.FreeKey); rec.Code != 200 {
			t.Fatalf("an API key under a JWT policy: %d", rec.Code)
		}
	})
}
