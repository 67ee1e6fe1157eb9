// Package jwtauth verifies bearer JWTs for Tollgate: signatures against
// the keys a JWKS URL publishes (cached, refreshed, rotated) or an HMAC
// secret, the algorithm against an allow-list, and exp, nbf, iat, iss and
// aud with a bounded clock skew (policy.JWT says which). It reads the
// subject, tenant and plan from the configured claims.
//
// Errors never contain the token or a claim's value.
package jwtauth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// maxClaimLength bounds the subject and tenant read from a token.
const maxClaimLength = 256

// ErrInvalid is wrapped by every error of Verify: the token is not one
// to accept.
var ErrInvalid = errors.New("invalid token")

// Keys is a cache of JWKS documents by URL, refreshed in the background
// (github.com/lestrrat-go/jwx's jwk.Cache): one per process is enough,
// shared by every policy a gateway loads, so a reload keeps the keys.
type Keys struct {
	cache  *jwk.Cache
	client *http.Client
	cancel context.CancelFunc

	mu   sync.Mutex
	urls map[string]*source
}

// source is one JWKS URL's bookkeeping.
type source struct {
	mu          sync.Mutex // held while a refresh an unknown kid asked for runs
	lastRefresh time.Time  // the last refresh an unknown kid triggered
}

// KeysOptions configures a Keys; the zero value is the default.
type KeysOptions struct {
	// HTTPClient fetches the JWKS (default: a client with a 10s timeout).
	HTTPClient *http.Client
}

// NewKeys starts a JWKS cache; Close stops it.
func NewKeys(opts KeysOptions) (*Keys, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cache, err := jwk.NewCache(ctx, httprc.NewClient())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("starting the JWKS cache: %w", err)
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Keys{cache: cache, client: client, cancel: cancel, urls: map[string]*source{}}, nil
}

// Close stops the cache's background refreshes.
func (k *Keys) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = k.cache.Shutdown(ctx)
	k.cancel()
}

var (
	sharedOnce sync.Once
	shared     *Keys
	sharedErr  error
)

// Shared returns the process's JWKS cache, started on first use and
// never closed.
func Shared() (*Keys, error) {
	sharedOnce.Do(func() { shared, sharedErr = NewKeys(KeysOptions{}) })
	return shared, sharedErr
}

// register makes sure url is in the cache, refreshed between min and
// max (as its Cache-Control asks, within those bounds), without waiting
// for the first fetch.
func (k *Keys) register(ctx context.Context, url string, minInterval, maxInterval time.Duration) (*source, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.urls[url]; ok {
		return s, nil
	}
	err := k.cache.Register(ctx, url,
		jwk.WithMinInterval(minInterval), jwk.WithMaxInterval(maxInterval),
		jwk.WithHTTPClient(k.client), jwk.WithWaitReady(false))
	if err != nil {
		return nil, fmt.Errorf("registering the JWKS: %w", err)
	}
	s := &source{}
	k.urls[url] = s
	return s, nil
}

// set returns url's keys, waiting (up to ctx) for the first fetch.
func (k *Keys) set(ctx context.Context, url string) (jwk.Set, error) {
	r, err := k.cache.LookupResource(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := r.Ready(ctx); err != nil {
		return nil, fmt.Errorf("fetching the JWKS: %w", err)
	}
	return r.Resource(), nil
}

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
	v := &Verifier{s: s, keys: keys, now: now, algs: algs}
	if s.JWKSURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		src, err := keys.register(ctx, s.JWKSURL, s.MinRefreshInterval, s.RefreshInterval)
		if err != nil {
			return nil, fmt.Errorf("creating the JWT verifier: %w", err)
		}
		v.src = src
	}
	return v, nil
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

// fetchWait bounds how long a request waits for the JWKS.
const fetchWait = 3 * time.Second

// Verify checks token and returns the claims it names. Every error wraps
// ErrInvalid.
func (v *Verifier) Verify(ctx context.Context, token string) (Claims, error) {
	if err := screen(token); err != nil {
		return Claims{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, fetchWait)
	defer cancel()
	now := v.now()
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
	tok, err := jwt.ParseString(token, opts...)
	if err != nil && v.src != nil && errors.Is(err, errUnknownKID) && v.refresh(ctx) {
		tok, err = jwt.ParseString(token, opts...)
	}
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, reason(err))
	}
	return v.claims(tok)
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
	if v.s.TenantClaim != "" {
		if c.Tenant, err = stringClaim(tok, v.s.TenantClaim); err != nil {
			return Claims{}, fmt.Errorf("%w: claim %q: %v", ErrInvalid, v.s.TenantClaim, err)
		}
	}
	if v.s.PlanClaim != "" {
		if c.Plan, err = stringClaim(tok, v.s.PlanClaim); err != nil {
			return Claims{}, fmt.Errorf("%w: claim %q: %v", ErrInvalid, v.s.PlanClaim, err)
		}
	}
	c.Extra = extraClaims(tok, v.s.KeyClaims)
	return c, nil
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

