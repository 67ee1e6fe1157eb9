// Package testenv holds what Tollgate's tests share about the machine they
// run on: the store deadlines they give, and the seeds of their random
// choices. Its rule is that the suite passes on a loaded 2-core machine
// under the race detector, and that a randomized failure can be replayed.
package testenv

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
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

// seeds holds the seed of each running test that asked for one.
var seeds sync.Map // testing.TB -> uint64

// Seed returns the seed of t's random choices: SeedVar's value when it is
// set (a malformed one fails t), else one taken from the clock. When t
// fails or panics, it logs the seed and the command that replays it.
//
// A test has one seed: calling Seed again with the same t returns the
// same one, so that the seed logged replays every choice t made. Choices
// that must differ within a test (one workload per goroutine, say) take
// their own seeds from this one (seed+i), never from a second call. A
// subtest is a test of its own, with its own seed; choices drawn in a
// parent and used by its subtests replay by running the parent. Call
// Seed from the test's goroutine.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if s, ok := seeds.Load(t); ok {
		return s.(uint64)
	}
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
	seeds.Store(t, seed)
	t.Cleanup(func() {
		seeds.Delete(t)
		if t.Failed() || panicking() {
			t.Logf("random choices from seed %d; replay them with %s", seed, replay(t.Name(), seed))
		}
	})
	return seed
}

// Rand returns a generator seeded by [Seed]: the same choices for every
// call with the same t.
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	s := Seed(t)
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// panicking reports whether the calling goroutine is running deferred
// calls for a panic. A test that panics runs its cleanups before the
// testing package marks it failed, and Failed is still false in them.
func panicking() bool {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if f.Function == "runtime.gopanic" {
			return true
		}
		if !more {
			return false
		}
	}
}

// replay returns the command that runs the test named name (as t.Name
// gives it) alone with seed: each level of the name quoted and anchored
// for -run, and the package given relative to its module's root (the
// directory go test runs it in, up to the nearest go.mod).
func replay(name string, seed uint64) string {
	elems := strings.Split(name, "/")
	for i, e := range elems {
		elems[i] = "^" + regexp.QuoteMeta(e) + "$"
	}
	run := strings.ReplaceAll(strings.Join(elems, "/"), "'", `'\''`)
	return SeedVar + "=" + strconv.FormatUint(seed, 10) + " go test -run '" + run + "' " + pkgDir()
}

// pkgDir returns the package go test runs in (its working directory)
// relative to the module root, "./store/memory" say, or "." when no
// go.mod is found above it.
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "."
		}
		dir = up
	}
}
