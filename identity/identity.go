// Package identity resolves who a request comes from — the client address,
// an API key, a user id set by a trusted auth proxy — safely against
// hostile input, and turns those identities into pseudonyms fit for store
// keys, log lines and metric labels.
//
// ClientIP bounds its work whatever the forwarding headers hold, and no
// error here contains a raw credential or user id.
package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// ErrMalformedKey is returned, wrapped, by [APIKey] when a key header is
// present but does not hold an acceptable key.
var ErrMalformedKey = errors.New("malformed API key")

// ErrMalformedUser is returned, wrapped, by [UserID] when the user header
// is present but does not hold an acceptable user id.
var ErrMalformedUser = errors.New("malformed user id")

// MaxKeyLength is the longest API key [APIKey] accepts, in bytes.
const MaxKeyLength = 256

// maxUserLength is the longest user id [UserID] accepts, in bytes.
const maxUserLength = 256

const (
	headerAuthorization = "Authorization"
	headerAPIKey        = "X-Api-Key" // canonical form of X-API-Key
)

// APIKey extracts an API key from "Authorization: Bearer <token>" (the
// scheme is case-insensitive; "Token <token>", which Rails and Django REST
// framework read alike, is one too) or from "X-API-Key". An
// Authorization header with another scheme is ignored.
//
// ok is false, and err nil, when neither header holds a key. err wraps
// [ErrMalformedKey] when a header that holds a key is malformed (empty,
// longer than [MaxKeyLength], or bytes outside visible ASCII 0x21..0x7e)
// and when the request is ambiguous, so that a server behind could read
// another credential than the one charged: more than one Authorization
// line (servers read the first, or join them), more than one X-API-Key
// line, or a Bearer token and an X-API-Key that differ. On error key is
// "" and ok is false. The error never contains the key.
func APIKey(h http.Header) (key string, ok bool, err error) {
	return credential(h, MaxKeyLength)
}

// MaxTokenLength is the longest bearer JWT [Credential] accepts, in bytes.
const MaxTokenLength = 8 << 10

// Credential is [APIKey] for a policy that also verifies bearer JWTs:
// with jwt, a credential of the shape of a JWT ([LooksLikeJWT]) may be
// up to [MaxTokenLength] bytes long and is reported with isJWT; any other
// is an API key, read as APIKey reads it. Ambiguous requests (two
// Authorization lines, a Bearer token and an X-API-Key that differ) are
// malformed either way.
func Credential(h http.Header, jwt bool) (cred string, isJWT, ok bool, err error) {
	if !jwt {
		cred, ok, err = credential(h, MaxKeyLength)
		return cred, false, ok, err
	}
	cred, ok, err = credential(h, MaxTokenLength)
	switch {
	case err != nil || !ok:
		return "", false, ok, err
	case LooksLikeJWT(cred):
		return cred, true, true, nil
	case len(cred) > MaxKeyLength:
		return "", false, false, fmt.Errorf("parsing credentials: %w: longer than %d bytes", ErrMalformedKey, MaxKeyLength)
	}
	return cred, false, true, nil
}

// RequestCredential is [Credential] for a request whose query, body and
// cookies hold tokens as well (the values of their credential fields:
// [Fields.QueryTokens], [Fields.BodyTokens], [Fields.CookieTokens]), so
// that a server behind that reads a credential from any of them is never
// handed one other than the one charged. More than one token, an empty
// one, or one beside a header credential that differs makes the request
// malformed (ErrMalformedKey); one alone is the credential, read as a
// Bearer token is.
func RequestCredential(h http.Header, tokens []string, jwt bool) (cred string, isJWT, ok bool, err error) {
	cred, isJWT, ok, err = Credential(h, jwt)
	if err != nil || len(tokens) == 0 {
		return cred, isJWT, ok, err
	}
	switch {
	case len(tokens) > 1:
		return "", false, false, fmt.Errorf("parsing credential fields: %w: more than one value in the query, the body and the cookies", ErrMalformedKey)
	case ok && tokens[0] != cred:
		return "", false, false, fmt.Errorf("parsing credentials: %w: a credential field and a header credential that differ", ErrMalformedKey)
	case ok:
		return cred, isJWT, ok, nil
	}
	return fieldCredential(tokens[0], jwt)
}

// fieldCredential reads the token of a credential field, the request's
// only credential, as the Bearer token it stands for, but untrimmed.
func fieldCredential(token string, jwt bool) (cred string, isJWT, ok bool, err error) {
	cred, isJWT, ok, err = Credential(http.Header{headerAuthorization: {"Bearer " + token}}, jwt)
	switch {
	case err != nil:
		return "", false, false, err
	case !ok || cred != token:
		return "", false, false, fmt.Errorf("parsing a credential field: %w: empty or with spaces", ErrMalformedKey)
	}
	return cred, isJWT, ok, nil
}

