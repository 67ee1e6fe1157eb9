package simulate_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/simulate"
	"github.com/tollgate/tollgate/store/memory"
)

// load compiles the quickstart policy, with edit applied to its text.
func load(t *testing.T, edit func(string) string) *policy.Policy {
	t.Helper()
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(edit(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// record decides a timeline under p, as a gateway would, and returns the
// engine's recording: alice (free, 100 a minute) sends 3 requests a
// second for 90 s to /api/items; bob (pro) one export (cost 10) a second
// for 90 s.
func record(t *testing.T, p *policy.Policy) []engine.Record {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC) // 10:00 in the policy's zone: the day quota stays far
	now := start
	rec := engine.NewRecording(10_000, 1)
	eng, err := engine.New(engine.Options{Policy: p, Store: memory.New(memory.Options{}), Now: func() time.Time { return now }, Recording: rec,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	route := func(name string) *policy.Route {
		for _, r := range p.Routes {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no route %s", name)
		return nil
	}
	alice := engine.Subject{Kind: "key", ID: "k_alice", Plan: p.Plans["free"], Tenant: "t_demo", Client: "c_1"}
	bob := engine.Subject{Kind: "key", ID: "k_bob", Plan: p.Plans["pro"], Tenant: "t_demo", Client: "c_2"}
	for s := range 90 {
		for i := range 3 {
			now = start.Add(time.Duration(s)*time.Second + time.Duration(i)*100*time.Millisecond)
			if v := eng.Check(ctx, engine.Call{Route: route("api"), Subject: alice, Key: engine.KeyValid}); v.Outcome.Admitted() {
				v.Done(ctx)
			}
		}
		now = start.Add(time.Duration(s)*time.Second + 500*time.Millisecond)
		if v := eng.Check(ctx, engine.Call{Route: route("export"), Subject: bob, Key: engine.KeyValid}); v.Outcome.Admitted() {
			v.Done(ctx)
		}
	}
	return rec.Records()
}

// TestReplayReproduces: a recording replayed under the policy that
// decided it gives every call the same outcome, also through a file.
func TestReplayReproduces(t *testing.T) {
	p := load(t, func(s string) string { return s })
	recs := record(t, p)
	if len(recs) != 360 {
		t.Fatalf("%d calls recorded, want 360", len(recs))
	}
	var buf bytes.Buffer
	if err := simulate.WriteRecords(&buf, recs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "alice-") || strings.Contains(buf.String(), "free-demo-key") {
		t.Fatal("the recording holds a raw identity")
	}
	back, err := simulate.ReadRecords(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := simulate.Replay(context.Background(), p, back)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i, o := range got {
		if o != recs[i].Outcome {
			t.Fatalf("call %d (%s at %d): replayed %s, recorded %s", i, recs[i].Route, recs[i].T, o, recs[i].Outcome)
		}
		if o == "refused" {
			refused++
		}
	}
	// alice: 100 admitted (at 3 a second, the 100th at 33.0 s), none
	// until 60.0 s, then each call takes the place of the one admitted a
	// minute before it: the 90 calls of 60.0-89.2 s. 270 - 190 = 80
	// refused.
	if refused != 80 {
		t.Fatalf("%d refused, want alice's 80", refused)
	}
}

// TestCompareStricter: halving the free plan's minute makes the candidate
// refuse what a hand count says, and only alice's calls.
func TestCompareStricter(t *testing.T) {
	active := load(t, func(s string) string { return s })
	cand := load(t, func(s string) string {
		return strings.Replace(s, "algorithm: sliding_log, rate: 100, period: 1m}", "algorithm: sliding_log, rate: 50, period: 1m}", 1)
	})
	recs := record(t, active)
	r, err := simulate.Compare(context.Background(), active, cand, recs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mismatches != 0 {
		t.Errorf("%d mismatches replaying under the policy that decided", r.Mismatches)
	}
	// Active: alice admitted 190 of 270 (see TestReplayReproduces).
	// Candidate: the first 50 (calls at 0, 0.1, 0.2, 1.0 s ... the 50th at
	// 16.1 s), then none until 60 s, when the first leave the window: the
	// calls of 60.0-76.1 s take their places one for one (50), and from
	// 76.2 s none until 120 s. 100 admitted, 170 refused: 90 newly
	// refused, none newly admitted.
	var free, pro *simulate.GroupDiff
	for i := range r.Groups {
		switch r.Groups[i].Plan {
		case "free":
			free = &r.Groups[i]
		case "pro":
			pro = &r.Groups[i]
		}
	}
	if free == nil || pro == nil {
		t.Fatalf("groups %+v", r.Groups)
	}
	want := simulate.GroupDiff{Group: "api", Plan: "free", Calls: 270, RefusedActive: 80, RefusedCandidate: 170, NewlyRefused: 90}
	if *free != want {
		t.Errorf("free: %+v, want %+v", *free, want)
	}
	if pro.NewlyRefused != 0 || pro.NewlyAdmitted != 0 || pro.RefusedActive != 0 {
		t.Errorf("pro: %+v, want no change and no refusal", *pro)
	}
	if len(r.Subjects) != 1 || r.Subjects[0].Subject != "k_alice" || r.Subjects[0].NewlyRefused != 90 {
		t.Errorf("subjects %+v, want alice alone with 90 newly refused", r.Subjects)
	}
	total := [2]int{}
	for _, p := range r.Series {
		total[0] += p.Active
		total[1] += p.Candidate
	}
	if total != [2]int{80, 170} {
		t.Errorf("series totals %v, want [80 170]", total)
	}
	if svg := r.SVG(); !strings.Contains(svg, `<polyline id="candidate"`) {
		t.Errorf("chart: %.300s", svg)
	}
}

// chatPolicy is a plan of tpm tokens a minute ("" for none) and 100
// requests, on a token route.
func chatPolicy(t *testing.T, tpm string) *policy.Policy {
	t.Helper()
	return chatRoutePolicy(t, tpm, "tokens: {default_output: 1000}")
}

// chatRoutePolicy is chatPolicy with the chat route's tokens given.
func chatRoutePolicy(t *testing.T, tpm, tokens string) *policy.Policy {
	t.Helper()
	limit := ""
	if tpm != "" {
		limit = "\n      - {name: tpm, algorithm: fixed_window, rate: " + tpm + ", period: 1m, unit: tokens}"
	}
	p, err := policy.Parse([]byte(`version: chat-`+tpm+`
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free:
    limits:
      - {name: rpm, algorithm: fixed_window, rate: 100, period: 1m}`+limit+`
routes:
  - {name: chat, method: POST, path: /v1/chat/completions, upstream: builtin:echo, `+tokens+`}
`), "chat.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recordChats decides a timeline of token calls under p, each ended
// before the next, and returns the recording: alice asks for 1000
// output tokens a second for 26 s, all in one minute's window. Each
// uses 300 (a refund of 700), but call 5 reports no usage (its estimate
// stands) and call 20 uses 5000 (a debt of 4000).
func recordChats(t *testing.T, p *policy.Policy) []engine.Record {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	st := memory.New(memory.Options{Now: clock, SweepInterval: -1})
	defer st.Close()
	rec := engine.NewRecording(1000, 1)
	eng, err := engine.New(engine.Options{Policy: p, Store: st, Now: clock, Recording: rec, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	alice := engine.Subject{Kind: "key", ID: "k_alice", Plan: p.Plans["free"]}
	for i := range 26 {
		now = start.Add(time.Duration(i) * time.Second)
		u := engine.Usage{Input: 100, Output: 200, Reported: true}
		switch i {
		case 5:
			u = engine.Usage{}
		case 20:
			u = engine.Usage{Output: 5000, Reported: true}
		}
		v := eng.Check(ctx, engine.Call{Route: p.Routes[0], Subject: alice, Key: engine.KeyValid, Tokens: &engine.Tokens{Output: 1000, Model: "gpt"}})
		if v.Outcome.Admitted() {
			v.Used(u)
			v.Done(ctx)
		}
	}
	return rec.Records()
}

// TestReplaySettles: a recording of token calls replays at the costs
// they settled at, refunds and a debt, under the policy that recorded it
// and under candidates, and a candidate's token budget refuses what the
// active policy admitted; replayed at the estimates alone, the same
// recording decides otherwise.
func TestReplaySettles(t *testing.T) {
	active := chatPolicy(t, "10000")
	// Under 10,000 a minute: calls 0-19 settle at 300 each but call 5
	// at 1000, 6700 in all; call 20 is admitted (7700 with its
	// estimate) and settles at 5000, 11700: in debt, calls 21-25 are
	// refused.
	recs := recordChats(t, active)
	var buf bytes.Buffer
	if err := simulate.WriteRecords(&buf, recs); err != nil {
		t.Fatal(err)
	}
	back, err := simulate.ReadRecords(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, recs) {
		t.Fatalf("through a file: %+v, want %+v", back, recs)
	}
	estimates := make([]engine.Record, len(recs)) // as if no call had settled
	for i, r := range recs {
		tr := *r.Tokens
		tr.Settled, tr.Usage = "", engine.RecordUsage{}
		r.Tokens = &tr
		estimates[i] = r
	}
	for _, c := range []struct {
		why        string
		active     *policy.Policy
		recs       []engine.Record
		candidate  *policy.Policy
		mismatches int
		want       simulate.GroupDiff
	}{
		{"the policy that recorded: every decision reproduced", active, back, active, 0,
			simulate.GroupDiff{RefusedActive: 5, RefusedCandidate: 5}},
		// 5000 a minute: before call k (k >= 6), 2500 + 300 (k - 6)
		// are charged; its estimate of 1000 fits until k = 11. From
		// call 12, 4300 charged, all are refused: 9 newly refused.
		{"a smaller token budget refuses what the active admitted", active, back, chatPolicy(t, "5000"), 0,
			simulate.GroupDiff{RefusedActive: 5, RefusedCandidate: 14, NewlyRefused: 9}},
		// At 1000 each, calls 0-9 fill the minute: 11 of those the
		// gateway admitted are refused, the replay's mismatches.
		{"the estimates alone: costs that did not settle", active, estimates, active, 11,
			simulate.GroupDiff{RefusedActive: 16, RefusedCandidate: 16}},
		// Recorded with requests only, every call admitted, its usage
		// kept: the candidate's tokens budget refuses calls 21-25, as
		// the gateway would have.
		{"a token budget where there was none", chatPolicy(t, ""), recordChats(t, chatPolicy(t, "")), active, 0,
			simulate.GroupDiff{RefusedCandidate: 5, NewlyRefused: 5}},
		// Its calls counted as requests alone, as the gateway would.
		{"the route no longer a token route", active, back, chatRoutePolicy(t, "5000", "cost: 1"), 0,
			simulate.GroupDiff{RefusedActive: 5, NewlyAdmitted: 5}},
	} {
		r, err := simulate.Compare(context.Background(), c.active, c.candidate, c.recs)
		if err != nil {
			t.Fatal(err)
		}
		c.want.Group, c.want.Plan, c.want.Calls = "chat", "free", 26
		if r.Mismatches != c.mismatches || len(r.Groups) != 1 || r.Groups[0] != c.want {
			t.Errorf("%s: %d mismatches, groups %+v; want %d, %+v", c.why, r.Mismatches, r.Groups, c.mismatches, c.want)
		}
	}
}

// TestReadOldRecords: a recording made before token budgets reads, its
// calls without tokens.
func TestReadOldRecords(t *testing.T) {
	recs, err := simulate.ReadRecords(strings.NewReader(`{"t":1,"route":"api","kind":"key","subject":"k_a","outcome":"allowed"}` + "\n"))
	if err != nil || len(recs) != 1 || recs[0].Tokens != nil {
		t.Fatalf("%+v, %v: want one call without tokens", recs, err)
	}
}
