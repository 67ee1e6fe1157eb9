package engine

import (
	"context"
	"testing"
)

// TestStoreSpanOffCostsNothing: without a tracer a store call's span
// costs no allocation (the hot path of every check).
func TestStoreSpanOffCostsNothing(t *testing.T) {
	e := &Engine{}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		sctx, span := e.storeSpan(ctx, "tollgate.store Allow", "budget", 1)
		_ = sctx
		endStoreSpan(span, allowedOr(true), nil)
	}); n != 0 {
		t.Fatalf("%v allocations a store call with tracing off, want 0", n)
	}
}
