package gateway_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/policy"
)

// jwtConfig is the quickstart verifying bearer JWTs against idp's JWKS
// (RS256 and ES256, issuer and audience checked, plan and tenant from
// claims), with 127/8 trusted so tests choose client addresses.
func jwtConfig(t *testing.T, upstream string, idp *jwttest.IdP) *policy.Policy {
	t.Helper()
	return quickstart(t, upstream, fixture.JWT(idp.JWKSURL())...)
}

// claims is a token's claims for subject sub, valid now for the issuer
// and audience of jwtConfig.
func claims(sub string) jwttest.Claims {
	return jwttest.Valid(sub, time.Now()).With("iss", "https://idp.example").With("aud", []string{"tollgate-api"})
}

// TestJWTForwardedNotLogged: a request with a valid token reaches the
// upstream with the token it was charged for, and neither its subject
// nor the token reaches the gateway's logs. (How tokens are charged is
// the engine's TestJWTLimitedPerSubject, how invalid ones are answered
// httplimit's TestInvalidJWTsChargedToTheAddress.)
func TestJWTForwardedNotLogged(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		rsa := jwttest.NewKey(t, "RS256", "rsa-1")
		idp := jwttest.NewIdP(t, rsa)
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
		for _, raw := range []string{"carol", pro} {
			if strings.Contains(g.logs.String(), raw) {
				t.Fatalf("the logs hold %q", raw)
			}
		}
	})
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
	const url = "http://127.0.0.1:8088/.well-known/jwks.json"
	if !strings.Contains(string(b), url) {
		t.Fatalf("examples/jwt.yaml no longer names %s; update the test", url)
	}
	src := strings.Replace(string(b), url, idp.JWKSURL(), 1)
	p, err := policy.Parse([]byte(src), "jwt-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	c := jwttest.Valid("alice", time.Now()).With("iss", "tollgate-dev-jwks").With("aud", []string{"tollgate-api"})
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
