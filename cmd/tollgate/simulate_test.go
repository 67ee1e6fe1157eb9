package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/simulate"
)

// TestSimulate: tollgate simulate replays a recording file under the
// active policy and a candidate whose free plan allows 10 a minute: of
// alice's 12 calls, all admitted, the candidate refuses the last 2.
func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	q, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cand := filepath.Join(dir, "candidate.yaml")
	strict := strings.Replace(string(q), "algorithm: sliding_log, rate: 100, period: 1m}", "algorithm: sliding_log, rate: 10, period: 1m}", 1)
	if err := os.WriteFile(cand, []byte(strings.Replace(strict, "version: quickstart-1", "version: strict-1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC).UnixMilli()
	var recs []engine.Record
	for i := range 12 {
		recs = append(recs, engine.Record{T: t0 + int64(i)*1000, Route: "api", Kind: "key", Subject: "k_alice", Plan: "free", Key: engine.KeyValid, Outcome: "allowed"})
	}
	var b bytes.Buffer
	simulate.WriteRecords(&b, recs)
	rec := filepath.Join(dir, "recording.jsonl")
	os.WriteFile(rec, b.Bytes(), 0o644)
	svg := filepath.Join(dir, "chart.svg")
	var out, errb bytes.Buffer
	if code := run([]string{"simulate", "--policy", cand, "--active", "../../examples/quickstart.yaml", "--recording", rec, "--svg", svg}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, errb.String(), out.String())
	}
	for _, want := range []string{
		`12 calls recorded from 2026-12-01T03:00:00Z to 2026-12-01T03:00:11Z, replayed under quickstart-1 \(active\) and strict-1 \(candidate\)`,
		`api\s+free\s+12\s+0\s+2\s+2\s+0`,
		`k_alice\s+12\s+2\s+0`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
	if s, err := os.ReadFile(svg); err != nil || !strings.Contains(string(s), "<polyline") {
		t.Errorf("chart: %v", err)
	}
	if code := run([]string{"simulate", "--policy", cand}, nil, &out, &errb); code != 2 {
		t.Errorf("without a recording: exit %d, want 2", code)
	}
	os.WriteFile(rec, []byte("{\"t\":1,\"nope\":2}\n"), 0o644)
	errb.Reset()
	if code := run([]string{"simulate", "--policy", cand, "--active", "../../examples/quickstart.yaml", "--recording", rec}, nil, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "line 1") {
		t.Errorf("a bad recording: exit %d, %s", code, errb.String())
	}
}
