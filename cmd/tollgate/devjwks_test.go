package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// TestDevJWKSListen: dev-jwks serve listens on loopback only, and says
// so (exit 2) for any other address.
func TestDevJWKSListen(t *testing.T) {
	for _, c := range []struct {
		addr   string
		ok     bool
		reason string
	}{
		{"127.0.0.1:8088", true, "the default"},
		{"127.0.0.2:0", true, "all of 127/8 is loopback"},
		{"[::1]:8088", true, "IPv6 loopback"},
		{"localhost:8088", true, "the name of loopback"},
		{"0.0.0.0:8088", false, "every interface: the keys would sign tokens for the network"},
		{":8088", false, "no host is every interface too"},
		{"[::]:8088", false, "every IPv6 interface"},
		{"192.168.1.10:8088", false, "a LAN address"},
		{"idp.example.com:8088", false, "a name that is not localhost may resolve anywhere"},
		{"127.0.0.1", false, "no port"},
	} {
		err := checkLoopback(c.addr)
		if (err == nil) != c.ok {
			t.Errorf("%s (%s): error %v, want ok %v", c.addr, c.reason, err, c.ok)
		}
		if c.ok {
			continue
		}
		var out, errb bytes.Buffer
		if code := run([]string{"dev-jwks", "serve", "--listen", c.addr, "--key", filepath.Join(t.TempDir(), "k.json")}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--listen") {
			t.Errorf("dev-jwks serve --listen %s (%s): exit %d, want 2 naming --listen; stderr %q", c.addr, c.reason, code, errb.String())
		}
	}
}

// TestDevJWKSClaims: the claims dev-jwks token's flags ask for, and the
// flags it refuses.
func TestDevJWKSClaims(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	base := tokenSpec{sub: "alice", iss: devIssuer, aud: devAudience, ttl: time.Hour}
	std := map[string]any{"sub": "alice", "iss": devIssuer, "aud": devAudience, "iat": now.Unix(), "exp": now.Unix() + 3600}
	with := func(extra map[string]any) map[string]any {
		m := maps.Clone(std)
		maps.Copy(m, extra)
		return m
	}
	for _, c := range []struct {
		edit   func(*tokenSpec)
		want   map[string]any // nil: refused
		reason string
	}{
		{func(*tokenSpec) {}, std, "the defaults: what examples/jwt.yaml verifies"},
		{func(s *tokenSpec) { s.plan, s.claims = "pro", []string{"org=acme", "team=a=b"} }, with(map[string]any{"plan": "pro", "org": "acme", "team": "a=b"}),
			"--plan and --claim add claims; a value may hold ="},
		{func(s *tokenSpec) { s.iss, s.aud = "", "" }, map[string]any{"sub": "alice", "iat": now.Unix(), "exp": now.Unix() + 3600}, "an empty --iss or --aud leaves the claim out"},
		{func(s *tokenSpec) { s.claims = []string{"org="} }, with(map[string]any{"org": ""}), "an empty value is a value"},
		{func(s *tokenSpec) { s.sub = "" }, nil, "a token without a subject counts no one"},
		{func(s *tokenSpec) { s.ttl = 0 }, nil, "a token expired when issued"},
		{func(s *tokenSpec) { s.claims = []string{"org"} }, nil, "a claim without ="},
		{func(s *tokenSpec) { s.claims = []string{"=acme"} }, nil, "a claim without a name"},
		{func(s *tokenSpec) { s.claims = []string{"exp=0"} }, nil, "exp is --ttl's"},
		{func(s *tokenSpec) { s.claims = []string{"sub=bob"} }, nil, "sub is --sub's"},
		{func(s *tokenSpec) { s.plan, s.claims = "pro", []string{"plan=free"} }, nil, "--plan and --claim plan= disagree"},
		{func(s *tokenSpec) { s.claims = []string{"org=a", "org=b"} }, nil, "a claim given twice"},
	} {
		s := base
		c.edit(&s)
		got, err := s.build(now)
		switch {
		case c.want == nil && err == nil:
			t.Errorf("%+v (%s): claims %v, want refused", s, c.reason, got)
		case c.want != nil && err != nil:
			t.Errorf("%+v (%s): %v", s, c.reason, err)
		case c.want != nil && !maps.Equal(got, c.want):
			t.Errorf("%+v (%s): claims %v, want %v", s, c.reason, got, c.want)
		}
	}
}

