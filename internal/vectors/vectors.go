// Package vectors loads the shared JSON test vectors in testdata/vectors and
// checks any decision function against them, so the pure algorithms, the
// in-memory store and the Redis scripts are held to one set of answers.
// The vectors that settle reservations ([RunSettle]) also need a settle
// function.
package vectors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the vectors name IANA zones

	"github.com/tollgate/tollgate/algo"
)

// Vector is one limit and a timeline of requests with expected decisions.
type Vector struct {
	Name       string   `json:"name"`
	Algorithms []string `json:"algorithms"`
	Limit      struct {
		Rate     int64  `json:"rate"`
		PeriodMS int64  `json:"period_ms"`
		Burst    int64  `json:"burst"`
		MaxDelay int64  `json:"max_delay_ms"`
		Calendar string `json:"calendar"` // "", "day" or "month"
		Zone     string `json:"zone"`     // IANA name
	} `json:"limit"`
	StartMS int64  `json:"start_ms"`
	Steps   []Step `json:"steps"`
}

// Step is one request and what it must return.
type Step struct {
	At        int64   `json:"at"`
	Cost      int64   `json:"cost"`
	Within    int64   `json:"within"` // the request's queue threshold (ms), algo.Request.Within
	Push      int64   `json:"push"`   // ms: the step is a push back (algo.PushBack) instead of a request
	Settle    *Settle `json:"settle"` // set: the step settles a reservation (algo.Prepared.Settle) instead
	Allowed   bool    `json:"allowed"`
	Remaining int64   `json:"remaining"`
	Reset     int64   `json:"reset"`
	Retry     int64   `json:"retry"`
	Delay     int64   `json:"delay"`
	Debt      int64   `json:"debt"` // a settle's algo.Result.Debt
	Error     string  `json:"error"`
	Note      string  `json:"note"`
}

// Settle is a settle step's reservation: made at ReservedAt (ms after
// the vector's start_ms) at Estimate, and costing Actual.
type Settle struct {
	ReservedAt int64 `json:"reserved_at"`
	Estimate   int64 `json:"estimate"`
	Actual     int64 `json:"actual"`
}

// Settles reports whether the vector has a settle step: [RunSettle]
// checks it, [Run] leaves it out.
func (v Vector) Settles() bool {
	return slices.ContainsFunc(v.Steps, func(s Step) bool { return s.Settle != nil })
}

// LimitFor returns the vector's limit under algorithm a.
func (v Vector) LimitFor(a algo.Algorithm) (algo.Limit, error) {
	l := algo.Limit{Algorithm: a, Rate: v.Limit.Rate, Period: time.Duration(v.Limit.PeriodMS) * time.Millisecond, Burst: v.Limit.Burst,
		MaxDelay: time.Duration(v.Limit.MaxDelay) * time.Millisecond}
	switch v.Limit.Calendar {
	case "":
	case "day":
		l.Calendar = algo.Daily
	case "month":
		l.Calendar = algo.Monthly
	default:
		return l, fmt.Errorf("vector %q: unknown calendar %q", v.Name, v.Limit.Calendar)
	}
	if v.Limit.Zone != "" {
		z, err := time.LoadLocation(v.Limit.Zone)
		if err != nil {
			return l, fmt.Errorf("vector %q: %w", v.Name, err)
		}
		l.Zone = z
	}
	return l, nil
}

// Dir returns the testdata/vectors directory of the module, found by walking
// up from the working directory to go.mod.
func Dir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "vectors"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding test vectors: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Load reads every vector file.
func Load() ([]Vector, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("loading test vectors: no files in %s", dir)
	}
	var all []Vector
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("loading test vectors: %w", err)
		}
		var vs []Vector
		if err := json.Unmarshal(b, &vs); err != nil {
			return nil, fmt.Errorf("loading test vectors from %s: %w", f, err)
		}
		all = append(all, vs...)
	}
	return all, nil
}

// Ask is what one step asks: a request of Cost with the queue threshold
// Within ([algo.Request.Within]) or, when Push is not zero, a push back by
// Push ([algo.PushBack]), whose decision is that of a query after it.
type Ask struct {
	Cost   int64
	Within time.Duration
	Push   time.Duration
}

