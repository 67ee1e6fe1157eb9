package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
