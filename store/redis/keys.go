package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tollgate/tollgate/algo"
)

// Key layout. Every key the store writes is
//
//	rl:v3:{<group>}:<name>[:<subject>]:<kind>[:held]
//
// <group> is the hash tag: a rate request's Group (its Tag, or its
// Subject), or the subject of a login guard or a lease; on Redis Cluster it
// alone picks the slot, so the keys of one group, and a key and its held
// set, share a slot. It is the group as it is when it can stand in a hash
// tag, and otherwise "h:" and a hash of it (see safeTag). <name> is the
// request's Name, replaced by "h:" and a hash of it when longer than
// maxName bytes or itself starting with "h:" (see safeName), and
// <subject> (present only for a request whose Tag groups it with other
// subjects) its Subject, made safe as the group is; both are escaped, '%' as %25 and ':' as %3A, so neither holds a colon.
// <kind> is the algorithm's (gcra, tb, lb, fw, slc, sc), or lock for a login
// guard's state and lease for leases, or settled for the marker of a
// settled reservation (see [Store.SettleAll]), whose <name> is then the
// reservation's ID (made safe and escaped as a name is) and <group> its
// group's; ":held" follows for the set of held
// attempts beside a rate limit's or a login guard's state. So the fields
// between the colons after the tag are the name, perhaps the subject,
// then one of the kinds, perhaps followed by held: no kind is "held", so
// the fields read one way only, and no two requests' states share a key,
// nor a state and a marker.
// Names without '%' or ':' appear as they are: rl:v3:{user-42}:api:gcra.

// Key kinds beside the algorithms' (see keySuffix), and the suffix of a
// held set.
const (
	lockSuffix    = ":lock"
	leaseSuffix   = ":lease"
	settledSuffix = ":settled"
	heldSuffix    = ":held"
)

// buildKey returns rl:v3:{<group>}:<name>[:<subject>]<suffix>, where
// subject is a safeTag (never empty), or empty for none (no Tag, or a Tag
// equal to the Subject).
func buildKey(group, policy, subject, suffix string) string {
	tag := safeTag(group)
	policy = escapePart(safeName(policy))
	subject = escapePart(subject)
	var b strings.Builder
	b.Grow(len(KeyPrefix) + len(tag) + len(policy) + len(subject) + len(suffix) + 4)
	b.WriteString(KeyPrefix)
	b.WriteByte('{')
	b.WriteString(tag)
	b.WriteString("}:")
	b.WriteString(policy)
	if subject != "" {
		b.WriteByte(':')
		b.WriteString(subject)
	}
	b.WriteString(suffix)
	return b.String()
}

// maxName is the longest name a key holds as it is.
const maxName = 128

// safeName returns name if a key can hold it as it is (escaped), and
// otherwise "h:" and a hex SHA-256 prefix of it: a name longer than
// maxName bytes (names may be made of request data, such as an Envoy
// limit override's descriptor keys, and every key's length is bounded
// whoever names it), or one that itself starts with "h:", so that no
// name can be chosen to share another's key.
func safeName(name string) string {
	if len(name) <= maxName && !strings.HasPrefix(name, "h:") {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "h:" + hex.EncodeToString(sum[:16])
}

// escapePart returns s with '%' written as %25 and ':' as %3A, so that it
// holds no colon and every s has its own escaped form.
func escapePart(s string) string {
	if strings.IndexByte(s, ':') < 0 && strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Key returns the Redis key holding the state of subject under name,
// for a request without a Tag.
func Key(policy, subject string, a algo.Algorithm) string {
	return KeyFor(algo.Request{Name: policy, Subject: subject, Limit: algo.Limit{Algorithm: a}})
}

// KeyFor returns the Redis key of a request's state:
// rl:v3:{<subject>}:<name>:<alg>, or rl:v3:{<tag>}:<name>:<subject>:<alg>
// for a request whose Tag groups it with others (see the key layout
// above).
func KeyFor(r algo.Request) string {
	sub := ""
	if r.Tag != "" && r.Tag != r.Subject {
		sub = safeTag(r.Subject)
	}
	return buildKey(r.Group(), r.Name, sub, keySuffix[r.Limit.Algorithm])
}

// heldKey returns the key of the set of attempts held on a request's
// limit (see [Store.Reserve]), in the slot of its state.
func heldKey(r algo.Request) string { return KeyFor(r) + heldSuffix }

// lockKeys returns the keys of an account's login-guard state and of its
// held attempts.
func lockKeys(policy, subject string) (state, held string) {
	state = buildKey(subject, policy, "", lockSuffix)
	return state, state + heldSuffix
}

// settledKey returns the key of the marker of reservation id of group
// (see [Store.SettleAll]), in the group's slot.
func settledKey(group, id string) string { return buildKey(group, id, "", settledSuffix) }

// leaseKey returns the key of a subject's leases under policy.
func leaseKey(policy, subject string) string { return buildKey(subject, policy, "", leaseSuffix) }

// safeTag returns subject if it can stand inside a hash tag as it is, and
// otherwise "h:" and a hex SHA-256 prefix of it. Subjects that themselves
// start with "h:" are always hashed, so no subject can be chosen to share
// another's key.
func safeTag(subject string) string {
	ok := len(subject) > 0 && len(subject) <= 64 && !strings.HasPrefix(subject, "h:")
	for i := 0; ok && i < len(subject); i++ {
		c := subject[i]
		ok = c > ' ' && c < 0x7f && c != '{' && c != '}'
	}
	if ok {
		return subject
	}
	sum := sha256.Sum256([]byte(subject))
	return "h:" + hex.EncodeToString(sum[:16])
}
