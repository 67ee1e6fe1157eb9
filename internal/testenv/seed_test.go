package testenv

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// recorder is a test that records what Seed does with it.
type recorder struct {
	testing.TB
	name     string
	failed   bool
	logs     []string
	cleanups []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Name() string     { return r.name }
func (r *recorder) Failed() bool     { return r.failed }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.TB.Fatalf("Seed failed the test: "+format, args...)
}

func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// TestSeedLoggedOnFailure: a failed test logs its seed and the command
// that replays it, once however many times it asked; a passing test
// logs nothing.
func TestSeedLoggedOnFailure(t *testing.T) {
	t.Setenv(SeedVar, "")
	for _, failed := range []bool{false, true} {
		r := &recorder{TB: t, name: "TestX/sub", failed: failed}
		s := Seed(r)
		if again := Seed(r); again != s {
			t.Fatalf("a second Seed in the same test: %d, then %d", s, again)
		}
		r.end()
		want := []string(nil)
		if failed {
			want = []string{fmt.Sprintf("random choices from seed %d; replay them with %s=%d go test -run '^TestX$/^sub$' ./internal/testenv", s, SeedVar, s)}
		}
		if fmt.Sprint(r.logs) != fmt.Sprint(want) {
			t.Errorf("failed %v: logged %q, want %q", failed, r.logs, want)
		}
	}
}

// TestSeedLoggedOnPanic: a test that panics logs its seed too, though
// the testing package runs its cleanups before marking it failed.
func TestSeedLoggedOnPanic(t *testing.T) {
	t.Setenv(SeedVar, "")
	r := &recorder{TB: t, name: "TestX"}
	s := Seed(r)
	func() {
		defer func() { recover() }()
		defer r.end() // as the testing package runs cleanups: Failed is false
		panic("a test's bug")
	}()
	want := fmt.Sprintf("random choices from seed %d; replay them with %s=%d go test -run '^TestX$' ./internal/testenv", s, SeedVar, s)
	if len(r.logs) != 1 || r.logs[0] != want {
		t.Errorf("logged %q, want %q", r.logs, want)
	}
}

// TestSeedPerTest: without SeedVar, one test's calls share its seed (so
// that the seed logged replays them all), and another test has its own.
func TestSeedPerTest(t *testing.T) {
	t.Setenv(SeedVar, "")
	a, b := Rand(t), Rand(t)
	for i := range 8 {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("draw %d of two Rand in one test: %d and %d", i, x, y)
		}
	}
	var sub [2]uint64
	for i := range sub {
		t.Run("", func(t *testing.T) { sub[i] = Seed(t) })
	}
	if sub[0] == sub[1] {
		t.Errorf("two subtests both seeded %d from the clock", sub[0])
	}
}

// TestReplayRunsOnlyThatTest: the replay command's -run pattern matches
// the failed test's name, level by level as go test splits it, and no
// other name, whatever the characters in it.
func TestReplayRunsOnlyThatTest(t *testing.T) {
	for _, tc := range []struct{ name, other string }{
		{"TestA", "TestAB"},
		{"TestA/#01", "TestA/#011"},
		{"TestA/gcra(rate=5)/x.y+z", "TestA/gcra(rate=5)/xzy+z"},
		{"TestA/a|b/[c]", "TestA/a/[c]"},
		{"TestA/it's", "TestA/its"},
	} {
		cmd := replay(tc.name, 7)
		run := strings.TrimSuffix(strings.TrimPrefix(cmd, SeedVar+"=7 go test -run '"), "' ./internal/testenv")
		if run == cmd {
			t.Fatalf("%q: command %q", tc.name, cmd)
		}
		run = strings.ReplaceAll(run, `'\''`, "'") // what the shell passes
		match := func(name string) bool {          // as go test matches -run, level by level
			pats, elems := strings.Split(run, "/"), strings.Split(name, "/")
			if len(pats) != len(elems) {
				return false
			}
			for i, p := range pats {
				if !regexp.MustCompile(p).MatchString(elems[i]) {
					return false
				}
			}
			return true
		}
		if !match(tc.name) || match(tc.other) {
			t.Errorf("%q: -run %q matches it %v, matches %q %v", tc.name, run, match(tc.name), tc.other, match(tc.other))
		}
	}
}
