package envoyrls

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/tollgate/tollgate/internal/filewatch"
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

// Watch reloads (see Reload) the configuration in dir, read with opts as
// Load reads it, whenever its files change, until ctx ends: a file
// written, added or removed under dir, dir replaced, or a symlink on the
// way to dir or to one of its files swapped (RUNTIME_ROOT's "current", a
// Kubernetes ConfigMap's ..data). Nothing else is watched: a file beside
// dir or beside RUNTIME_ROOT (a log, say) is no change. Files that are,
// by name and bytes, the ones loaded last are not loaded again.
func (s *Server) Watch(ctx context.Context, dir string, opts LoadOptions) error {
	return filewatch.Watch(ctx, filewatch.Options{
		Paths:  func() []string { return watchPaths(dir, opts) },
		Digest: func() (string, bool) { return digest(dir, opts), true },
		Load:   func() { s.Reload(func() (*Config, error) { return Load(dir, opts) }) },
		What:   "rate-limit configuration",
		Logger: s.log,
	})
}

// watchPaths are what the configuration in dir is read through: dir,
// and each file Load reads (a symlink to a file elsewhere).
func watchPaths(dir string, opts LoadOptions) []string {
	files, _ := configFiles(dir, opts)
	return append([]string{dir}, files...)
}

// digest is a digest of the files Load reads from dir: their names
// under dir and their bytes, or what stops them being read.
func digest(dir string, opts LoadOptions) string {
	h := sha256.New()
	if err := hashFiles(h, dir, opts); err != nil {
		fmt.Fprintf(h, "error\x00%s", err)
	}
	return string(h.Sum(nil))
}

// hashFiles writes the names under dir and the bytes of the files Load
// reads from it to h.
func hashFiles(h io.Writer, dir string, opts LoadOptions) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	files, err := configFiles(real, opts)
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(real, f)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	return nil
}
