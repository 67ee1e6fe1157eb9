package docs_test

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// link is a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// heading is a Markdown ATX heading's text.
var heading = regexp.MustCompile(`^#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)

// TestLinks: every relative link of the README and of the docs at any
// depth names a file that exists, and a link's #fragment a heading of the
// Markdown page it names (moving a section breaks its anchors silently);
// and every page under docs/ is linked from the README or another page,
// so none is lost.
func TestLinks(t *testing.T) {
	pages := []string{"../README.md"}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	headings := map[string]map[string]bool{} // a page's anchors, by its absolute path
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		self, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, fragment, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs := self
			if target != "" {
				abs = filepath.Join(filepath.Dir(self), target)
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to %s, which does not exist", p, m[1])
				continue
			}
			if abs != self {
				linked[abs] = true
			}
			if fragment == "" || !strings.HasSuffix(abs, ".md") {
				continue
			}
			if headings[abs] == nil {
				page, err := os.ReadFile(abs)
				if err != nil {
					t.Fatal(err)
				}
				headings[abs] = anchors(string(page))
			}
			if !headings[abs][fragment] {
				t.Errorf("%s links to %s, whose page has no heading #%s", p, m[1], fragment)
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

// anchors returns the anchors GitHub gives the headings of a Markdown
// page: each heading's slug, and a repeated one's with -1, -2, ...
// appended. Lines in fenced code blocks are not headings.
func anchors(page string) map[string]bool {
	out, seen, fenced := map[string]bool{}, map[string]int{}, false
	for _, line := range strings.Split(page, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug returns the anchor GitHub makes of a heading's text: lower case,
// every character but letters, digits, spaces, '-' and '_' dropped, and
// each space made a '-'.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ text, want, why string }{
		{"Bearer JWTs", "bearer-jwts", "lower case, a space a hyphen"},
		{"Envoy's rate-limit service", "envoys-rate-limit-service", "an apostrophe dropped, a hyphen kept"},
		{"Choosing a limit from your traffic: `tollgate simulate`", "choosing-a-limit-from-your-traffic-tollgate-simulate", "punctuation and code marks dropped"},
		{"401, 429 or 503: who said no", "401-429-or-503-who-said-no", "digits kept"},
		{"A + B", "a--b", "every space a hyphen: runs are not collapsed"},
		{"max_delay × 2", "max_delay--2", "an underscore kept, a symbol dropped"},
		{"Straße und Übermaß", "straße-und-übermaß", "letters outside ASCII kept, lower-cased"},
		{"", "", "nothing in, nothing out"},
	} {
		if got := slug(c.text); got != c.want {
			t.Errorf("slug(%q) = %q, want %q (%s)", c.text, got, c.want, c.why)
		}
	}
}

func TestAnchors(t *testing.T) {
	for _, c := range []struct {
		page string
		want []string
		why  string
	}{
		{"# Title\n\ntext\n## A section ##\n", []string{"title", "a-section"}, "every level; closing #s are not the text"},
		{"## Notes\n## Notes\n## Notes\n", []string{"notes", "notes-1", "notes-2"}, "a repeated heading is numbered"},
		{"```yaml\n# a comment\n```\n## Real\n", []string{"real"}, "a # line in a code block is no heading"},
		{"#hashtag\n    ## indented code\n", nil, "no space after #, or indented as code: not headings"},
	} {
		got := anchors(c.page)
		want := map[string]bool{}
		for _, a := range c.want {
			want[a] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("anchors(%q) = %v, want %v (%s)", c.page, got, want, c.why)
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
