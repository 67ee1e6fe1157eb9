package engine

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
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

const recordTokensPolicy = `version: r1
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free:
    limits:
      - {name: tpm, algorithm: fixed_window, rate: 1000, period: 1m, unit: tokens}
  plain:
    limits:
      - {name: rpm, algorithm: fixed_window, rate: 100, period: 1m}
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: builtin:echo, tokens: {default_output: 100}}
`

// TestRecordingKeepsTokens: a token call's record keeps its estimate and
// its model, bounded, and, once the call ends, what it settled at: the
// usage reported as reported, or the estimate; a refused call, or one
// not ended, none. A snapshot taken before the settle is not written by
// it, and a settle of a record overwritten since is dropped.
func TestRecordingKeepsTokens(t *testing.T) {
	p, err := policy.Parse([]byte(recordTokensPolicy), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := memory.New(memory.Options{Now: clock, SweepInterval: -1})
	defer st.Close()
	rec := NewRecording(16, 1)
	e, err := New(Options{Policy: p, Store: st, Now: clock, Recording: rec, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	long := strings.Repeat("m", maxRecordedModel)
	for i, c := range []struct {
		why    string
		plan   string
		tokens Tokens
		usage  *Usage // nil: the call does not end
		want   TokenRecord
	}{
		{"a refund, reported", "free", Tokens{Input: 10, Output: 100, Model: "gpt"}, &Usage{Input: 10, Output: 20, Reported: true},
			TokenRecord{Input: 10, Output: 100, Model: "gpt", Settled: SettledUsage, Usage: RecordUsage{Input: 10, Output: 20}}},
		{"a debt past max_usage, kept as reported: the replay caps it", "free", Tokens{Output: 10}, &Usage{Output: 5_000_000, Reported: true},
			TokenRecord{Output: 10, Settled: SettledUsage, Usage: RecordUsage{Output: 5_000_000}}},
		{"no usage reported: the estimate", "free", Tokens{Output: 10}, &Usage{},
			TokenRecord{Output: 10, Settled: SettledEstimate}},
		{"a report not believed: the estimate", "free", Tokens{Output: 10}, &Usage{Output: 3, Reported: true, Impossible: true},
			TokenRecord{Output: 10, Settled: SettledEstimate}},
		{"a negative count: the estimate", "free", Tokens{Output: 10}, &Usage{Input: -1, Output: 3, Reported: true},
			TokenRecord{Output: 10, Settled: SettledEstimate}},
		{"a total from a usage header", "free", Tokens{Output: 10}, &Usage{Output: 7, Reported: true, TotalOnly: true},
			TokenRecord{Output: 10, Settled: SettledUsage, Usage: RecordUsage{Output: 7, TotalOnly: true}}},
		{"a reported usage of nothing is a usage, not none", "free", Tokens{Output: 10}, &Usage{Reported: true},
			TokenRecord{Output: 10, Settled: SettledUsage}},
		{"a model as long as a policy can name is kept", "free", Tokens{Output: 1, Model: long}, &Usage{},
			TokenRecord{Output: 1, Model: long, Settled: SettledEstimate}},
		{"a longer model is dropped: no policy can name it", "free", Tokens{Output: 1, Model: long + "x"}, &Usage{},
			TokenRecord{Output: 1, Settled: SettledEstimate}},
		{"a plan without a token budget: its usage is kept for a candidate's", "plain", Tokens{Output: 10}, &Usage{Output: 4, Reported: true},
			TokenRecord{Output: 10, Settled: SettledUsage, Usage: RecordUsage{Output: 4}}},
		{"refused (an estimate above the budget): never settled", "free", Tokens{Output: 5000}, &Usage{Output: 4, Reported: true},
			TokenRecord{Output: 5000}},
		{"not ended yet: not settled", "free", Tokens{Output: 10}, nil, TokenRecord{Output: 10}},
	} {
		now = now.Add(time.Minute) // a window of its own
		v := e.Check(ctx, Call{Route: p.Routes[0], Subject: Subject{Kind: "key", ID: "k_" + strconv.Itoa(i), Plan: p.Plans[c.plan]}, Tokens: &c.tokens})
		before := rec.Records()
		if c.usage != nil && v.Outcome.Admitted() {
			v.Used(*c.usage)
			v.Done(ctx)
			v.Used(Usage{Output: 999, Reported: true}) // after Done: neither settled nor recorded
			v.Done(ctx)
		}
		if c.plan == "plain" && v.Deferred() {
			t.Errorf("%s: deferred, with no token budget to settle", c.why)
		}
		recs := rec.Records()
		got := recs[len(recs)-1].Tokens
		if got == nil || *got != c.want {
			t.Errorf("%s: recorded %+v, want %+v", c.why, got, c.want)
		}
		if b := before[len(before)-1].Tokens; b.Settled != "" {
			t.Errorf("%s: a snapshot taken before the settle was written: %+v", c.why, b)
		}
	}
	// A call whose record the ring has dropped since settles no other.
	v := e.Check(ctx, Call{Route: p.Routes[0], Subject: Subject{Kind: "key", ID: "k_old", Plan: p.Plans["free"]}, Tokens: &Tokens{Output: 1}})
	for range 40 {
		e.Check(ctx, Call{Route: p.Routes[0], Subject: Subject{Kind: "key", ID: "k_new", Plan: p.Plans["plain"]}, Tokens: &Tokens{Output: 1}})
	}
	v.Used(Usage{Output: 1, Reported: true})
	v.Done(ctx)
	for _, r := range rec.Records() {
		if r.Tokens.Settled != "" {
			t.Fatalf("a settle reached another call's record: %+v", r)
		}
	}
	if n := rec.Records(); n[0].Subject == "k_old" {
		t.Fatal("the old call's record is still held")
	}
}
