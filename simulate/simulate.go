// Package simulate decides a recording of calls (engine.Recording, which a
// gateway serves at /recording) again under a policy, at full speed on the
// memory store, each call at its recorded time, and compares two policies:
// what a candidate policy would refuse that the active one admitted, and
// the other way round, by route group and plan, for the subjects most
// affected, and over the recorded window.
//
// A replay knows what the recording keeps: each call's route (by name),
// subject, plan (by name), tenant, client group, cost and credential
// status, and a token call's estimate and the usage it settled at. A
// candidate that renames a route or a plan, or moves keys between plans,
// is replayed with the recorded names; a route it lacks leaves its calls
// unmatched (the plan at cost 1). The recording has no durations: a
// concurrency limit replays as if every call ended at once, and a token
// call settles before the next call is decided.
package simulate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

// Replay decides recs under p, in order, each at its recorded time, on a
// memory store of its own, and returns each call's outcome
// (engine.Outcome's names: "allowed", "refused", ...). It stops, with an
// error wrapping ctx's cause, once ctx is done: a deadline bounds its CPU.
func Replay(ctx context.Context, p *policy.Policy, recs []engine.Record) ([]string, error) {
	var now time.Time
	// On the replay's clock: a sweep on the wall clock would drop, a
	// second into a replay, every key of a recording older than its
	// periods. Swept only as keys are touched: no goroutine reads now.
	store := memory.New(memory.Options{Now: func() time.Time { return now }, SweepInterval: -1})
	defer store.Close()
	eng, err := engine.New(engine.Options{Policy: p, Store: store, Now: func() time.Time { return now }, DecideOnly: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("replaying: %w", err)
	}
	routes := make(map[string]*policy.Route, len(p.Routes))
	for _, r := range p.Routes {
		routes[r.Name] = r
	}
	out := make([]string, len(recs))
	for i, rec := range recs {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("replaying: stopped after %d of %d calls: %w", i, len(recs), context.Cause(ctx))
		}
		now = time.UnixMilli(rec.T)
		c := engine.Call{
			Route: routes[rec.Route],
			Subject: engine.Subject{Kind: rec.Kind, ID: rec.Subject, Plan: p.Plans[rec.Plan], Tenant: rec.Tenant,
				Client: rec.Client, Unlimited: rec.Unlimited},
			Key: rec.Key, JWT: rec.JWT, Cost: rec.Cost, Account: rec.Account, LimitKey: rec.LimitKey,
		}
		if t := rec.Tokens; t != nil && c.Route != nil && c.Route.Tokens != nil {
			// Its estimate, as the gateway read it; off a token route
			// (the candidate made it a plain one) the call counts as a
			// request alone, as there.
			c.Tokens = &engine.Tokens{Input: t.Input, Output: t.Output, Model: t.Model}
		}
		v := eng.Check(ctx, c)
		if v.Outcome.Admitted() {
			v.Answered(ctx, rec.Status)
			if rec.Tokens != nil {
				v.Used(rec.Tokens.Used()) // settled at its usage; without one, at the estimate
			}
			v.Done(ctx)
		}
		out[i] = v.Outcome.String()
	}
	return out, nil
}

// Report compares two policies' decisions of one recording.
type Report struct {
	Calls int   `json:"calls"`
	From  int64 `json:"from"` // the recorded window, Unix ms
	To    int64 `json:"to"`
	// Mismatches counts the calls whose replay under the active policy
	// differs from what the recording says was decided: zero when the
	// recording holds every call of its subjects since their budgets were
	// last empty, and the active policy is the one that decided them.
	Mismatches int         `json:"mismatches"`
	Groups     []GroupDiff `json:"groups"`
	// Subjects are those whose calls the candidate decides differently,
	// most affected first (at most TopSubjects).
	Subjects []SubjectDiff `json:"subjects"`
	// Series counts refusals under each policy per Step of the window.
	Step   int64   `json:"step_ms"`
	Series []Point `json:"series"`
}

// TopSubjects is how many subjects a Report lists.
const TopSubjects = 10

// GroupDiff is one route group and plan in a Report.
type GroupDiff struct {
	Group string `json:"group"`
	Plan  string `json:"plan"`
	Calls int    `json:"calls"`
	// RefusedActive and RefusedCandidate count the calls each policy
	// does not admit; NewlyRefused those the candidate refuses and the
	// active policy admits, NewlyAdmitted the other way round.
	RefusedActive    int `json:"refused_active"`
	RefusedCandidate int `json:"refused_candidate"`
	NewlyRefused     int `json:"newly_refused"`
	NewlyAdmitted    int `json:"newly_admitted"`
}

// SubjectDiff is one subject in a Report (a pseudonym).
type SubjectDiff struct {
	Subject       string `json:"subject"`
	Calls         int    `json:"calls"`
	NewlyRefused  int    `json:"newly_refused"`
	NewlyAdmitted int    `json:"newly_admitted"`
}

// Point is one step of a Report's series, starting at T (Unix ms).
type Point struct {
	T         int64 `json:"t"`
	Active    int   `json:"refused_active"`
	Candidate int   `json:"refused_candidate"`
}

