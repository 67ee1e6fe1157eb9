// Package testenv holds what Tollgate's tests share about the machine they
// run on: the store deadlines they give, and the seeds of their random
// choices. Its rule is that the suite passes on a loaded 2-core machine
// under the race detector, and that a randomized failure can be replayed.
package testenv

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// StoreTimeout is the store deadline for a test whose store calls must
// succeed: it tests what is decided, not how fast. The production default
// (20 ms, [ShortStoreTimeout]) is missed by a sound Redis on a loaded
// machine running the race detector, and the decision then goes to the
// fallback, which such a test does not expect.
const StoreTimeout = 5 * time.Second

// ShortStoreTimeout is the production default store deadline
// (resilience.DefaultTimeout), for a test of the deadline itself: that a
// call to a store that does not answer gives up, and what follows.
const ShortStoreTimeout = 20 * time.Millisecond

// SeedVar is the environment variable that replays a randomized test: set
// to a seed a failure logged, every [Rand] and [Seed] returns that seed's
// choices again.
const SeedVar = "TOLLGATE_TEST_SEED"

// Seed returns the seed of t's random choices: SeedVar's value when it is
// set (a malformed one fails t), else one taken from the clock. When t
// fails, it logs the seed and the command that replays it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	var seed uint64
	if v := os.Getenv(SeedVar); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a decimal seed such as a failure logs: %v", SeedVar, v, err)
		}
		seed = n
	} else {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random choices from seed %d; replay them with %s=%d go test -run '^%s$'", seed, SeedVar, seed, t.Name())
		}
	})
	return seed
}

// Rand returns a generator seeded by [Seed].
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	s := Seed(t)
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}
