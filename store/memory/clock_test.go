package memory

import (
	"testing"
	"time"
)

// TestWallMS checks the store's default clock against time.Now.
func TestWallMS(t *testing.T) {
	for range 1000 {
		before := time.Now().UnixMilli()
		ms := wallMS()
		after := time.Now().UnixMilli()
		if ms < before || ms > after {
			t.Fatalf("wallMS() = %d, want within [%d, %d]", ms, before, after)
		}
	}
}
