package filewatch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestResolve: the entries met resolving a path are what a watch
// watches, so each symlink on the way must be among them, and the entry
// resolved to; nothing beside them.
func TestResolve(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		layout       []string // "dir/", "file", "link -> target"
		path         string
		entries      []string
		real         string // "" when it does not resolve
	}{
		{name: "a file", reason: "its own entry: a file replaced is a change",
			layout: []string{"etc/", "etc/policy.yaml"}, path: "etc/policy.yaml",
			entries: []string{"etc/policy.yaml"}, real: "etc/policy.yaml"},
		{name: "a ConfigMap's file", reason: "the kubelet swaps ..data, which no event for policy.yaml names",
			layout:  []string{"etc/", "etc/..2026_12_01_10_00_00.1/", "etc/..2026_12_01_10_00_00.1/policy.yaml", "etc/..data -> ..2026_12_01_10_00_00.1", "etc/policy.yaml -> ..data/policy.yaml"},
			path:    "etc/policy.yaml",
			entries: []string{"etc/policy.yaml", "etc/..data", "etc/..2026_12_01_10_00_00.1/policy.yaml"}, real: "etc/..2026_12_01_10_00_00.1/policy.yaml"},
		{name: "under a symlinked root", reason: "RUNTIME_ROOT's current swapped for another release",
			layout: []string{"srv/", "srv/v1/", "srv/v1/config/", "srv/current -> v1"}, path: "srv/current/config",
			entries: []string{"srv/current", "srv/v1/config"}, real: "srv/v1/config"},
		{name: "an absolute symlink", reason: "resolved from the root, as the kernel does",
			layout: []string{"a/", "b/", "b/f", "a/f -> /ROOT/b/f"}, path: "a/f",
			entries: []string{"a/f", "b/f"}, real: "b/f"},
		{name: "a symlink to ..", reason: "a target's .. is the parent of the directory the link is in, where it resolved to",
			layout: []string{"x/", "x/y/", "x/f", "l -> x/y", "x/y/g -> ../f"}, path: "l/g",
			entries: []string{"l", "x/y/g", "x/f"}, real: "x/f"},
		{name: "a missing file", reason: "its entry, to see it come back",
			layout: []string{"etc/"}, path: "etc/policy.yaml",
			entries: []string{"etc/policy.yaml"}},
		{name: "a dangling symlink", reason: "the link, and the missing entry it names",
			layout: []string{"etc/", "etc/policy.yaml -> gone/policy.yaml"}, path: "etc/policy.yaml",
			entries: []string{"etc/policy.yaml", "etc/gone"}},
		{name: "a symlink loop", reason: "given up on, as opening it fails",
			layout: []string{"a -> b", "b -> a"}, path: "a",
			entries: slices.Repeat([]string{"a", "b"}, maxLinks/2+1)[:maxLinks+1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range c.layout {
				p := filepath.Join(root, l)
				switch name, target, link := strings.Cut(l, " -> "); {
				case link:
					err = os.Symlink(strings.ReplaceAll(target, "/ROOT", root), filepath.Join(root, name))
				case strings.HasSuffix(l, "/"):
					err = os.Mkdir(p, 0o755)
				default:
					err = os.WriteFile(p, nil, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			entries, real := resolve(filepath.Join(root, c.path))
			for i, e := range entries {
				entries[i], _ = filepath.Rel(root, e)
			}
			if real != "" {
				real, _ = filepath.Rel(root, real)
			}
			if !slices.Equal(entries, c.entries) || real != c.real {
				t.Errorf("entries %q, real %q; want %q, %q (%s)", entries, real, c.entries, c.real, c.reason)
			}
		})
	}
}
