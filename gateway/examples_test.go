package gateway_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/engine"
)

var metricName = regexp.MustCompile(`tollgate_[a-z_]+`)

// labelUse finds the labels a query groups by, by (…), or matches, {…}.
var labelUse = regexp.MustCompile(`by \(([^)]*)\)|\{([^}]*)\}`)

// engineLabels returns the label names of the engine's metrics.
func engineLabels(t *testing.T) map[string]map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := engine.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []*prometheus.CounterVec{m.Decisions, m.StoreErrors, m.Fallbacks, m.Shadow} {
		v.WithLabelValues(make([]string, labelCount(v))...).Inc()
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]bool{}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				out[mf.GetName()][lp.GetName()] = true
			}
		}
	}
	return out
}

// labelCount returns how many labels v takes.
func labelCount(v *prometheus.CounterVec) int {
	for n := 0; n < 10; n++ {
		if _, err := v.GetMetricWithLabelValues(make([]string, n)...); err == nil {
			return n
		}
	}
	return 0
}

// definedMetrics returns every metric name the code defines (Name: "…" in
// metric options and prometheus.NewDesc("…")).
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	def := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(tollgate_[a-z_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range def.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestGrafanaExamples checks that the Grafana dashboard and the alert rules
// parse and query only metrics Tollgate exports.
func TestGrafanaExamples(t *testing.T) {
	defined := definedMetrics(t)
	if len(defined) < 10 {
		t.Fatalf("found only %d metric definitions: %v", len(defined), defined)
	}
	labels := engineLabels(t)
	check := func(file, text string) {
		used := metricName.FindAllString(text, -1)
		if len(used) == 0 {
			t.Errorf("%s queries no Tollgate metric", file)
		}
		for _, m := range used {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
			if !defined[base] {
				t.Errorf("%s queries %s, which Tollgate does not export", file, m)
			}
			// Labels grouped by or matched in a query of a metric whose
			// labels are known must be among them.
			known, ok := labels[base]
			if !ok || len(used) > 1 {
				continue
			}
			for _, g := range labelUse.FindAllStringSubmatch(text, -1) {
				for _, l := range strings.Split(g[1]+g[2], ",") {
					l = strings.TrimSpace(strings.FieldsFunc(l, func(r rune) bool { return r == '=' || r == '!' || r == '~' })[0])
					if l != "" && !known[l] && l != "instance" && l != "job" && l != "le" {
						t.Errorf("%s groups or matches %s by %q, which it does not have (labels %v)", file, base, l, known)
					}
				}
			}
		}
	}
	b, err := os.ReadFile("../examples/grafana/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil || len(dash.Panels) < 6 {
		t.Fatalf("dashboard.json: %v (%d panels)", err, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("dashboard.json/"+p.Title, tg.Expr)
		}
	}
	b, err = os.ReadFile("../examples/grafana/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil || len(rules.Groups) == 0 || len(rules.Groups[0].Rules) < 4 {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, r := range rules.Groups[0].Rules {
		check("alerts.yaml/"+r.Alert, r.Expr)
	}
}
