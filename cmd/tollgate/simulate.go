package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/simulate"
)

// simulateCmd replays a gateway's recording of recent calls under the
// active policy and a candidate, and prints where they differ.
func simulateCmd(args []string, stdout, stderr io.Writer) int {
	var o simulateOptions
	fs := simulateFlags(&o)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if slices.Contains([]string{o.cand, o.active, o.from}, "") || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	return exitCode(stderr, runSimulate(stdout, o.active, o.cand, o.from, o.svg, o.asJSON))
}

// simulateOptions are simulate's flags.
type simulateOptions struct {
	cand, active, from, svg string
	asJSON                  bool
}

// simulateFlags returns simulate's flags.
func simulateFlags(o *simulateOptions) *flag.FlagSet {
	fs := flags("simulate", "simulate --policy CANDIDATE --active FILE --recording FILE|URL [--json] [--svg FILE]")
	fs.StringVar(&o.cand, "policy", "", "the candidate policy `file`")
	envFlag(fs, &o.active, "active", "TOLLGATE_CONFIG", "the policy `file` the gateway ran when it recorded")
	fs.StringVar(&o.from, "recording", "", "the recording: a `file` saved from the admin listener's /recording, or its URL "+
		"(the admin token, if any, from env TOLLGATE_ADMIN_TOKEN)")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&o.svg, "svg", "", "also write a chart of both policies' refusals over the recorded window to this SVG `file`")
	return fs
}

// runSimulate replays the recording from under the active policy file
// and the candidate, and writes the report to w (and its chart to the
// file svg, if named).
func runSimulate(w io.Writer, active, cand, from, svg string, asJSON bool) error {
	pa, pc, err := loadPolicies(active, cand)
	if err != nil {
		return err
	}
	recs, err := readRecording(from)
	if err != nil {
		return err
	}
	rep, err := simulate.Compare(context.Background(), pa, pc, recs)
	if err != nil {
		return err
	}
	return writeReport(w, rep, pa.Version, pc.Version, svg, asJSON)
}

// loadPolicies loads the active policy file and the candidate.
func loadPolicies(active, cand string) (pa, pc *policy.Policy, err error) {
	pa, err = policy.Load(active)
	if err != nil {
		return nil, nil, fmt.Errorf("active policy: %w", err)
	}
	pc, err = policy.Load(cand)
	if err != nil {
		return nil, nil, fmt.Errorf("candidate policy: %w", err)
	}
	return pa, pc, nil
}

// writeReport writes the chart of the report to the file svg, if named,
// then the report to w, as JSON or as text.
func writeReport(w io.Writer, rep *simulate.Report, active, cand, svg string, asJSON bool) error {
	if svg != "" {
		if err := os.WriteFile(svg, []byte(rep.SVG()), 0o644); err != nil {
			return fmt.Errorf("writing the chart: %w", err)
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
		return nil
	}
	printReport(w, rep, active, cand)
	return nil
}

// readRecording reads a recording from a file or the admin listener.
func readRecording(from string) ([]engine.Record, error) {
	if strings.HasPrefix(from, "http://") || strings.HasPrefix(from, "https://") {
		return fetchRecording(from)
	}
	return readRecordingFile(from)
}

// readRecordingFile reads a recording saved to the file name.
func readRecordingFile(name string) ([]engine.Record, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading the recording: %w", err)
	}
	defer f.Close()
	return simulate.ReadRecords(f)
}

// fetchRecording reads a recording from the admin listener's /recording
// at url, with the admin token from TOLLGATE_ADMIN_TOKEN if set.
func fetchRecording(url string) ([]engine.Record, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the recording: %w", err)
	}
	if t := os.Getenv("TOLLGATE_ADMIN_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the recording: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("reading the recording: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return simulate.ReadRecords(resp.Body)
}

// printReport prints the report as text: the window, then each group's
// and the most affected subjects' changes.
func printReport(w io.Writer, r *simulate.Report, active, cand string) {
	fmt.Fprintf(w, "%d calls recorded from %s to %s, replayed under %s (active) and %s (candidate)\n", r.Calls,
		time.UnixMilli(r.From).UTC().Format(time.RFC3339), time.UnixMilli(r.To).UTC().Format(time.RFC3339), active, cand)
	if r.Mismatches > 0 {
		fmt.Fprintf(w, "note: %d calls replay under the active policy otherwise than they were decided (the recording began while budgets were spent, or another policy decided them)\n", r.Mismatches)
	}
	fmt.Fprintf(w, "\n%-16s %-12s %8s %14s %17s %14s %15s\n", "route group", "plan", "calls", "refused active", "refused candidate", "newly refused", "newly admitted")
	for _, g := range r.Groups {
		fmt.Fprintf(w, "%-16s %-12s %8d %14d %17d %14d %15d\n", g.Group, g.Plan, g.Calls, g.RefusedActive, g.RefusedCandidate, g.NewlyRefused, g.NewlyAdmitted)
	}
	printSubjects(w, r.Subjects)
}

// printSubjects prints the table of the most affected subjects, if any.
func printSubjects(w io.Writer, subjects []simulate.SubjectDiff) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(w, "\nmost affected subjects (pseudonyms)\n%-26s %8s %14s %15s\n", "subject", "calls", "newly refused", "newly admitted")
	for _, s := range subjects {
		fmt.Fprintf(w, "%-26s %8d %14d %15d\n", s.Subject, s.Calls, s.NewlyRefused, s.NewlyAdmitted)
	}
}
