// Package filewatch loads files again when their content changes, and
// only then: the gateway's policy file, the rate-limit service's
// configuration directory.
//
// What is watched is what the content is read through, and nothing else
// in the directories that hold it: each path's own entry in its
// directory (a file replaced, a directory swapped), every symlink met on
// the way to what it resolves to (a deployment's "current", a Kubernetes
// ConfigMap's ..data), and, when it resolves to a directory, everything
// under it. Other files beside them (a log, say) change nothing. A change
// of what is watched is loaded only when the content differs from the one
// last loaded: files written again with the same bytes are no change.
package filewatch

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Delay gathers the events of one change (an editor's write and rename,
// a deployment's symlink swap) into one look at the content.
const Delay = 100 * time.Millisecond

// Options says what a watch watches and how it loads it.
type Options struct {
	// Paths returns the paths of the files and directories the content
	// is read from, as named. It is asked again after each change: a
	// policy names its keys file.
	Paths func() []string
	// Digest returns a digest of the content as it is now (as loaded:
	// the files' names and bytes), or false when there is none to load
	// (the file is gone): then nothing is loaded until the next change.
	Digest func() (string, bool)
	// Load loads the content, once its digest differs from the one last
	// loaded (the content when the watch started, at first) and, with
	// Settle, has stayed the same for Settle.
	Load func()
	// Settle is how long changed content must stay the same before it is
	// loaded (a file written in place with pauses is loaded whole, not
	// half written); zero loads it at once.
	Settle time.Duration
	// What names the content in the log: "policy".
	What string
	// Logger receives the watch's warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Watch watches what o names, loading it again on each change of its
// content (see the package's doc), until ctx ends.
func Watch(ctx context.Context, o Options) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the %s: %w", o.What, err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	w := &watch{o: o, fw: fw}
	w.loaded, _ = o.Digest()
	w.rewatch()
	go w.loop(ctx)
	return nil
}

// A watch is Watch at work.
type watch struct {
	o  Options
	fw *fsnotify.Watcher
	// entries are the paths whose events matter: each path, and every
	// symlink on its way; trees the directories within which every
	// event matters. Directories are named by their real paths.
	entries, trees map[string]bool
	// loaded is the digest last loaded; settling the one waited on to
	// stay the same for Settle.
	loaded, settling string
}

// loop looks at the content Delay after the last of a run of events that
// matter, until ctx ends or the watcher fails; it closes the watcher.
func (w *watch) loop(ctx context.Context) {
	defer w.fw.Close()
	var look <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if w.matters(ev.Name) {
				look = time.After(Delay)
			}
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.o.Logger.Warn("watching the "+w.o.What, slog.String("error", err.Error()))
		case <-look:
			look = nil
			w.rewatch()
			if w.check() {
				look = time.After(w.o.Settle)
			}
		}
	}
}

// matters reports whether an event naming name is one of what is
// watched.
func (w *watch) matters(name string) bool {
	name = filepath.Clean(name)
	return w.entries[name] || w.trees[filepath.Dir(name)]
}

// check loads the content if it differs from the one loaded and, with
// Settle, is the one waited on; it reports true, having set settling to
// the content now, when that content is new: to be waited on for Settle.
func (w *watch) check() (wait bool) {
	d, ok := w.o.Digest()
	switch {
	case !ok:
		w.settling = ""
		return false
	case d == w.loaded:
		w.settling = ""
		w.o.Logger.Debug(w.o.What + " unchanged; not reloaded")
		return false
	case w.o.Settle > 0 && d != w.settling:
		w.settling = d
		return true
	}
	w.settling, w.loaded = "", d
	w.o.Load()
	w.rewatch() // what was loaded may name other files
	return false
}

// rewatch watches the directories of the entries and the trees of the
// paths as they are now, and no others.
func (w *watch) rewatch() {
	w.entries, w.trees = map[string]bool{}, map[string]bool{}
	dirs := map[string]bool{}
	for _, p := range w.o.Paths() {
		entries, real := resolve(p)
		for _, e := range entries {
			w.entries[e] = true
			dirs[filepath.Dir(e)] = true
		}
		if st, err := os.Stat(real); real != "" && err == nil && st.IsDir() {
			_ = filepath.WalkDir(real, func(d string, e fs.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					w.trees[d], dirs[d] = true, true
				}
				return nil
			})
		}
	}
	watched := w.fw.WatchList()
	for _, d := range watched {
		if !dirs[d] {
			_ = w.fw.Remove(d) // gone already, when it was removed
		}
	}
	for d := range dirs {
		if slices.Contains(watched, d) {
			continue
		}
		if err := w.fw.Add(d); err != nil {
			w.o.Logger.Warn("not watching a directory of the "+w.o.What+"; SIGHUP still reloads", slog.String("dir", d), slog.String("error", err.Error()))
		}
	}
}

// maxLinks bounds the symlinks resolve follows, as the kernel does.
const maxLinks = 40

// resolve resolves p through symlinks, as opening it does. It returns
// the entries met on the way: every symlink, and the entry p resolves to
// (or, when one is missing, that one), each as its directory's real path
// and its name; and the real path p resolves to, "" when it does not.
func resolve(p string) (entries []string, real string) {
	p, err := filepath.Abs(p)
	if err != nil {
		return nil, ""
	}
	vol := filepath.VolumeName(p)
	root := vol + string(filepath.Separator)
	cur := root
	rest := split(p[len(vol):])
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		st, err := os.Lstat(next)
		if err != nil {
			return append(entries, next), ""
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		entries = append(entries, next)
		target, err := os.Readlink(next)
		if links++; err != nil || links > maxLinks {
			return entries, ""
		}
		if filepath.IsAbs(target) {
			tv := filepath.VolumeName(target)
			cur, target = tv+string(filepath.Separator), target[len(tv):]
		}
		rest = append(split(target), rest...)
	}
	if cur != root {
		entries = append(entries, cur)
	}
	return entries, cur
}

// split is a path's names, without empty ones and ".".
func split(p string) []string {
	var names []string
	for _, n := range strings.Split(filepath.ToSlash(p), "/") {
		if n != "" && n != "." {
			names = append(names, n)
		}
	}
	return names
}
