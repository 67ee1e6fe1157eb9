package algo

import "crypto/sha256"

// StateKey names a request's state as the stores tell states apart (its
// Name, Tag, Subject and algorithm; a Tag equal to the Subject is no Tag),
// compact enough for an in-process cache bounded by a number of keys: a
// part longer than MaxStateKeyPart bytes is held as its SHA-256 digest
// (and marked in Digests, so no part as written names another's digest).
// What a cache keeps per key is then bounded however long callers make
// their subjects.
type StateKey struct {
	Name, Tag, Subject string
	Algorithm          Algorithm
	// Digests marks the parts held as digests: 1 Name, 2 Tag, 4 Subject.
	Digests uint8
}

// MaxStateKeyPart is the longest part a StateKey holds as it is.
const MaxStateKeyPart = 64

// StateKeyOf returns r's StateKey.
func StateKeyOf(r *Request) StateKey {
	k := StateKey{Name: r.Name, Tag: r.Tag, Subject: r.Subject, Algorithm: r.Limit.Algorithm}
	if k.Tag == k.Subject {
		k.Tag = ""
	}
	if len(k.Name) <= MaxStateKeyPart && len(k.Tag) <= MaxStateKeyPart && len(k.Subject) <= MaxStateKeyPart {
		return k
	}
	for i, p := range [...]*string{&k.Name, &k.Tag, &k.Subject} {
		if len(*p) > MaxStateKeyPart {
			sum := sha256.Sum256([]byte(*p))
			*p = string(sum[:])
			k.Digests |= 1 << i
		}
	}
	return k
}
