package logsample_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/slogtest"
	"time"

	"github.com/tollgate/tollgate/internal/logsample"
)

// TestFloodOfErrors: 185,000 identical errors in 5 seconds (a login guard
// that cannot reach its store, once per request) write the burst and then
// one line a second, and the lines written count what was dropped.
func TestFloodOfErrors(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(logsample.New(slog.NewJSONHandler(&buf, nil), logsample.Options{}))
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	const n = 185_000
	for i := 0; i < n; i++ {
		r := slog.NewRecord(start.Add(time.Duration(i)*5*time.Second/n), slog.LevelError, "login guard unavailable, refusing", 0)
		r.AddAttrs(slog.String("error", "dial tcp: connection refused"))
		l.Handler().Handle(context.Background(), r)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 10 || len(lines) > 16 {
		t.Fatalf("%d identical errors in 5 s wrote %d lines, want the burst of 10 and about 1 a second", n, len(lines))
	}
	var total int64 = int64(len(lines))
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if s, ok := m["suppressed"].(float64); ok {
			total += int64(s)
		}
	}
	if total > n || total < n-int64(n/5) {
		t.Fatalf("the lines account for %d records of %d", total, n)
	}
	// Another message has its own budget.
	buf.Reset()
	l.Error("another failure")
	if !strings.Contains(buf.String(), "another failure") {
		t.Fatal("a different message was suppressed")
	}
}

// TestMessagesBeyondTheBound share one budget, so a flood of distinct
// messages cannot grow the sampler without bound.
func TestMessagesBeyondTheBound(t *testing.T) {
	var buf bytes.Buffer
	h := logsample.New(slog.NewTextHandler(&buf, nil), logsample.Options{MaxMessages: 4, Burst: 2})
	now := time.Now()
	written := 0
	for i := 0; i < 1000; i++ {
		before := buf.Len()
		h.Handle(context.Background(), slog.NewRecord(now, slog.LevelInfo, strings.Repeat("m", i), 0))
		if buf.Len() > before {
			written++
		}
	}
	if written != 4+2 {
		t.Fatalf("wrote %d lines, want one for each of the first 4 messages and the shared burst of 2 for the 996 others", written)
	}
}

// TestSlogtest: the handler is a well-behaved slog.Handler when nothing is
// dropped.
func TestSlogtest(t *testing.T) {
	var buf bytes.Buffer
	h := logsample.New(slog.NewJSONHandler(&buf, nil), logsample.Options{Burst: 1000})
	err := slogtest.TestHandler(h, func() []map[string]any {
		var out []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	if logsample.New(h, logsample.Options{}) != h {
		t.Fatal("wrapping a sampled handler again samples twice")
	}
}