// BasicParts returns the parts of a request's Basic credential
// ("Authorization: Basic base64(user:password)", the scheme in any case)
// that could be API keys: the user name and the password, each when it
// is one as [APIKey] accepts it. APIs in the manner of Stripe (the key as
// user name) and Mailgun (as password) take keys so; whether either is
// one is for the caller to look up. Nil when there is no Basic credential
// (or more than one Authorization line, which Credential refuses).
func BasicParts(h http.Header) []string {
	auth := h[headerAuthorization]
	if len(auth) != 1 {
		return nil
	}
	user, pass, ok := basicCredential(auth[0])
	if !ok {
		return nil
	}
	var parts []string
	for _, p := range []string{user, pass} {
		if checkKey(p, MaxKeyLength) == nil {
			parts = append(parts, p)
		}
	}
	return parts
}

// basicCredential returns the user name and password of an
// Authorization value "Basic base64(user:password)" (the scheme in any
// case, the base64 padded or not), and whether it is one.
func basicCredential(v string) (user, pass string, ok bool) {
	v = trimOWS(v)
	const scheme = "Basic"
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) || !isOWS(v[len(scheme)]) {
		return "", "", false
	}
	b, ok := decodeBase64(trimOWS(v[len(scheme):]))
	if !ok {
		return "", "", false
	}
	user, pass, _ = strings.Cut(string(b), ":")
	return user, pass, true
}

// decodeBase64 decodes enc, standard base64 padded or not, and reports
// whether it is.
func decodeBase64(enc string) ([]byte, bool) {
	if b, err := base64.StdEncoding.DecodeString(enc); err == nil {
		return b, true
	}
	b, err := base64.RawStdEncoding.DecodeString(enc)
	return b, err == nil
}

// LooksLikeJWT reports whether s has the shape of a JWS in compact form
// whose header is a JSON object: three base64url parts, the first
// beginning "eyJ" (how `{"` begins in base64url), the signature possibly
// empty (an unsigned token, which is refused as invalid, not read as an
// API key).
func LooksLikeJWT(s string) bool {
	if !strings.HasPrefix(s, "eyJ") || strings.Count(s, ".") != 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !is(s[i], classBase64URL|classDot) {
			return false
		}
	}
	return strings.Split(s, ".")[1] != ""
}

// credential is APIKey with keys of up to max bytes.
func credential(h http.Header, max int) (key string, ok bool, err error) {
	bearer, hasBearer, err := authorizationToken(h[headerAuthorization], max)
	if err != nil {
		return "", false, err
	}
	vals := h[headerAPIKey]
	switch {
	case len(vals) > 1:
		return "", false, fmt.Errorf("parsing X-API-Key header: %w: more than one value", ErrMalformedKey)
	case len(vals) == 1:
		token, err := apiKeyHeader(vals[0], bearer, hasBearer, max)
		return token, err == nil, err
	case hasBearer:
		return bearer, true, nil
	}
	return "", false, nil
}

// apiKeyHeader returns the key of the X-API-Key value v, a key of up to
// max bytes, refusing one that differs from the request's Bearer token
// (hasBearer).
func apiKeyHeader(v, bearer string, hasBearer bool, max int) (string, error) {
	token := trimOWS(v)
	if hasBearer && token != bearer {
		return "", fmt.Errorf("parsing credentials: %w: a Bearer token and an X-API-Key that differ", ErrMalformedKey)
	}
	if err := checkKey(token, max); err != nil {
		return "", fmt.Errorf("parsing X-API-Key header: %w", err)
	}
	return token, nil
}

// authorizationToken returns the Bearer (or Token) credential of the
// Authorization lines auth, a key of up to max bytes, and whether there
// is one. More than one line, a malformed key, or "Bearer" past the
// scheme is an error.
func authorizationToken(auth []string, max int) (string, bool, error) {
	switch len(auth) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, fmt.Errorf("parsing %s header: %w: more than one Authorization header", headerAuthorization, ErrMalformedKey)
	}
	bearer, ok := bearerToken(auth[0])
	if ok {
		if err := checkKey(bearer, max); err != nil {
			return "", false, fmt.Errorf("parsing %s header: %w", headerAuthorization, err)
		}
	}
	if bearerElsewhere(auth[0]) {
		// Laravel's bearerToken() takes the last "Bearer " anywhere
		// in the header ("Basic x, Bearer KEY", "xBearer KEY").
		return "", false, fmt.Errorf("parsing %s header: %w: \"Bearer\" past its scheme", headerAuthorization, ErrMalformedKey)
	}
	return bearer, ok, nil
}

