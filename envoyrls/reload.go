package envoyrls

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
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
	watched := map[string]bool{}
	rewatch := func() {
		for d := range watched {
			_ = w.Remove(d)
		}
		clear(watched)
		for _, dir := range dirs {
			add := func(p string) {
				if !watched[p] && w.Add(p) == nil {
					watched[p] = true
				}
			}
			add(filepath.Dir(dir))
			real, err := filepath.EvalSymlinks(dir)
			if err != nil {
				continue
			}
			_ = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if d.IsDir() {
					add(p)
				} else if d.Type()&fs.ModeSymlink != 0 {
					if st, err := os.Stat(p); err == nil && st.IsDir() {
						add(p)
					}
				}
				return nil
			})
		}
	}
	rewatch()
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				if timer == nil {
					timer = time.NewTimer(reloadDelay)
				} else {
					timer.Reset(reloadDelay)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("watching the rate-limit configuration", slog.String("error", err.Error()))
			case <-fire:
				fire = nil
				rewatch()
				s.Reload(load)
			}
		}
	}()
	return nil
}
