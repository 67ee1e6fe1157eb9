// Package simulate decides a recording of calls (engine.Recording, which a
// gateway serves at /recording) again under a policy, at full speed on the
// memory store, each call at its recorded time, and compares two policies:
// what a candidate policy would refuse that the active one admitted, and
// the other way round, by route group and plan, for the subjects most
// affected, and over the recorded window.
//
// A replay knows what the recording keeps: each call's route (by name),
// subject, plan (by name), tenant, client group, cost and credential
// status. A candidate that renames a route or a plan, or moves keys
// between plans, is replayed with the recorded names; a route it lacks
// leaves its calls unmatched (the plan at cost 1). The recording has no
// durations: a concurrency limit replays as if every call ended at once.
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
	store := memory.New(memory.Options{})
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
		v := eng.Check(ctx, c)
		if v.Outcome.Admitted() {
			v.Answered(ctx, rec.Status)
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
	groups := map[[2]string]*GroupDiff{}
	subjects := map[string]*SubjectDiff{}
	points := map[int64]*Point{}
	admitted := func(o string) bool { return o == "allowed" || o == "fail_open" }
	for i, rec := range recs {
		if a[i] != rec.Outcome {
			r.Mismatches++
		}
		gk := [2]string{group(candidate, rec.Route), rec.Plan}
		g := groups[gk]
		if g == nil {
			g = &GroupDiff{Group: gk[0], Plan: gk[1]}
			groups[gk] = g
		}
		s := subjects[rec.Subject]
		if s == nil {
			s = &SubjectDiff{Subject: rec.Subject}
			subjects[rec.Subject] = s
		}
		t := r.From + (rec.T-r.From)/r.Step*r.Step
		pt := points[t]
		if pt == nil {
			pt = &Point{T: t}
			points[t] = pt
		}
		g.Calls++
		s.Calls++
		okA, okB := admitted(a[i]), admitted(b[i])
		if !okA {
			g.RefusedActive++
			pt.Active++
		}
		if !okB {
			g.RefusedCandidate++
			pt.Candidate++
		}
		switch {
		case okA && !okB:
			g.NewlyRefused++
			s.NewlyRefused++
		case !okA && okB:
			g.NewlyAdmitted++
			s.NewlyAdmitted++
		}
	}
	for _, g := range groups {
		r.Groups = append(r.Groups, *g)
	}
	sort.Slice(r.Groups, func(i, j int) bool {
		if r.Groups[i].Group != r.Groups[j].Group {
			return r.Groups[i].Group < r.Groups[j].Group
		}
		return r.Groups[i].Plan < r.Groups[j].Plan
	})
	for _, s := range subjects {
		if s.NewlyRefused+s.NewlyAdmitted > 0 {
			r.Subjects = append(r.Subjects, *s)
		}
	}
	sort.Slice(r.Subjects, func(i, j int) bool {
		di, dj := r.Subjects[i].NewlyRefused+r.Subjects[i].NewlyAdmitted, r.Subjects[j].NewlyRefused+r.Subjects[j].NewlyAdmitted
		if di != dj {
			return di > dj
		}
		return r.Subjects[i].Subject < r.Subjects[j].Subject
	})
	if len(r.Subjects) > TopSubjects {
		r.Subjects = r.Subjects[:TopSubjects]
	}
	for t := r.From; t <= r.To; t += r.Step {
		if p := points[t]; p != nil {
			r.Series = append(r.Series, *p)
		} else {
			r.Series = append(r.Series, Point{T: t})
		}
	}
	return r, nil
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