// bearerToken returns the token of an Authorization value "Bearer <token>"
// with surrounding whitespace trimmed, and whether the scheme is Bearer,
// or Token, which Rails (authenticate_with_http_token) and Django REST
// framework (TokenAuthentication) read alike: "Token <token>", or as
// Rails reads its options, `Token token="<token>", nonce="..."`.
func bearerToken(v string) (token string, ok bool) {
	if token, ok = schemeToken(v, "Bearer"); ok {
		return token, true
	}
	if token, ok = schemeToken(v, "Token"); !ok {
		return "", false
	}
	first, _, _ := strings.Cut(token, ",")
	first, _, _ = strings.Cut(first, ";")
	if name, val, ok := strings.Cut(trimOWS(first), "="); ok && strings.EqualFold(trimOWS(name), "token") {
		return strings.Trim(trimOWS(val), `"`), true
	}
	return token, true
}

// bearerElsewhere reports whether an Authorization value names the
// Bearer scheme ("Bearer" and a space, in any case) anywhere but as its
// own: the letters inside a token (base64 holds no space) are not one.
func bearerElsewhere(v string) bool {
	v = strings.ToLower(trimOWS(v))
	rest := strings.TrimPrefix(v, "bearer")
	return strings.Contains(rest, "bearer ") || strings.Contains(rest, "bearer\t")
}

// schemeToken returns what follows scheme in an Authorization value,
// whitespace trimmed, and whether the scheme (in any case) is that one.
func schemeToken(v, scheme string) (string, bool) {
	v = trimOWS(v)
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	rest := v[len(scheme):]
	if rest != "" && !isOWS(rest[0]) {
		return "", false // another scheme, such as "Bearerish"
	}
	return trimOWS(rest), true
}

// checkKey reports, wrapping ErrMalformedKey, what is wrong with key.
func checkKey(key string, max int) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrMalformedKey)
	case len(key) > max:
		return fmt.Errorf("%w: longer than %d bytes", ErrMalformedKey, max)
	}
	for i := 0; i < len(key); i++ {
		if !is(key[i], classVisible) {
			return fmt.Errorf("%w: byte %d is outside visible ASCII", ErrMalformedKey, i)
		}
	}
	return nil
}

// UserID reads a user id set by a trusted auth proxy from the header name.
// Call it only when the peer is trusted (see [TrustedProxies]); deciding
// that is the caller's job, since any client can send any header.
//
// ok is false, and err nil, when the header is absent. err wraps
// [ErrMalformedUser] when the value is empty, longer than 256 bytes, not
// valid UTF-8, or contains control characters (C0, DEL or C1), and when
// the header appears more than once. On error the id is "" and ok is
// false. The error never contains the value.
func UserID(h http.Header, name string) (string, bool, error) {
	vals := h.Values(name)
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, fmt.Errorf("parsing %s header: %w: more than one value", name, ErrMalformedUser)
	}
	v := vals[0]
	if err := checkUser(v); err != nil {
		return "", false, fmt.Errorf("parsing %s header: %w", name, err)
	}
	return v, true, nil
}

// checkUser reports, wrapping ErrMalformedUser, what is wrong with id.
func checkUser(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrMalformedUser)
	case len(id) > maxUserLength:
		return fmt.Errorf("%w: longer than %d bytes", ErrMalformedUser, maxUserLength)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: invalid UTF-8", ErrMalformedUser)
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%w: control character at byte %d", ErrMalformedUser, i)
	}
	return nil
}

// Hasher turns identities into stable pseudonyms with HMAC-SHA256 under a
// secret, so raw API keys, user ids and IPs never appear in a store key,
// log line or metric label. Create one with [NewHasher] (the zero Hasher
// has an empty secret). A Hasher is safe for concurrent use and must not
// be copied after first use.
type Hasher struct {
	key   []byte
	state sync.Pool // of *macState keyed with key
}

// macState is an HMAC-SHA256 instance with scratch space, reused through
// Hasher.state so that Hash allocates only its result.
type macState struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// NewHasher returns a Hasher keyed with a copy of secret.
//
// The secret may be empty only in tests. In production configure a secret
// of at least 32 random bytes and keep it out of the store and the logs:
// without it the pseudonyms of low-entropy identities such as IP addresses
// can be reversed by trying every candidate. Pseudonyms are stable only as
// long as the secret is; changing it gives every identity a fresh limit.
func NewHasher(secret []byte) *Hasher {
	return &Hasher{key: append([]byte(nil), secret...)}
}

