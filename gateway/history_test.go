package gateway

import (
	"testing"
	"time"
)

// TestHistoryRates: a sample is what the counters moved by since the last
// one, per second, per route group · plan; the store latency quantiles
// are of the interval's observations only; the most refused subjects are
// those refused in the interval.
func TestHistoryRates(t *testing.T) {
	var h history
	t0 := time.UnixMilli(1_800_000_000_000)
	c := func(at time.Duration, allowed, refused, shadow, fallback float64, lat []uint64, alice int64) counts {
		return counts{t: t0.Add(at),
			allowed:   map[string]float64{"public · free": allowed},
			refused:   map[string]float64{"public · free": refused},
			shadow:    map[string]float64{"strict": shadow},
			fallback:  fallback,
			latency:   lat,
			bounds:    []float64{0.001, 0.01, 0.1},
			refusedBy: map[string]int64{"u_alice": alice, "u_bob": 7},
		}
	}
	h.add(c(0, 100, 10, 0, 0, []uint64{0, 0, 100}, 3), "closed")
	if got := h.since(0); len(got) != 0 {
		t.Fatalf("the first reading is a baseline, not a sample: %+v", got)
	}
	// 2 s later: 200 more allowed, 40 more refused, 10 shadow, 6
	// fallbacks; 100 store calls, 90 under 1 ms, 9 under 10 ms, 1 slower
	// (where the 100 before were all slow); alice refused 8 more times,
	// bob not at all.
	h.add(c(2*time.Second, 300, 50, 10, 6, []uint64{90, 99, 200}, 11), "half-open")
	got := h.since(0)
	if len(got) != 1 {
		t.Fatalf("%d samples, want 1", len(got))
	}
	s := got[0]
	if s.Allowed["public · free"] != 100 || s.Refused["public · free"] != 20 || s.Shadow["strict"] != 5 || s.Fallback != 3 {
		t.Errorf("rates %+v", s)
	}
	if s.P50 != 1 || s.P99 != 10 {
		t.Errorf("store latency p50 %v p99 %v ms over the interval, want 1 and 10", s.P50, s.P99)
	}
	if s.Breaker != "half-open" || s.T != t0.Add(2*time.Second).UnixMilli() {
		t.Errorf("breaker %q at %d", s.Breaker, s.T)
	}
	if len(s.Top) != 1 || s.Top[0] != (topRefusedEntry{"u_alice", 8}) {
		t.Errorf("most refused in the interval: %+v, want alice's 8", s.Top)
	}
	if later := h.since(s.T); len(later) != 0 {
		t.Errorf("since the newest sample: %+v", later)
	}
}

// TestHistoryBounded: the ring keeps the last historySamples samples,
// oldest first, however long the gateway runs.
func TestHistoryBounded(t *testing.T) {
	var h history
	t0 := time.UnixMilli(1_800_000_000_000)
	for i := range historySamples + 250 {
		h.add(counts{t: t0.Add(time.Duration(i) * time.Second), allowed: map[string]float64{"g · p": float64(i * i)}}, "")
	}
	got := h.since(0)
	if len(got) != historySamples {
		t.Fatalf("%d samples kept, want %d", len(got), historySamples)
	}
	for i, s := range got {
		n := i + 250 // the sample ending at second n
		if want := t0.Add(time.Duration(n) * time.Second).UnixMilli(); s.T != want {
			t.Fatalf("sample %d ends at %d, want %d (oldest first)", i, s.T, want)
		}
		if want := float64(n*n - (n-1)*(n-1)); s.Allowed["g · p"] != want {
			t.Fatalf("sample %d: %v allowed/s, want %v", i, s.Allowed["g · p"], want)
		}
	}
}
