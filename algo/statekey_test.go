package algo_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/algo"
)

// TestStateKey: short parts are kept as they are, long ones as digests
// that no part written as it is can equal, and distinct requests keep
// distinct keys.
func TestStateKey(t *testing.T) {
	long := strings.Repeat("x", 100)
	sum := sha256.Sum256([]byte(long))
	k := algo.StateKeyOf(&algo.Request{Name: "api", Tag: "t", Subject: long})
	if k.Name != "api" || k.Tag != "t" || k.Subject != string(sum[:]) || k.Digests != 4 {
		t.Fatalf("key of a long subject: %+v", k)
	}
	if len(k.Name)+len(k.Tag)+len(k.Subject) > 3*algo.MaxStateKeyPart {
		t.Fatalf("key of %d bytes", len(k.Name)+len(k.Tag)+len(k.Subject))
	}
	// A subject written as another's digest is not that subject.
	if algo.StateKeyOf(&algo.Request{Name: "api", Tag: "t", Subject: string(sum[:])}) == k {
		t.Fatal("a subject equal to a digest shares the long subject's key")
	}
	if algo.StateKeyOf(&algo.Request{Name: "api", Tag: "s", Subject: "s"}) != algo.StateKeyOf(&algo.Request{Name: "api", Subject: "s"}) {
		t.Fatal("a tag equal to the subject is no tag")
	}
	if algo.StateKeyOf(&algo.Request{Name: "api", Subject: long + "a"}) == algo.StateKeyOf(&algo.Request{Name: "api", Subject: long + "b"}) {
		t.Fatal("two long subjects share a key")
	}
}