// hashLen is how many bytes of the HMAC a pseudonym keeps: 128 bits.
const hashLen = 16

// maxPooledBuf bounds the scratch buffer kept between calls.
const maxPooledBuf = 4 << 10

// Hash returns kind + "_" + the first 16 bytes of
// HMAC-SHA256(secret, kind + "\x00" + value) in unpadded base64url (22
// characters). kind is short, like "k" (API key id), "u" (user) or "ip";
// it is part of the MAC, so equal values of different kinds get unrelated
// pseudonyms.
func (h *Hasher) Hash(kind, value string) string {
	st, _ := h.state.Get().(*macState)
	if st == nil {
		st = &macState{mac: hmac.New(sha256.New, h.key)}
	}
	st.mac.Reset()
	st.buf = append(append(append(st.buf[:0], kind...), 0), value...)
	st.mac.Write(st.buf)
	sum := st.mac.Sum(st.sum[:0])

	const encLen = (hashLen*8 + 5) / 6 // 22
	var enc [encLen]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:hashLen])
	clear(st.buf) // do not keep raw identities around
	if cap(st.buf) > maxPooledBuf {
		st.buf = nil
	}
	h.state.Put(st)

	var b strings.Builder
	b.Grow(len(kind) + 1 + encLen)
	b.WriteString(kind)
	b.WriteByte('_')
	b.Write(enc[:])
	return b.String()
}

// KeyDigest returns the digest under which an API key is stored in
// configuration: "sha256:" + the lowercase hex of SHA-256(key). It does not
// depend on any secret, so configuration files can hold it; compare
// digests with [crypto/subtle.ConstantTimeCompare].
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// The classes of bytes the parsers here tell apart, as bits of
// byteClasses.
const (
	classAlnum      = 1 << iota // ASCII letters and digits
	classTchar                  // may appear in an RFC 9110 token
	classNode                   // may appear in an unquoted for= value
	classQuoted                 // may appear in a quoted string
	classBase64URL              // the base64url alphabet
	classObfuscated             // an obfuscated identifier, after its '_'
	classOWS                    // optional whitespace: SP and HTAB
	classVisible                // visible ASCII, 0x21 to 0x7e
	classDot                    // '.', which separates a JWS's parts
)

// byteClasses holds, for each byte, the classes it belongs to.
var byteClasses = newByteClasses()

// newByteClasses returns byteClasses: each class the bytes of its
// sets, classVisible the visible ASCII bytes, and classQuoted HTAB, SP,
// visible ASCII and obs-text (every byte from SP on but DEL).
func newByteClasses() [256]uint16 {
	const alnum = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	sets := []struct {
		classes uint16
		bytes   string
	}{
		{classAlnum | classTchar | classNode | classBase64URL | classObfuscated, alnum},
		{classTchar | classNode, "!#$%&'*+-.^_`|~"},
		// The ':', '[' and ']' that real proxies send unquoted
		// although RFC 7239 asks for quotes.
		{classNode, ":[]"},
		{classBase64URL, "-_"},
		{classObfuscated, "._-"},
		{classOWS | classQuoted, " \t"},
		{classDot, "."},
	}
	var t [256]uint16
	for _, set := range sets {
		for i := range len(set.bytes) {
			t[set.bytes[i]] |= set.classes
		}
	}
	for c := 0x21; c < 0x100; c++ {
		t[c] |= classQuoted
	}
	for c := 0x21; c < 0x7f; c++ {
		t[c] |= classVisible
	}
	t[0x7f] &^= classQuoted
	return t
}

// is reports whether c belongs to one of classes.
func is(c byte, classes uint16) bool { return byteClasses[c]&classes != 0 }

// trimOWS returns s without its leading and trailing optional whitespace.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// isOWS reports whether c is optional whitespace: SP or HTAB.
func isOWS(c byte) bool { return is(c, classOWS) }

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool { return is(c, classAlnum) }

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool { return is(c, classTchar) }

// isNodeChar reports whether c may appear in an unquoted for= value: token
// characters plus the ':', '[' and ']' that real proxies send unquoted
// although RFC 7239 asks for quotes.
func isNodeChar(c byte) bool { return is(c, classNode) }

// isQuotedChar reports whether c may appear in a quoted string, directly
// or escaped: HTAB, SP, visible ASCII and obs-text.
func isQuotedChar(c byte) bool { return is(c, classQuoted) }

// isBase64URL reports whether c is in the base64url alphabet.
func isBase64URL(c byte) bool { return is(c, classBase64URL) }
