package engine

import (
	"container/heap"
	"sort"
	"sync"
)

// TopRefused keeps approximate counts of the most refused subjects (their
// pseudonyms, never raw identities) in bounded memory: when full, a new
// subject replaces the least counted one and inherits its count (the
// space-saving algorithm), so heavy hitters are never missed. The counts
// are kept in a min-heap, so counting a refusal costs O(log max) however
// many subjects are refused: a flood of refusals from new subjects never
// scans the tracker.
type TopRefused struct {
	mu    sync.Mutex
	index map[string]*topItem
	heap  topHeap // least counted first
	max   int
}

type topItem struct {
	subject string
	count   int64
	i       int // position in the heap
}

// topHeap is a container/heap of items by count.
type topHeap []*topItem

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h topHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = i; h[j].i = j }
func (h *topHeap) Push(x any)        { it := x.(*topItem); it.i = len(*h); *h = append(*h, it) }
func (h *topHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// NewTopRefused returns a tracker holding at most max subjects.
func NewTopRefused(max int) *TopRefused {
	return &TopRefused{index: map[string]*topItem{}, max: max}
}

// Add counts one refusal of subject.
func (t *TopRefused) Add(subject string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if it, ok := t.index[subject]; ok {
		it.count++
		heap.Fix(&t.heap, it.i)
		return
	}
	if len(t.heap) < t.max {
		it := &topItem{subject: subject, count: 1}
		t.index[subject] = it
		heap.Push(&t.heap, it)
		return
	}
	if t.max < 1 {
		return
	}
	it := t.heap[0] // the least counted gives its place, and its count
	delete(t.index, it.subject)
	it.subject = subject
	it.count++
	t.index[subject] = it
	heap.Fix(&t.heap, 0)
}

// SubjectCount is one entry of [TopRefused.Top].
type SubjectCount struct {
	Subject string `json:"subject"`
	Count   int64  `json:"count"`
}

// Top returns the n most refused subjects, most first.
func (t *TopRefused) Top(n int) []SubjectCount {
	t.mu.Lock()
	out := make([]SubjectCount, 0, len(t.heap))
	for _, it := range t.heap {
		out = append(out, SubjectCount{it.subject, it.count})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Count > out[j].Count || out[i].Count == out[j].Count && out[i].Subject < out[j].Subject
	})
	return out[:min(n, len(out))]
}
