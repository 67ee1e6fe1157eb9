package memory

import (
	"testing"
	"unsafe"
)

// TestLayout checks the sizes the lookup's memory traffic depends on.
func TestLayout(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 128 {
		t.Errorf("an entry is %d bytes, want 128", n)
	}
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Errorf("a shard is %d bytes, want 128", n)
	}
}
