package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strings"
	"sync"
)

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
