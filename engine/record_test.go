package engine

import (
	"sync"
	"testing"
	"time"
)

// TestRecordingKeepsTheLast: a recording written from many goroutines at
// once keeps the last calls (at least its size), oldest first, each call
// once; a status set on a record still held reaches it, one on a record
// overwritten since is dropped.
func TestRecordingKeepsTheLast(t *testing.T) {
	r := NewRecording(64, 1)
	var wg sync.WaitGroup
	seqs := make([]uint64, 1000)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(seqs); i += 8 {
				seqs[i] = r.add(time.UnixMilli(int64(i)), Call{Subject: Subject{ID: "s"}}, &Verdict{Outcome: Allowed})
			}
		}()
	}
	wg.Wait()
	r.answered(1000, 401) // the last call
	r.answered(1, 401)    // overwritten long ago
	recs := r.Records()
	if len(recs) < 64 || len(recs) > 64+recordShards {
		t.Fatalf("%d records kept, want the last 64 or so", len(recs))
	}
	for _, rec := range r.Records() {
		if rec.Status != 0 && rec.Status != 401 {
			t.Fatalf("status %d", rec.Status)
		}
	}
	if last := recs[len(recs)-1]; last.Status != 401 {
		t.Errorf("the last call's status: %d, want 401", last.Status)
	}
	if first := recs[0]; first.Status != 0 {
		t.Errorf("a status reached the oldest record kept: %+v", first)
	}
	// Oldest first by call: the calls kept are the newest sequence numbers.
	if n := r.seq.Load(); n != 1000 {
		t.Fatalf("%d calls numbered, want 1000", n)
	}
	r2 := NewRecording(16, 1)
	for i := range 40 {
		r2.add(time.UnixMilli(int64(i)), Call{Subject: Subject{ID: "s"}}, &Verdict{})
	}
	got := r2.Records()
	if len(got) != 16 || got[0].T != 24 || got[15].T != 39 {
		t.Errorf("sequential: %d records from %d to %d, want the last 16 (24 to 39)", len(got), got[0].T, got[len(got)-1].T)
	}
}
