package testenv_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
)

// TestShortIsTheDefault: the short deadline is the one production runs
// with, so a test of the deadline tests what users get.
func TestShortIsTheDefault(t *testing.T) {
	if testenv.ShortStoreTimeout != resilience.DefaultTimeout {
		t.Fatalf("ShortStoreTimeout %v, resilience.DefaultTimeout %v", testenv.ShortStoreTimeout, resilience.DefaultTimeout)
	}
	if testenv.StoreTimeout < 100*testenv.ShortStoreTimeout {
		t.Fatalf("StoreTimeout %v is not generous beside %v", testenv.StoreTimeout, testenv.ShortStoreTimeout)
	}
}

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