// TestDevJWKSKeyFile: dev-jwks token creates the key file on first use,
// private to the user, and signs every token with it; the JWKS
// published for that file verifies them, and not those of another file.
func TestDevJWKSKeyFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "key.json")
	mint := func(file string, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"dev-jwks", "token", "--key", file}, args...), nil, &out, &errb); code != 0 {
			t.Fatalf("dev-jwks token %v: exit %d: %s", args, code, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	first := mint(file, "--sub", "alice", "--plan", "pro", "--claim", "org=acme", "--ttl", "5m")
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, mode %v; want 0600", err, fi)
	}
	second := mint(file, "--sub", "bob")
	other := mint(filepath.Join(dir, "other.json"), "--sub", "alice")

	key, _, err := loadDevKey(file)
	if err != nil {
		t.Fatal(err)
	}
	h, err := jwksHandler(key)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, devJWKSPath, nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %q", devJWKSPath, rec.Code, rec.Header().Get("Content-Type"))
	}
	set, err := jwk.Parse(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := set.Key(0); set.Len() != 1 {
		t.Fatalf("the JWKS holds %d keys, want 1", set.Len())
	} else if private, _ := jwk.IsPrivateKey(pub); private {
		t.Fatalf("the JWKS publishes the private key: %s", rec.Body)
	}
	verify := func(tok string) (jwt.Token, error) {
		return jwt.Parse([]byte(tok), jwt.WithKeySet(set), jwt.WithIssuer(devIssuer), jwt.WithAudience(devAudience))
	}
	for _, c := range []struct {
		tok, sub string
		reason   string
	}{
		{first, "alice", "the token that created the key file"},
		{second, "bob", "a later token, from the same file"},
	} {
		tok, err := verify(c.tok)
		if err != nil {
			t.Fatalf("%s: %v", c.reason, err)
		}
		if sub, _ := tok.Subject(); sub != c.sub {
			t.Errorf("%s: sub %q, want %q", c.reason, sub, c.sub)
		}
	}
	tok, _ := verify(first)
	var plan, org string
	iat, _ := tok.IssuedAt()
	exp, _ := tok.Expiration()
	if tok.Get("plan", &plan) != nil || tok.Get("org", &org) != nil || plan != "pro" || org != "acme" || exp.Sub(iat) != 5*time.Minute {
		t.Errorf("the first token: plan %q, org %q, valid %v; want pro, acme, 5m", plan, org, exp.Sub(iat))
	}
	if _, err := verify(other); err == nil {
		t.Errorf("a token of another key file verified against this file's JWKS")
	}
}

// TestDevJWKSBadKeyFile: a key file dev-jwks cannot sign with is an
// error (exit 1) naming the file, and is left as it was.
func TestDevJWKSBadKeyFile(t *testing.T) {
	key, _, err := loadDevKey(filepath.Join(t.TempDir(), "k.json"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jwk.PublicKeyOf(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		content, reason string
	}{
		{"not json", "not a JWK"},
		{mustJSON(t, pub), "a public key signs nothing"},
		{strings.Replace(mustJSON(t, key), `"alg":"ES256",`, "", 1), "a key that names no algorithm"},
	} {
		file := filepath.Join(t.TempDir(), "k.json")
		os.WriteFile(file, []byte(c.content), 0o600)
		var out, errb bytes.Buffer
		if code := run([]string{"dev-jwks", "token", "--key", file, "--sub", "alice"}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), file) || out.Len() != 0 {
			t.Errorf("%s: exit %d, want 1 naming %s; stdout %q, stderr %q", c.reason, code, file, out.String(), errb.String())
		}
		if b, _ := os.ReadFile(file); string(b) != c.content {
			t.Errorf("%s: the file was changed", c.reason)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