// checkSegments refuses a token that parsers could read differently, or
// that asks for what Tollgate does not do, before its signature is
// checked: a header or claims set that is not one JSON object, or that
// names a member twice (parsers keep the first or the last); a header
// with crit (RFC 7515 section 4.1.11: a recipient must reject a token
// whose crit names an extension it does not understand, and Tollgate
// understands none); and an exp, nbf or iat that is not a JSON number
// (RFC 7519's NumericDate: some libraries read "1799999999" as a time,
// others refuse it).
func checkSegments(token string) error {
	hdr, rest, _ := strings.Cut(token, ".")
	claims, _, _ := strings.Cut(rest, ".")
	h, err := members(hdr)
	if err != nil {
		return fmt.Errorf("the header: %w", err)
	}
	if _, ok := h["crit"]; ok {
		return errors.New("the header names critical extensions (crit), which are not supported")
	}
	c, err := members(claims)
	if err != nil {
		return fmt.Errorf("the claims: %w", err)
	}
	return checkNumericDates(c)
}

// checkNumericDates refuses claims (as members returns them) whose exp,
// nbf or iat is not a JSON number.
func checkNumericDates(claims map[string]any) error {
	for _, name := range []string{jwt.ExpirationKey, jwt.NotBeforeKey, jwt.IssuedAtKey} {
		if v, ok := claims[name]; ok {
			if _, isNum := v.(json.Number); !isNum {
				return fmt.Errorf("claim %q is not a number", name)
			}
		}
	}
	return nil
}

// members decodes a base64url segment holding one JSON object and
// returns its members, each value a json.Number, a string, a bool, nil,
// or (for an object or array) true; a member named twice is an error.
func members(seg string) (map[string]any, error) {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return nil, errors.New("not base64url")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	m := map[string]any{}
	for dec.More() {
		if err := readMember(dec, m); err != nil {
			return nil, err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return m, nil
}

// readMember reads the next member of the object dec is in into m, as
// members describes; a name m holds already is an error.
func readMember(dec *json.Decoder, m map[string]any) error {
	tok, err := dec.Token()
	if err != nil {
		return errors.New("not valid JSON")
	}
	name, _ := tok.(string)
	if _, dup := m[name]; dup {
		return fmt.Errorf("member %q given twice", name)
	}
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return errors.New("not valid JSON")
	}
	var v any = true
	if len(raw) > 0 && raw[0] != '{' && raw[0] != '[' {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return errors.New("not valid JSON")
		}
	}
	m[name] = v
	return nil
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

// refresh fetches the JWKS again because a token named a key id it does
// not hold (a key just rotated in), at most once per MinRefreshInterval
// whatever the tokens name; it reports whether it did.
func (v *Verifier) refresh(ctx context.Context) bool {
	s := v.src
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.lastRefresh.IsZero() && now.Sub(s.lastRefresh) < v.s.MinRefreshInterval {
		return false
	}
	s.lastRefresh = now
	_, err := v.keys.cache.Refresh(ctx, v.s.JWKSURL)
	return err == nil
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
	set, err := v.keys.set(ctx, v.s.JWKSURL)
	if err != nil {
		return err
	}
	found := 0
	for i := 0; i < set.Len(); i++ {
		k, _ := set.Key(i)
		if id, _ := k.KeyID(); hasKID && id != kid {
			continue
		}
		if !fits(k, alg) {
			continue
		}
		sink.Key(alg, k)
		found++
	}
	if found == 0 {
		if hasKID {
			return errUnknownKID
		}
		return errNoKeyForAlg
	}
	return nil
}

// fits reports whether k may verify alg.
func fits(k jwk.Key, alg jwa.SignatureAlgorithm) bool {
	if use, ok := k.KeyUsage(); ok && use != "sig" {
		return false
	}
	if ka, ok := k.Algorithm(); ok && ka.String() != alg.String() {
		return false
	}
	name := alg.String()
	switch {
	case strings.HasPrefix(name, "RS"), strings.HasPrefix(name, "PS"):
		return k.KeyType() == jwa.RSA()
	case strings.HasPrefix(name, "ES"):
		return k.KeyType() == jwa.EC()
	case name == "EdDSA":
		return k.KeyType() == jwa.OKP()
	}
	return false
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
