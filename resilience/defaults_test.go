package resilience_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
)

// TestShortStoreTimeoutIsTheDefault: the tests of the store deadline
// (testenv.ShortStoreTimeout) run with the one production runs with, and
// the generous one is far from it.
func TestShortStoreTimeoutIsTheDefault(t *testing.T) {
	if testenv.ShortStoreTimeout != resilience.DefaultTimeout {
		t.Fatalf("testenv.ShortStoreTimeout %v, resilience.DefaultTimeout %v", testenv.ShortStoreTimeout, resilience.DefaultTimeout)
	}
	if testenv.StoreTimeout < 100*resilience.DefaultTimeout {
		t.Fatalf("testenv.StoreTimeout %v is not generous beside %v", testenv.StoreTimeout, resilience.DefaultTimeout)
	}
}
