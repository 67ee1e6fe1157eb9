// Package jwtauth verifies bearer JWTs for Tollgate: signatures against
// the keys a JWKS URL publishes (cached, refreshed, rotated) or an HMAC
// secret, the algorithm against an allow-list, and exp, nbf, iat, iss and
// aud with a bounded clock skew (policy.JWT says which). It reads the
// subject, tenant and plan from the configured claims.
//
// Errors never contain the token or a claim's value.
package jwtauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// maxClaimLength bounds the subject and tenant read from a token.
const maxClaimLength = 256

// ErrInvalid is wrapped by the errors of Verify for a token that is not
// one to accept (see also ErrKeysUnavailable).
var ErrInvalid = errors.New("invalid token")

// Claims are who a verified token names.
type Claims struct {
	Subject string
	Tenant  string // "" when the tenant claim is not configured or absent
	Plan    string // "" likewise
	// Extra holds the claims route limits are counted per
	// (policy.JWT.KeyClaims) that the token has: strings as they are,
	// numbers and booleans as JSON writes them; nil for none.
	Extra map[string]string
}

// Verifier verifies tokens under one policy's settings.
type Verifier struct {
	s    *policy.JWT
	keys *Keys
	src  *source
	now  func() time.Time
	algs map[string]jwa.SignatureAlgorithm
}

// NewVerifier returns the verifier of s, with keys from keys (nil:
// Shared) and time from now (nil: time.Now). It registers the JWKS URL
// without waiting for it: the first token waits for the first fetch.
func NewVerifier(s *policy.JWT, keys *Keys, now func() time.Time) (*Verifier, error) {
	if keys == nil {
		var err error
		if keys, err = Shared(); err != nil {
			return nil, err
		}
	}
	if now == nil {
		now = time.Now
	}
	algs, err := signatureAlgorithms(s.Algorithms)
	if err != nil {
		return nil, fmt.Errorf("creating the JWT verifier: %w", err)
	}
	src, err := registerJWKS(keys, s)
	if err != nil {
		return nil, fmt.Errorf("creating the JWT verifier: %w", err)
	}
	return &Verifier{s: s, keys: keys, now: now, algs: algs, src: src}, nil
}

// registerJWKS registers the JWKS URL of s with keys, waiting at most 5
// seconds, and returns its source: nil if s names none.
func registerJWKS(keys *Keys, s *policy.JWT) (*source, error) {
	if s.JWKSURL == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return keys.register(ctx, s.JWKSURL, s.MinRefreshInterval, s.RefreshInterval)
}

// signatureAlgorithms returns the signature algorithms names names,
// by name; "none" or a name jwx does not know is an error.
func signatureAlgorithms(names []string) (map[string]jwa.SignatureAlgorithm, error) {
	algs := map[string]jwa.SignatureAlgorithm{}
	for _, a := range names {
		alg, ok := jwa.LookupSignatureAlgorithm(a)
		if !ok || alg == jwa.NoSignature() {
			return nil, fmt.Errorf("unknown algorithm %q", a)
		}
		algs[a] = alg
	}
	return algs, nil
}

// Verify checks token and returns the claims it names. Every error wraps
// ErrInvalid, but for a token that cannot be checked because its JWKS
// cannot be fetched: that error wraps ErrKeysUnavailable. It waits for
// the JWKS at most fetchWait, and not at all once it is known down.
func (v *Verifier) Verify(ctx context.Context, token string) (Claims, error) {
	if err := screen(token); err != nil {
		return Claims{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, fetchWait)
	defer cancel()
	opts := v.parseOptions(ctx, v.now())
	tok, err := jwt.ParseString(token, opts...)
	// Only keys from the JWKS (v.src) are looked up by key id, or can
	// be unavailable: a token the keys at hand do not decide asks for a
	// fetch, and is parsed again after it.
	if (errors.Is(err, errUnknownKID) || errors.Is(err, ErrKeysUnavailable)) && v.keys.refresh(ctx, v.src, v.s.MinRefreshInterval) {
		tok, err = jwt.ParseString(token, opts...)
	}
	switch {
	case errors.Is(err, ErrKeysUnavailable), err != nil && v.src != nil && ctx.Err() != nil:
		// (jwx answers for a context that ended while it verified with
		// an error of its own: the keys did not come in time.)
		return Claims{}, v.unavailable()
	case err != nil:
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, reason(err))
	}
	return v.claims(tok)
}

// unavailable returns why a token cannot be checked: the last fetch's
// failure, else that the JWKS was not fetched in time.
func (v *Verifier) unavailable() error {
	if err := v.src.fetchError(); err != nil {
		return err
	}
	return fmt.Errorf("%w: the JWKS was not fetched in time", ErrKeysUnavailable)
}

