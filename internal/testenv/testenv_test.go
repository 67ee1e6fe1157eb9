package testenv_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSeedReplays: a seed given in the environment gives the same choices
// every time it is asked for.
func TestSeedReplays(t *testing.T) {
	t.Setenv(testenv.SeedVar, "42")
	a, b := testenv.Rand(t), testenv.Rand(t)
	for i := range 8 {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("draw %d with %s=42: %d and %d", i, testenv.SeedVar, x, y)
		}
	}
	if s := testenv.Seed(t); s != 42 {
		t.Fatalf("Seed with %s=42: %d", testenv.SeedVar, s)
	}
}
