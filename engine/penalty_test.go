package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestPenaltyBoxFull: a box filled with penalties that have not ended
// still takes new ones (evicting the one that ends first among a few),
// rather than scanning every entry on each request and then dropping the
// new penalty.
func TestPenaltyBoxFull(t *testing.T) {
	b := &penaltyBox{until: map[string]time.Time{}}
	now := time.Now()
	for i := 0; i < maxPenalties+1000; i++ {
		b.set(fmt.Sprint("ip", i), now.Add(time.Hour+time.Duration(i)))
	}
	if len(b.until) > maxPenalties {
		t.Fatalf("the box holds %d penalties, bound %d", len(b.until), maxPenalties)
	}
	if _, ok := b.get(fmt.Sprint("ip", maxPenalties+999), now); !ok {
		t.Fatal("the newest penalty was dropped")
	}
}
