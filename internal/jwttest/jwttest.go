// Package jwttest is an identity provider for tests: signing keys made
// in the test, a JWKS served in process (whose keys can be rotated), and
// tokens signed with them, or forged.
package jwttest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// Key is a private signing key with its key id and algorithm.
type Key struct {
	ID   string
	Alg  jwa.SignatureAlgorithm
	priv jwk.Key
	pub  jwk.Key
}

// Public returns the key's public half as a JWK.
func (k *Key) Public() jwk.Key { return k.pub }

// PublicJSON returns the public JWK as JSON (what an attacker can read).
func (k *Key) PublicJSON() []byte {
	b, _ := json.Marshal(k.pub)
	return b
}

// NewKey makes a key for alg ("RS256", "ES256" or "EdDSA") named id.
func NewKey(t testing.TB, alg, id string) *Key {
	t.Helper()
	var raw any
	var err error
	var a jwa.SignatureAlgorithm
	switch alg {
	case "RS256":
		raw, err = rsa.GenerateKey(rand.Reader, 2048)
		a = jwa.RS256()
	case "ES256":
		raw, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		a = jwa.ES256()
	case "EdDSA":
		_, raw, err = ed25519.GenerateKey(rand.Reader)
		a = jwa.EdDSA()
	default:
		t.Fatalf("jwttest: no key for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	priv, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	_ = priv.Set(jwk.KeyIDKey, id)
	_ = priv.Set(jwk.AlgorithmKey, a)
	pub, err := jwk.PublicKeyOf(priv)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: id, Alg: a, priv: priv, pub: pub}
}

// IdP serves a JWKS at URL+"/jwks.json".
type IdP struct {
	*httptest.Server
	Fetches atomic.Int64 // JWKS requests served
	mu      sync.Mutex
	keys    []*Key
	broken  *brokenAnswer // nil: the keys are served
}

// brokenAnswer is what a broken IdP answers for its JWKS.
type brokenAnswer struct {
	status int
	body   string
}

// NewIdP serves keys until the test ends.
func NewIdP(t testing.TB, keys ...*Key) *IdP {
	p := &IdP{keys: keys}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jwks.json" {
			http.NotFound(w, r)
			return
		}
		p.Fetches.Add(1)
		set := jwk.NewSet()
		p.mu.Lock()
		for _, k := range p.keys {
			_ = set.AddKey(k.pub)
		}
		broken := p.broken
		p.mu.Unlock()
		if broken != nil {
			w.WriteHeader(broken.status)
			_, _ = w.Write([]byte(broken.body))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(p.Close)
	return p
}

// JWKSURL is where the IdP publishes its keys.
func (p *IdP) JWKSURL() string { return p.URL + "/jwks.json" }

// SetKeys replaces the keys published (a rotation).
func (p *IdP) SetKeys(keys ...*Key) {
	p.mu.Lock()
	p.keys = keys
	p.mu.Unlock()
}

// Break makes the IdP answer its JWKS with status and body instead of
// its keys (a 503, or a 200 that is no JWKS), until Mend.
func (p *IdP) Break(status int, body string) {
	p.mu.Lock()
	p.broken = &brokenAnswer{status, body}
	p.mu.Unlock()
}

// Mend makes the IdP serve its keys again.
func (p *IdP) Mend() {
	p.mu.Lock()
	p.broken = nil
	p.mu.Unlock()
}

// Claims are a token's claims; exp, nbf and iat are times.
type Claims map[string]any

// Valid returns claims for subject, issued at now, valid for an hour.
func Valid(sub string, now time.Time) Claims {
	return Claims{"sub": sub, "iat": now, "exp": now.Add(time.Hour)}
}

// With returns a copy of c with name set to v (nil removes it).
func (c Claims) With(name string, v any) Claims {
	d := Claims{}
	for k, x := range c {
		d[k] = x
	}
	if v == nil {
		delete(d, name)
	} else {
		d[name] = v
	}
	return d
}

// payload encodes c as JSON, times as NumericDates.
func payload(t testing.TB, c Claims) []byte {
	t.Helper()
	m := map[string]any{}
	for k, v := range c {
		if tm, ok := v.(time.Time); ok {
			v = tm.Unix()
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Sign returns c signed with k (its kid in the header).
func Sign(t testing.TB, k *Key, c Claims) string {
	t.Helper()
	h := jws.NewHeaders()
	_ = h.Set(jws.TypeKey, "JWT")
	b, err := jws.Sign(payload(t, c), jws.WithKey(k.Alg, k.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// SignWithHeaders returns c signed with k, its protected header holding
// the kid and hdr's fields besides.
func SignWithHeaders(t testing.TB, k *Key, c Claims, hdr map[string]any) string {
	t.Helper()
	h := jws.NewHeaders()
	_ = h.Set(jws.TypeKey, "JWT")
	for name, v := range hdr {
		if err := h.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	b, err := jws.Sign(payload(t, c), jws.WithKey(k.Alg, k.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// SignPayload returns payload, as it is, signed with k.
func SignPayload(t testing.TB, k *Key, payload []byte) string {
	t.Helper()
	h := jws.NewHeaders()
	_ = h.Set(jws.TypeKey, "JWT")
	b, err := jws.Sign(payload, jws.WithKey(k.Alg, k.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// SignHMAC returns c signed with HS256 under secret, with kid in the
// header if not "".
func SignHMAC(t testing.TB, secret []byte, kid string, c Claims) string {
	t.Helper()
	h := jws.NewHeaders()
	if kid != "" {
		_ = h.Set(jws.KeyIDKey, kid)
	}
	b, err := jws.Sign(payload(t, c), jws.WithKey(jwa.HS256(), secret, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Unsigned returns c as an alg "none" token with kid in its header.
func Unsigned(t testing.TB, kid string, c Claims) string {
	t.Helper()
	hdr, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": kid})
	enc := base64.RawURLEncoding
	return enc.EncodeToString(hdr) + "." + enc.EncodeToString(payload(t, c)) + "."
}