// DecideFunc makes one decision for the test: a fresh state per call of the
// enclosing Run, keyed by nothing else.
type DecideFunc func(l algo.Limit, now time.Time, a Ask) (algo.Decision, error)

// Run checks every vector but those that settle, for every algorithm it
// names, as a subtest of t. newDecider is called once per (vector,
// algorithm) and must return a decision function over fresh state.
func Run(t *testing.T, newDecider func(t *testing.T) DecideFunc) {
	run(t, false, func(t *testing.T) (DecideFunc, SettleFunc) { return newDecider(t), nil })
}

// SettleAsk is what a settle step asks: settle at the step's time the
// reservation made at ReservedAt of Estimate, whose cost was Actual.
type SettleAsk struct {
	ReservedAt       time.Time
	Estimate, Actual int64
}

// SettleFunc settles one reservation for the test, on the state of the
// DecideFunc it was made with, and returns the decision with its Debt.
type SettleFunc func(l algo.Limit, now time.Time, a SettleAsk) (algo.Decision, error)

// RunSettle checks the vectors that settle (settle.json), as Run checks
// the others. newSettler is called once per (vector, algorithm) and must
// return a decision and a settle function over one fresh state.
func RunSettle(t *testing.T, newSettler func(t *testing.T) (DecideFunc, SettleFunc)) {
	run(t, true, newSettler)
}

// errorNames are the errors a step may expect, by name.
var errorNames = map[string]error{"cost_exceeds_burst": algo.ErrCostExceedsBurst, "negative_cost": algo.ErrNegativeCost,
	"invalid_request": algo.ErrInvalidRequest, "settle_unsupported": algo.ErrSettleUnsupported}

// run checks the vectors that settle, or those that do not.
func run(t *testing.T, settles bool, newSettler func(t *testing.T) (DecideFunc, SettleFunc)) {
	vs, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Settles() != settles {
			continue
		}
		for _, name := range v.Algorithms {
			a, err := algo.ParseAlgorithm(name)
			if err != nil {
				t.Fatalf("vector %q: %v", v.Name, err)
			}
			t.Run(name+"/"+v.Name, func(t *testing.T) {
				decide, settle := newSettler(t)
				l, err := v.LimitFor(a)
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range v.Steps {
					now := time.UnixMilli(v.StartMS + s.At)
					var d algo.Decision
					var debt int64
					if s.Settle != nil {
						d, err = settle(l, now, SettleAsk{ReservedAt: time.UnixMilli(v.StartMS + s.Settle.ReservedAt), Estimate: s.Settle.Estimate, Actual: s.Settle.Actual})
						debt = d.Debt
					} else {
						d, err = decide(l, now, Ask{Cost: s.Cost, Within: time.Duration(s.Within) * time.Millisecond, Push: time.Duration(s.Push) * time.Millisecond})
					}
					if s.Error != "" {
						want := errorNames[s.Error]
						if want == nil {
							t.Fatalf("step %d: unknown error name %q", i, s.Error)
						}
						if !errors.Is(err, want) {
							t.Errorf("step %d (at %d cost %d): err = %v, want %v", i, s.At, s.Cost, err, want)
						}
						continue
					}
					if err != nil {
						t.Fatalf("step %d (at %d cost %d): %v", i, s.At, s.Cost, err)
					}
					got := Step{At: s.At, Cost: s.Cost, Within: s.Within, Push: s.Push, Settle: s.Settle, Allowed: d.Allowed, Remaining: d.Remaining,
						Reset: d.ResetAfter.Milliseconds(), Retry: d.RetryAfter.Milliseconds(), Delay: d.Delay.Milliseconds(), Debt: debt}
					want := s
					want.Note = ""
					if got != want {
						t.Errorf("step %d (at %d cost %d):\n got allowed=%v remaining=%d reset=%d retry=%d delay=%d debt=%d\nwant allowed=%v remaining=%d reset=%d retry=%d delay=%d debt=%d",
							i, s.At, s.Cost, got.Allowed, got.Remaining, got.Reset, got.Retry, got.Delay, got.Debt,
							want.Allowed, want.Remaining, want.Reset, want.Retry, want.Delay, want.Debt)
					}
					if d.Quota != l.Capacity() {
						t.Errorf("step %d: Limit = %d, want %d", i, d.Quota, l.Capacity())
					}
				}
			})
		}
	}
}
