package jwtauth_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/jwtauth"
	"github.com/tollgate/tollgate/policy"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func settings(url string) *policy.JWT {
	return &policy.JWT{JWKSURL: url, Algorithms: []string{"RS256", "ES256", "EdDSA"}, ClockSkew: 30 * time.Second,
		SubjectClaim: "sub", TenantClaim: "org", PlanClaim: "plan",
		RefreshInterval: 15 * time.Minute, MinRefreshInterval: 30 * time.Second}
}

func newKeys(t *testing.T) *jwtauth.Keys {
	k, err := jwtauth.NewKeys(jwtauth.KeysOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

func verifier(t *testing.T, s *policy.JWT, clock func() time.Time) *jwtauth.Verifier {
	t.Helper()
	v, err := jwtauth.NewVerifier(s, newKeys(t), clock)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVerify: tokens signed by a key of the JWKS, with each allowed
// algorithm, verify and name their subject, tenant and plan; every
// forgery, and every token outside its validity (beyond the skew), is
// refused with ErrInvalid.
func TestVerify(t *testing.T) {
	rsa, ec, ed := jwttest.NewKey(t, "RS256", "rsa-1"), jwttest.NewKey(t, "ES256", "ec-1"), jwttest.NewKey(t, "EdDSA", "ed-1")
	idp := jwttest.NewIdP(t, rsa, ec, ed)
	s := settings(idp.JWKSURL())
	s.Issuer, s.Audience = "https://idp.example", []string{"api", "other"}
	v := verifier(t, s, func() time.Time { return now })
	ok := jwttest.Valid("alice", now).With("iss", "https://idp.example").With("aud", []string{"api"}).
		With("org", "acme").With("plan", "pro")
	for _, k := range []*jwttest.Key{rsa, ec, ed} {
		c, err := v.Verify(context.Background(), jwttest.Sign(t, k, ok))
		if err != nil {
			t.Fatalf("%s: %v", k.ID, err)
		}
		if c.Subject != "alice" || c.Tenant != "acme" || c.Plan != "pro" || c.Extra != nil {
			t.Fatalf("%s: claims %+v", k.ID, c)
		}
	}
	other := jwttest.NewKey(t, "RS256", "rsa-1") // same kid, not the IdP's key
	for _, c := range []struct {
		name, token string
	}{
		{"expired beyond the skew", jwttest.Sign(t, rsa, ok.With("exp", now.Add(-31*time.Second)))},
		{"not yet valid beyond the skew", jwttest.Sign(t, rsa, ok.With("nbf", now.Add(31*time.Second)))},
		{"issued in the future beyond the skew", jwttest.Sign(t, rsa, ok.With("iat", now.Add(time.Minute)))},
		{"no exp", jwttest.Sign(t, rsa, ok.With("exp", nil))},
		{"another issuer", jwttest.Sign(t, rsa, ok.With("iss", "https://evil.example"))},
		{"no issuer", jwttest.Sign(t, rsa, ok.With("iss", nil))},
		{"another audience", jwttest.Sign(t, rsa, ok.With("aud", []string{"billing"}))},
		{"no audience", jwttest.Sign(t, rsa, ok.With("aud", nil))},
		{"no subject", jwttest.Sign(t, rsa, ok.With("sub", nil))},
		{"a subject not a string", jwttest.Sign(t, rsa, ok.With("sub", 42))},
		{"a plan not a string", jwttest.Sign(t, rsa, ok.With("plan", []string{"pro"}))},
		{"a subject too long", jwttest.Sign(t, rsa, ok.With("sub", strings.Repeat("a", 257)))},
		{"alg none", jwttest.Unsigned(t, "rsa-1", ok)},
		{"HS256 keyed with the public RSA key", jwttest.SignHMAC(t, rsa.PublicJSON(), "rsa-1", ok)},
		{"signed by another key with the same kid", jwttest.Sign(t, other, ok)},
		{"unknown kid", jwttest.Sign(t, jwttest.NewKey(t, "ES256", "ec-9"), ok)},
		{"garbage", "eyJhbGciOiJSUzI1NiJ9.garbage.garbage"},
		// RFC 7515 section 4.1.11: a recipient must reject a token whose
		// crit names an extension it does not understand; Tollgate
		// understands none.
		{"crit naming an unknown extension", jwttest.SignWithHeaders(t, rsa, ok, map[string]any{"crit": []string{"x-tenant"}, "x-tenant": "acme"})},
		{"crit naming a registered parameter", jwttest.SignWithHeaders(t, rsa, ok, map[string]any{"crit": []string{"b64"}, "b64": true})},
		{"crit empty", jwttest.SignWithHeaders(t, rsa, ok, map[string]any{"crit": []string{}})},
		// RFC 7519 section 2: exp, nbf and iat are NumericDates, JSON
		// numbers; a parser that reads "1799999999" as a time reads
		// another token than one that does not.
		{"exp a string", jwttest.Sign(t, rsa, ok.With("exp", strconv.FormatInt(now.Add(time.Hour).Unix(), 10)))},
		{"nbf a string", jwttest.Sign(t, rsa, ok.With("nbf", strconv.FormatInt(now.Unix(), 10)))},
		{"iat a string", jwttest.Sign(t, rsa, ok.With("iat", strconv.FormatInt(now.Unix(), 10)))},
		{"a claim named twice", jwttest.SignPayload(t, rsa, []byte(fmt.Sprintf(`{"sub":"alice","sub":"mallory","iss":"https://idp.example","aud":["api"],"exp":%d}`, now.Add(time.Hour).Unix())))},
		{"exp an object", jwttest.Sign(t, rsa, ok.With("exp", map[string]int64{"t": now.Add(time.Hour).Unix()}))},
		{"a signature cut", strings.TrimRight(jwttest.Sign(t, ec, ok), "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")},
	} {
		if _, err := v.Verify(context.Background(), c.token); !errors.Is(err, jwtauth.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		} else if strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), c.token) {
			t.Errorf("%s: the error %q holds a claim or the token", c.name, err)
		}
	}
	// A NumericDate may have a fraction (RFC 7519 section 2).
	if _, err := v.Verify(context.Background(), jwttest.Sign(t, rsa, ok.With("exp", float64(now.Add(time.Hour).Unix())+0.5))); err != nil {
		t.Errorf("exp with a fraction: %v", err)
	}
	// Within the skew, the same tokens are accepted.
	for _, c := range []jwttest.Claims{ok.With("exp", now.Add(-29*time.Second)), ok.With("nbf", now.Add(29*time.Second))} {
		if _, err := v.Verify(context.Background(), jwttest.Sign(t, rsa, c)); err != nil {
			t.Errorf("within the skew: %v", err)
		}
	}
}

// TestAlgorithmAllowList: a key of the JWKS verifies only algorithms
// the policy lists; HS256 is accepted only with the configured secret,
// never with a JWKS key as the secret.
func TestAlgorithmAllowList(t *testing.T) {
	rsa, ec := jwttest.NewKey(t, "RS256", "rsa-1"), jwttest.NewKey(t, "ES256", "ec-1")
	idp := jwttest.NewIdP(t, rsa, ec)
	s := settings(idp.JWKSURL())
	s.Algorithms = []string{"RS256", "HS256"}
	s.HMACSecret = []byte("0123456789abcdef0123456789abcdef")
	v := verifier(t, s, func() time.Time { return now })
	ok := jwttest.Valid("alice", now)
	if _, err := v.Verify(context.Background(), jwttest.Sign(t, ec, ok)); err == nil {
		t.Error("ES256 verified, not in the allow-list")
	}
	if _, err := v.Verify(context.Background(), jwttest.SignHMAC(t, rsa.PublicJSON(), "rsa-1", ok)); err == nil {
		t.Error("HS256 keyed with the RSA public key verified")
	}
	if _, err := v.Verify(context.Background(), jwttest.SignHMAC(t, s.HMACSecret, "", ok)); err != nil {
		t.Errorf("HS256 with the configured secret: %v", err)
	}
	if _, err := v.Verify(context.Background(), jwttest.Sign(t, rsa, ok)); err != nil {
		t.Errorf("RS256: %v", err)
	}
}

// TestRotation: a key rotated in is fetched as soon as a token names it
// (one refresh, not one per token); once refreshed, a key rotated out no
// longer verifies; tokens naming unknown key ids trigger at most one
// refresh per min_refresh_interval.
func TestRotation(t *testing.T) {
	old, next := jwttest.NewKey(t, "RS256", "k-old"), jwttest.NewKey(t, "ES256", "k-new")
	idp := jwttest.NewIdP(t, old)
	v := verifier(t, settings(idp.JWKSURL()), func() time.Time { return now })
	ok := jwttest.Valid("alice", now)
	oldTok, newTok := jwttest.Sign(t, old, ok), jwttest.Sign(t, next, ok)
	if _, err := v.Verify(context.Background(), oldTok); err != nil {
		t.Fatal(err)
	}
	if n := idp.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
	idp.SetKeys(next) // rotate: the new key in, the old one out
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.Verify(context.Background(), newTok)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	passed := 0
	for err := range errs {
		if err == nil {
			passed++
		}
	}
	if passed == 0 {
		t.Fatal("no token signed by the key rotated in verified")
	}
	if n := idp.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after the rotation, want 2 (one refresh for 20 tokens)", n)
	}
	if _, err := v.Verify(context.Background(), newTok); err != nil {
		t.Fatalf("the new key after the refresh: %v", err)
	}
	if _, err := v.Verify(context.Background(), oldTok); !errors.Is(err, jwtauth.ErrInvalid) {
		t.Fatalf("the key rotated out still verifies: %v", err)
	}
	for i := 0; i < 50; i++ {
		_, _ = v.Verify(context.Background(), jwttest.Sign(t, jwttest.NewKey(t, "EdDSA", "k-guess"), ok))
	}
	if n := idp.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after 50 unknown kids within min_refresh_interval, want 2", n)
	}
}

// TestKeyClaims: the claims route limits are counted per are read as
// text when they are strings, numbers or booleans, and left out
// otherwise.
func TestKeyClaims(t *testing.T) {
	ec := jwttest.NewKey(t, "ES256", "ec-1")
	idp := jwttest.NewIdP(t, ec)
	s := settings(idp.JWKSURL())
	s.KeyClaims = []string{"org", "level", "admin", "groups", "missing"}
	v := verifier(t, s, func() time.Time { return now })
	c, err := v.Verify(context.Background(), jwttest.Sign(t, ec, jwttest.Valid("alice", now).
		With("org", "acme").With("level", 3).With("admin", true).With("groups", []string{"a"})))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"org": "acme", "level": "3", "admin": "true"}
	if len(c.Extra) != len(want) {
		t.Fatalf("extra %v, want %v", c.Extra, want)
	}
	for k, x := range want {
		if c.Extra[k] != x {
			t.Errorf("%s = %q, want %q", k, c.Extra[k], x)
		}
	}
}
