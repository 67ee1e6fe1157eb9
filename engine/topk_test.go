package engine_test

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/engine"
)

// TestTopRefusedUnderFlood: heavy hitters stay on top while a flood of
// one-off subjects (an attacker's many addresses) churns the tracker,
// whose size stays bounded (space-saving finds every subject refused
// more than N/size times: here 101,500/128, about 800).
func TestTopRefusedUnderFlood(t *testing.T) {
	top := engine.NewTopRefused(128)
	for i := 0; i < 100_000; i++ {
		top.Add(fmt.Sprint("one-off-", i))
		if i%50 == 0 {
			top.Add("heavy")
		}
		if i%100 == 0 {
			top.Add("second")
		}
	}
	got := top.Top(1000)
	if len(got) != 128 {
		t.Fatalf("the tracker holds %d subjects, bound 128", len(got))
	}
	if got[0].Subject != "heavy" || got[0].Count < 2000 || got[1].Subject != "second" || got[1].Count < 1000 {
		t.Fatalf("top two: %+v, want heavy (>= 2,000) then second (>= 1,000)", got[:2])
	}
}
