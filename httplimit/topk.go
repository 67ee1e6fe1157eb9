package httplimit

import (
	"sort"
	"sync"
)

// TopRefused keeps approximate counts of the most refused subjects (their
// pseudonyms, never raw identities) in bounded memory: when full, a new
// subject replaces the least counted one and inherits its count (the
// space-saving algorithm), so heavy hitters are never missed.
type TopRefused struct {
	mu     sync.Mutex
	counts map[string]int64
	max    int
}

// NewTopRefused returns a tracker holding at most max subjects.
func NewTopRefused(max int) *TopRefused {
	return &TopRefused{counts: map[string]int64{}, max: max}
}

// Add counts one refusal of subject.
func (t *TopRefused) Add(subject string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.counts[subject]; ok || len(t.counts) < t.max {
		t.counts[subject]++
		return
	}
	minK, minV := "", int64(-1)
	for k, v := range t.counts {
		if minV < 0 || v < minV {
			minK, minV = k, v
		}
	}
	delete(t.counts, minK)
	t.counts[subject] = minV + 1
}

// SubjectCount is one entry of [TopRefused.Top].
type SubjectCount struct {
	Subject string `json:"subject"`
	Count   int64  `json:"count"`
}

// Top returns the n most refused subjects, most first.
func (t *TopRefused) Top(n int) []SubjectCount {
	t.mu.Lock()
	out := make([]SubjectCount, 0, len(t.counts))
	for k, v := range t.counts {
		out = append(out, SubjectCount{k, v})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Count > out[j].Count || out[i].Count == out[j].Count && out[i].Subject < out[j].Subject
	})
	return out[:min(n, len(out))]
}
