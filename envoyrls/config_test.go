package envoyrls_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/envoyrls"
)

// TestConfigErrors: each problem envoyproxy/ratelimit refuses is refused
// with its file and line, and every problem of a directory is reported.
func TestConfigErrors(t *testing.T) {
	for name, c := range map[string]struct{ src, want string }{
		"unknown key":       {"domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n", "x.yaml:4: config error, unknown key 'rate_limt'"},
		"no domain":         {"descriptors: []\n", "config file cannot have empty domain"},
		"empty key":         {"domain: d\ndescriptors:\n  - value: a\n", "x.yaml:3: descriptor has empty key"},
		"bad unit":          {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"},
		"unlimited unit":    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unlimited: true}\n", "should not specify rate limit unit when unlimited"},
		"duplicate":         {"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", "x.yaml:4: duplicate descriptor composite key 'd.a'"},
		"share no wildcard": {"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", "share_threshold can only be used with wildcard values"},
		"replaces itself":   {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", "replaces should not contain name of same descriptor"},
		"empty replaces":    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "should not have an empty replaces entry"},
		"quota mode":        {"domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n", "quota_mode is not supported"},
		"bad algorithm":     {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n", "unknown algorithm"},
		"too much for gcra": {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 100000, algorithm: gcra}\n", "too large to count exactly"},
		"failure mode":      {"domain: d\non_store_failure: maybe\n", "on_store_failure: want fail_open or fail_closed"},
		"not yaml":          {"domain: [\n", "reading YAML"},
	} {
		_, err := envoyrls.Parse([]envoyrls.Source{{Name: "x.yaml", Data: []byte(c.src)}}, envoyrls.LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
	// Two domains' worth of problems are all reported.
	_, err := envoyrls.Parse([]envoyrls.Source{
		{Name: "a.yaml", Data: []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: nope}\n")},
		{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: k\n    bogus: 1\n")},
	}, envoyrls.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "a.yaml:3") || !strings.Contains(err.Error(), "b.yaml:4") {
		t.Fatalf("both files' problems: %v", err)
	}
}

// TestConfigDomains: a domain in two files is refused unless merged
// (MERGE_DOMAIN_CONFIG); the merged domain has both files' descriptors.
func TestConfigDomains(t *testing.T) {
	files := []envoyrls.Source{
		{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
	}
	if _, err := envoyrls.Parse(files, envoyrls.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "duplicate domain 'd'") {
		t.Fatalf("duplicate domain: %v", err)
	}
	cfg, err := envoyrls.Parse(files, envoyrls.LoadOptions{MergeDomains: true})
	if err != nil || len(cfg.Domains()) != 1 {
		t.Fatalf("merged: %v, %v", cfg, err)
	}
}

// TestLoadDirectory: every file under the directory is read, dot files
// too unless RUNTIME_IGNOREDOTFILES.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, map[string]string{
		"a.yaml":       "domain: a\n",
		"sub/b.yaml":   "domain: b\n",
		".hidden.yaml": "domain: hidden\n",
	})
	cfg, err := envoyrls.Load(dir, envoyrls.LoadOptions{})
	if err != nil || strings.Join(cfg.Domains(), ",") != "a,b,hidden" {
		t.Fatalf("loaded %v, %v", cfg.Domains(), err)
	}
	cfg, err = envoyrls.Load(dir, envoyrls.LoadOptions{IgnoreDotFiles: true})
	if err != nil || strings.Join(cfg.Domains(), ",") != "a,b" {
		t.Fatalf("ignoring dot files: %v, %v", cfg.Domains(), err)
	}
}

// TestHotReload: a change to the directory is served once it is valid;
// an invalid one is refused and the active configuration keeps serving;
// a symlinked directory swapped for another (a deployment's "current")
// is followed.
func TestHotReload(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"}})
	root := t.TempDir()
	v1 := filepath.Join(root, "v1")
	if err := os.Rename(f.dir, v1); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(root, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Watch(t.Context(), current, envoyrls.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	limitOf := func() uint32 {
		return f.ask(t, "r", 0, withHits(desc("k", "x"), 0)).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	waitFor := func(what string, want uint32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for limitOf() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: limit %d, want %d", what, limitOf(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if limitOf() != 5 {
		t.Fatal("initial limit")
	}
	writeConfig(t, v1, map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n"})
	waitFor("edited", 7)
	loads := func(result string) int {
		return int(testutilCounter(f.metrics.ConfigLoads.WithLabelValues(result)))
	}
	okBefore := loads("success")
	writeConfig(t, v1, map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"})
	deadline := time.Now().Add(5 * time.Second)
	for loads("error") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the invalid file was never refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if limitOf() != 7 || loads("success") != okBefore {
		t.Fatalf("after an invalid file: limit %d", limitOf())
	}
	// A new version deployed by swapping the symlink.
	v2 := filepath.Join(root, "v2")
	writeConfig(t, v2, map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 9}\n"})
	tmp := filepath.Join(root, "current.tmp")
	if err := os.Symlink(v2, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	waitFor("symlink swapped", 9)
	// And edits of the new version are followed too.
	writeConfig(t, v2, map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 11}\n"})
	waitFor("edited after the swap", 11)
}
