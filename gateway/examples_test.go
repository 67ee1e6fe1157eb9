package gateway_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var metricName = regexp.MustCompile(`tollgate_[a-z_]+`)

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
