package envoyrls

import (
	"context"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload loads the configuration with load and, if it is valid, makes it
// the server's; an invalid one is logged and counted, and the active
// configuration keeps serving. It reports whether the new one was taken.
func (s *Server) Reload(load func() (*Config, error)) bool {
	cfg, err := load()
	m := s.opts.Metrics
	if err != nil {
		if m != nil {
			m.ConfigLoads.WithLabelValues("error").Inc()
		}
		s.log.Error("rate-limit configuration refused; the active one keeps serving", slog.String("error", err.Error()))
		return false
	}
	if m != nil {
		m.ConfigLoads.WithLabelValues("success").Inc()
	}
	s.SetConfig(cfg)
	s.log.Info("rate-limit configuration loaded", slog.Int("files", len(cfg.Files)), slog.Int("domains", len(cfg.domains)))
	return true
}

// reloadDelay gathers the events of one change (an editor's write and
// rename, a deployment's symlink swap) into one reload.
const reloadDelay = 100 * time.Millisecond

// Watch reloads (see Reload) whenever anything changes under the
// directories in dirs (recursively: files written, created, removed or
// renamed, directories added) until ctx ends. A directory that is a
// symlink swapped for another (RUNTIME_ROOT's "current", as
// envoyproxy/ratelimit's RUNTIME_WATCH_ROOT expects) is watched through
// its parent as well, and watched again where it then points.
func (s *Server) Watch(ctx context.Context, dirs []string, load func() (*Config, error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	c := &configWatcher{w: w, dirs: dirs, watched: map[string]bool{}}
	c.rewatch()
	go s.reloadOnChange(ctx, c, load)
	return nil
}

// configWatcher is what Watch watches: dirs, through w.
type configWatcher struct {
	w       *fsnotify.Watcher
	dirs    []string
	watched map[string]bool
}

// rewatch watches the directories afresh: each one's parent, and every
// directory under where it points now.
func (c *configWatcher) rewatch() {
	for d := range c.watched {
		_ = c.w.Remove(d)
	}
	clear(c.watched)
	for _, dir := range c.dirs {
		c.add(filepath.Dir(dir))
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		_ = filepath.WalkDir(real, c.visit)
	}
}

// visit is rewatch's walk: it watches each directory, and each symlink
// to one; what cannot be read is skipped.
func (c *configWatcher) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return nil
	}
	if d.IsDir() || d.Type()&fs.ModeSymlink != 0 && isDir(p) {
		c.add(p)
	}
	return nil
}

// add watches p, if it is not watched yet.
func (c *configWatcher) add(p string) {
	if !c.watched[p] && c.w.Add(p) == nil {
		c.watched[p] = true
	}
}

// restart returns t, or a new timer if it is nil, set to fire after d.
func restart(t *time.Timer, d time.Duration) *time.Timer {
	if t == nil {
		return time.NewTimer(d)
	}
	t.Reset(d)
	return t
}

// reloadOnChange rewatches and reloads reloadDelay after the last of a
// run of events, until ctx ends or the watcher fails; it closes the
// watcher.
func (s *Server) reloadOnChange(ctx context.Context, c *configWatcher, load func() (*Config, error)) {
	defer c.w.Close()
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case _, ok := <-c.w.Events:
			if !ok {
				return
			}
			timer = restart(timer, reloadDelay)
			fire = timer.C
		case err, ok := <-c.w.Errors:
			if !ok {
				return
			}
			s.log.Warn("watching the rate-limit configuration", slog.String("error", err.Error()))
		case <-fire:
			fire = nil
			c.rewatch()
			s.Reload(load)
		}
	}
}
