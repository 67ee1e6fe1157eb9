package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// link is a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of the README and the docs names a file
// that exists, and every page under docs/ is linked from the README or
// another page, so none is lost.
func TestLinks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := filepath.Glob("*/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(append(pages, sub...), "../README.md")
	linked := map[string]bool{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(p), target))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to %s, which does not exist", p, m[1])
			}
			if self, _ := filepath.Abs(p); abs != self {
				linked[abs] = true
			}
		}
	}
	for _, p := range pages {
		abs, _ := filepath.Abs(p)
		if p != "../README.md" && !linked[abs] {
			t.Errorf("%s is linked from no page: an orphan", p)
		}
	}
}

// TestReadmePolicy: the README's policy is examples/minimal.yaml but for
// its comments, it checks, and the key its comment names is the key its
// digest is of.
func TestReadmePolicy(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal("the README has no yaml block")
	}
	file, err := os.ReadFile("../examples/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := withoutComments(block), withoutComments(string(file)); got != want {
		t.Errorf("the README's policy is not examples/minimal.yaml:\n%s\nwant:\n%s", got, want)
	}
	p, err := policy.Parse([]byte(block), "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := p.Keys[identity.KeyDigest("my-first-key")]; !ok || k.Plan.Name != "free" {
		t.Errorf("my-first-key is not the README's key of plan free: %+v, %v", k, ok)
	}
}

// withoutComments returns YAML without its comments and blank lines.
func withoutComments(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimRight(line, " "); line != "" {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