// Compare replays recs under active and under candidate and reports
// where they differ.
func Compare(ctx context.Context, active, candidate *policy.Policy, recs []engine.Record) (*Report, error) {
	a, err := Replay(ctx, active, recs)
	if err != nil {
		return nil, fmt.Errorf("replaying under the active policy: %w", err)
	}
	b, err := Replay(ctx, candidate, recs)
	if err != nil {
		return nil, fmt.Errorf("replaying under the candidate: %w", err)
	}
	r := &Report{Calls: len(recs)}
	if len(recs) == 0 {
		return r, nil
	}
	r.From, r.To = recs[0].T, recs[len(recs)-1].T
	r.Step = step(r.To - r.From)
	t := tally{groups: map[[2]string]*GroupDiff{}, subjects: map[string]*SubjectDiff{}, points: map[int64]*Point{}}
	for i, rec := range recs {
		if a[i] != rec.Outcome {
			r.Mismatches++
		}
		at := r.From + (rec.T-r.From)/r.Step*r.Step
		t.add([2]string{group(candidate, rec.Route), rec.Plan}, rec.Subject, at, admitted(a[i]), admitted(b[i]))
	}
	r.Groups = t.sortedGroups()
	r.Subjects = t.topSubjects()
	r.Series = t.series(r.From, r.To, r.Step)
	return r, nil
}

// admitted reports whether an outcome (engine.Outcome's name) admits the
// call.
func admitted(outcome string) bool { return outcome == "allowed" || outcome == "fail_open" }

// tally gathers a Report's counts, call by call: by route group and
// plan, by subject, and by step of the window (keyed by its start).
type tally struct {
	groups   map[[2]string]*GroupDiff
	subjects map[string]*SubjectDiff
	points   map[int64]*Point
}

// add counts a call of the route group and plan gk and of subject, in
// the step starting at at, admitted by the active policy or not (okA) and
// by the candidate (okB).
func (t *tally) add(gk [2]string, subject string, at int64, okA, okB bool) {
	g := t.groups[gk]
	if g == nil {
		g = &GroupDiff{Group: gk[0], Plan: gk[1]}
		t.groups[gk] = g
	}
	s := t.subjects[subject]
	if s == nil {
		s = &SubjectDiff{Subject: subject}
		t.subjects[subject] = s
	}
	pt := t.points[at]
	if pt == nil {
		pt = &Point{T: at}
		t.points[at] = pt
	}
	g.count(okA, okB)
	s.count(okA, okB)
	pt.count(okA, okB)
}

// count adds a call to g, admitted by the active policy or not (okA) and
// by the candidate (okB).
func (g *GroupDiff) count(okA, okB bool) {
	g.Calls++
	if !okA {
		g.RefusedActive++
	}
	if !okB {
		g.RefusedCandidate++
	}
	switch {
	case okA && !okB:
		g.NewlyRefused++
	case !okA && okB:
		g.NewlyAdmitted++
	}
}

// count adds a call to s, as (*GroupDiff).count does.
func (s *SubjectDiff) count(okA, okB bool) {
	s.Calls++
	switch {
	case okA && !okB:
		s.NewlyRefused++
	case !okA && okB:
		s.NewlyAdmitted++
	}
}

// count adds a call's refusals to p, as (*GroupDiff).count does.
func (p *Point) count(okA, okB bool) {
	if !okA {
		p.Active++
	}
	if !okB {
		p.Candidate++
	}
}

// sortedGroups are the groups counted, by route group, then plan.
func (t *tally) sortedGroups() []GroupDiff {
	var groups []GroupDiff
	for _, g := range t.groups {
		groups = append(groups, *g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].Group != groups[j].Group {
			return groups[i].Group < groups[j].Group
		}
		return groups[i].Plan < groups[j].Plan
	})
	return groups
}

// topSubjects are the TopSubjects subjects whose calls the candidate
// decides differently most often, most first (then by name).
func (t *tally) topSubjects() []SubjectDiff {
	var subjects []SubjectDiff
	for _, s := range t.subjects {
		if s.NewlyRefused+s.NewlyAdmitted > 0 {
			subjects = append(subjects, *s)
		}
	}
	sort.Slice(subjects, func(i, j int) bool {
		di, dj := subjects[i].NewlyRefused+subjects[i].NewlyAdmitted, subjects[j].NewlyRefused+subjects[j].NewlyAdmitted
		if di != dj {
			return di > dj
		}
		return subjects[i].Subject < subjects[j].Subject
	})
	if len(subjects) > TopSubjects {
		subjects = subjects[:TopSubjects]
	}
	return subjects
}

// series is every step of the window from from to to, each stepMS long,
// with the refusals counted in it (none if no call fell in it).
func (t *tally) series(from, to, stepMS int64) []Point {
	var series []Point
	for at := from; at <= to; at += stepMS {
		if p := t.points[at]; p != nil {
			series = append(series, *p)
		} else {
			series = append(series, Point{T: at})
		}
	}
	return series
}

// group returns the route group the candidate gives route, as the engine
// names it.
func group(p *policy.Policy, route string) string {
	for _, r := range p.Routes {
		if r.Name == route {
			return r.Group
		}
	}
	return "unmatched"
}

// step returns the series' step for a window of span ms: about 60 points,
// in whole seconds.
func step(span int64) int64 {
	return max(1000, (span/60+999)/1000*1000)
}

// ReadRecords reads a recording as /recording writes it: JSON, one record
// per line.
func ReadRecords(r io.Reader) ([]engine.Record, error) {
	var recs []engine.Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec engine.Record
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("reading the recording: line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the recording: %w", err)
	}
	return recs, nil
}

// WriteRecords writes recs as ReadRecords reads them.
func WriteRecords(w io.Writer, recs []engine.Record) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("writing the recording: %w", err)
		}
	}
	return nil
}
