package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/tollgate/tollgate/internal/logsample"
)

// TestDroppedLogLineAllocatesNothing: a refusal logged while its message
// is over its sampling budget (a flood of refusals) costs no allocation.
func TestDroppedLogLineAllocatesNothing(t *testing.T) {
	m := &Engine{log: slog.New(logsample.New(slog.NewJSONHandler(io.Discard, nil), logsample.Options{}))}
	sub := Subject{ID: "x", Kind: "ip"}
	log := func() {
		m.logSampled(context.Background(), slog.LevelInfo, "refused", sub, "p", "g", slog.Int64("retry_after_s", 3))
	}
	for range 100 {
		log() // use up the burst
	}
	if n := testing.AllocsPerRun(1000, log); n != 0 {
		t.Fatalf("a dropped line allocates %v times", n)
	}
}