// parseOptions returns the options a token is parsed and validated with
// at now: the keys of fetchKeys, and the policy's clock skew, issuer
// and audiences, an expiry required.
func (v *Verifier) parseOptions(ctx context.Context, now time.Time) []jwt.ParseOption {
	opts := []jwt.ParseOption{
		jwt.WithKeyProvider(jws.KeyProviderFunc(v.fetchKeys)),
		jwt.WithValidate(true),
		jwt.WithClock(jwt.ClockFunc(func() time.Time { return now })),
		jwt.WithAcceptableSkew(v.s.ClockSkew),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithContext(ctx),
	}
	if v.s.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.s.Issuer))
	}
	if len(v.s.Audience) > 0 {
		opts = append(opts, jwt.WithValidator(jwt.ValidatorFunc(v.checkAudience)))
	}
	return opts
}

// screen refuses, wrapping ErrInvalid, a token that is not a JWT or
// that checkSegments refuses, before any key is fetched for it.
func screen(token string) error {
	if len(token) > identity.MaxTokenLength || !identity.LooksLikeJWT(token) {
		return fmt.Errorf("%w: not a JWT", ErrInvalid)
	}
	if err := checkSegments(token); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkAudience refuses a token none of whose audiences the policy
// accepts.
func (v *Verifier) checkAudience(_ context.Context, t jwt.Token) error {
	aud, _ := t.Audience()
	for _, a := range aud {
		if slices.Contains(v.s.Audience, a) {
			return nil
		}
	}
	return errAudience
}

// claims reads the subject, tenant, plan and key claims of a verified
// token, refusing one without a subject or whose tenant or plan claim
// is not a string.
func (v *Verifier) claims(tok jwt.Token) (Claims, error) {
	var c Claims
	var err error
	if c.Subject, err = stringClaim(tok, v.s.SubjectClaim); err != nil || c.Subject == "" {
		return Claims{}, fmt.Errorf("%w: no subject in claim %q", ErrInvalid, v.s.SubjectClaim)
	}
	if c.Tenant, err = optionalClaim(tok, v.s.TenantClaim); err != nil {
		return Claims{}, err
	}
	if c.Plan, err = optionalClaim(tok, v.s.PlanClaim); err != nil {
		return Claims{}, err
	}
	c.Extra = extraClaims(tok, v.s.KeyClaims)
	return c, nil
}

// optionalClaim returns the string claim name of tok, as stringClaim
// does, or "" if the policy names none (name is ""); the error wraps
// ErrInvalid.
func optionalClaim(tok jwt.Token, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	s, err := stringClaim(tok, name)
	if err != nil {
		return "", fmt.Errorf("%w: claim %q: %v", ErrInvalid, name, err)
	}
	return s, nil
}

// extraClaims returns the claims names that tok has as scalars
// (scalarClaim), nil for none.
func extraClaims(tok jwt.Token, names []string) map[string]string {
	var extra map[string]string
	for _, name := range names {
		if x, ok := scalarClaim(tok, name); ok {
			if extra == nil {
				extra = map[string]string{}
			}
			extra[name] = x
		}
	}
	return extra
}

// scalarClaim returns the claim name as text if it is a string (of at
// most maxClaimLength bytes), a number or a boolean.
func scalarClaim(t jwt.Token, name string) (string, bool) {
	if !t.Has(name) {
		return "", false
	}
	var x any
	if err := t.Get(name, &x); err != nil {
		return "", false
	}
	switch x := x.(type) {
	case string:
		return x, len(x) <= maxClaimLength
	case float64, bool, json.Number:
		b, err := json.Marshal(x)
		return string(b), err == nil
	}
	return "", false
}

var (
	errUnknownKID  = errors.New("no key with the token's key id")
	errAlgorithm   = errors.New("algorithm not allowed")
	errNoKeyForAlg = errors.New("no key for the token's algorithm")
	errAudience    = errors.New("another audience")
)

// fetchKeys offers the keys a token may be verified with: for an
// allowed HS* algorithm the HMAC secret alone, for an allowed asymmetric
// one the JWKS keys of the token's kid (or, without a kid, every key)
// whose type fits the algorithm and whose alg and use, when set, do too.
// A key of the JWKS is never used as an HMAC secret.
func (v *Verifier) fetchKeys(ctx context.Context, sink jws.KeySink, sig *jws.Signature, _ *jws.Message) error {
	h := sig.ProtectedHeaders()
	alg, err := v.allowedAlgorithm(h)
	if err != nil {
		return err
	}
	if policy.Symmetric(alg.String()) {
		if v.s.HMACSecret == nil {
			return errNoKeyForAlg
		}
		sink.Key(alg, v.s.HMACSecret)
		return nil
	}
	if v.src == nil {
		return errNoKeyForAlg
	}
	kid, hasKID := h.KeyID()
	return v.offerJWKS(ctx, sink, alg, kid, hasKID)
}

// allowedAlgorithm returns the algorithm a token's header h names, if
// the policy allows it.
func (v *Verifier) allowedAlgorithm(h jws.Headers) (jwa.SignatureAlgorithm, error) {
	alg, ok := h.Algorithm()
	if !ok {
		return alg, errAlgorithm
	}
	allowed, ok := v.algs[alg.String()]
	if !ok || allowed != alg {
		return alg, errAlgorithm
	}
	return alg, nil
}

// offerJWKS offers sink the JWKS keys that fit alg, only those of kid if
// the token names one (hasKID).
func (v *Verifier) offerJWKS(ctx context.Context, sink jws.KeySink, alg jwa.SignatureAlgorithm, kid string, hasKID bool) error {
	set, err := v.keys.set(ctx, v.src)
	if err != nil {
		return err
	}
	keys := matchingKeys(set, alg, kid, hasKID)
	for _, k := range keys {
		sink.Key(alg, k)
	}
	switch {
	case len(keys) > 0:
		return nil
	case !hasKID:
		return errNoKeyForAlg
	}
	if err := v.src.fetchError(); err != nil {
		// The key may have been rotated in since the JWKS was last
		// fetched: the token cannot be checked.
		return fmt.Errorf("%w: %w", errUnknownKID, err)
	}
	return errUnknownKID
}

// matchingKeys returns the keys of set that fit alg, only those of kid
// if the token names one (hasKID), in the set's order.
func matchingKeys(set jwk.Set, alg jwa.SignatureAlgorithm, kid string, hasKID bool) []jwk.Key {
	var keys []jwk.Key
	for i := 0; i < set.Len(); i++ {
		k, _ := set.Key(i)
		if id, _ := k.KeyID(); hasKID && id != kid {
			continue
		}
		if fits(k, alg) {
			keys = append(keys, k)
		}
	}
	return keys
}

// fits reports whether k may verify alg.
func fits(k jwk.Key, alg jwa.SignatureAlgorithm) bool {
	if use, ok := k.KeyUsage(); ok && use != "sig" {
		return false
	}
	if ka, ok := k.Algorithm(); ok && ka.String() != alg.String() {
		return false
	}
	kty, ok := keyType(alg.String())
	return ok && k.KeyType() == kty
}

// keyType returns the type of key that verifies the asymmetric
// algorithm name, and whether there is one.
func keyType(name string) (jwa.KeyType, bool) {
	switch {
	case strings.HasPrefix(name, "RS"), strings.HasPrefix(name, "PS"):
		return jwa.RSA(), true
	case strings.HasPrefix(name, "ES"):
		return jwa.EC(), true
	case name == "EdDSA":
		return jwa.OKP(), true
	}
	return jwa.KeyType{}, false
}

// reason words a verification failure without the token: the text of
// the first of reasons it is, else "not verified".
func reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.text
		}
	}
	return "not verified"
}

// reasons are the verification failures reason tells apart, in the
// order it tries them.
var reasons = []struct {
	err  error
	text string
}{
	{errUnknownKID, errUnknownKID.Error()},
	{errAlgorithm, errAlgorithm.Error()},
	{errNoKeyForAlg, errNoKeyForAlg.Error()},
	{jwt.TokenExpiredError(), "expired"},
	{jwt.TokenNotYetValidError(), "not yet valid"},
	{jwt.InvalidIssuerError(), "another issuer"},
	{errAudience, "another audience"},
	{jwt.InvalidAudienceError(), "another audience"},
	{jwt.InvalidIssuedAtError(), "issued in the future"},
	{jwt.MissingRequiredClaimError(), "a required claim is missing"},
}

// stringClaim returns the claim name as a string ("" when absent); a
// claim of another type, or longer than maxClaimLength, is an error.
func stringClaim(t jwt.Token, name string) (string, error) {
	if !t.Has(name) {
		return "", nil
	}
	var s string
	if err := t.Get(name, &s); err != nil {
		return "", errors.New("not a string")
	}
	if len(s) > maxClaimLength {
		return "", fmt.Errorf("longer than %d bytes", maxClaimLength)
	}
	return s, nil
}
