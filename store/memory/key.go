package memory

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/tollgate/tollgate/algo"
)

// A key names one state: an algorithm (or pseudo-algorithm), a name, a
// tag (empty when it is the subject) and a subject. Its bytes are the
// algorithm, then the name and the tag, each length-prefixed so that no
// two different keys share bytes, then the subject. Entries hold the bytes,
// built on the stack for lookups.
type key struct {
	alg                algo.Algorithm
	name, tag, subject string
}

// keyOf returns the key of a rate-limit request.
func keyOf(r *algo.Request) key {
	k := key{alg: r.Limit.Algorithm, name: r.Name, tag: r.Tag, subject: r.Subject}
	if k.tag == k.subject {
		k.tag = ""
	}
	return k
}

// appendTo appends the key's bytes to b.
func (k *key) appendTo(b []byte) []byte {
	b = algo.AppendKeyPrefix(b, k.alg, k.name)
	b = binary.AppendUvarint(b, uint64(len(k.tag)))
	b = append(b, k.tag...)
	return append(b, k.subject...)
}

// hashes returns the hash of key k and the shard of its group. The
// requests of one group share a shard so that [Store.AllowAll] can decide
// them under one lock. A key without a tag hashes as its subject's hash
// (which also picks the shard, by its top bits) xor the hash of its
// prefix ([algo.AppendKeyPrefix]).
func (s *Store) hashes(k *key) (uint64, *shard) {
	if k.tag == "" {
		hg := maphash.String(s.seed, k.subject)
		var buf [64]byte
		ph := maphash.Bytes(s.seed, algo.AppendKeyPrefix(buf[:0], k.alg, k.name))
		return hg ^ ph, &s.shards[hg>>s.shift]
	}
	var buf [96]byte
	h := maphash.Bytes(s.seed, k.appendTo(buf[:0]))
	return h, &s.shards[maphash.String(s.seed, k.tag)>>s.shift]
}

// Pseudo-algorithms that keep the login guard's and the leases' state in
// the same shards.
const (
	lockoutKind algo.Algorithm = 250
	leaseKind   algo.Algorithm = 251
)
