package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tollgate/tollgate/policy"
)

// Override applies a runtime change (API keys, tenant plans) over the
// active policy file, atomically; it persists across reloads of the file.
// An override that does not fit the policy is refused and changes nothing.
func (g *Gateway) Override(change policy.Overrides) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// The change must fit together with what of the fleet's overrides
	// fits the version served here (build leaves out the rest).
	base := g.active.Load().base
	if _, err := base.Override(g.applied().With(change)); err != nil {
		return err
	}
	next := g.overrides.With(change)
	old := g.overrides
	g.overrides = next
	sv, err := g.build(base)
	if err != nil {
		g.overrides = old
		return err
	}
	st := g.state
	st.Serial++
	st.Overrides = next
	if err := g.saveState(st); err != nil {
		g.overrides = old
		return err
	}
	g.active.Store(sv) // the same version: no rollback point
	g.log.Info("runtime override applied", slog.Int("keys", len(change.Keys)), slog.Int("tenants", len(change.Tenants)))
	return nil
}

// applied returns the runtime overrides the version served here takes
// (build leaves out the others).
func (g *Gateway) applied() policy.Overrides {
	fit, _ := g.overrides.Fitting(g.active.Load().base)
	return fit
}

// buildFitting is build for a version that replaces the one served here
// (a reload, a rollback): every override applied now must fit it too, or
// it is refused, rather than a tenant's plan or a key silently dropped.
func (g *Gateway) buildFitting(next *policy.Policy) (*served, error) {
	if _, err := next.Override(g.applied()); err != nil {
		return nil, err
	}
	return g.build(next)
}

// maxHistory is how many earlier policies a gateway keeps to roll back
// to.
const maxHistory = 16

// activate serves sv from now on, the policy it replaces going on the
// history (not when rolling back: rollback pops it). The caller holds
// g.mu, but while New builds.
func (g *Gateway) activate(sv *served) { g.swap(sv, true) }

func (g *Gateway) swap(sv *served, keep bool) {
	if old := g.active.Swap(sv); old != nil {
		if keep {
			g.history = append(g.history, old)
			if len(g.history) > maxHistory {
				g.history = append(g.history[:0:0], g.history[len(g.history)-maxHistory:]...)
			}
		}
		g.info.DeleteLabelValues(old.pol.Version)
	}
	g.info.WithLabelValues(sv.pol.Version).Set(1)
}

// Policy returns the active policy.
func (g *Gateway) Policy() *policy.Policy { return g.active.Load().pol }

// Reload validates p completely and swaps it in atomically: requests in
// flight finish under the old policy, new ones get p. Settings that need a
// restart (listeners, store, admin token) must not change. On error the
// active policy stays, and the failure is logged and counted.
func (g *Gateway) Reload(p *policy.Policy) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if needsRestart(g.pol, p) {
		g.reloads.WithLabelValues("refused").Inc()
		err := errors.New("reloading policy: listeners (and their timeouts and caps), store, admin token and tracing need a restart to change")
		g.log.Error("policy reload refused", slog.String("version", p.Version), slog.String("error", err.Error()))
		return err
	}
	sv, err := g.buildFitting(p)
	if err != nil {
		g.reloads.WithLabelValues("invalid").Inc()
		g.log.Error("policy reload failed", slog.String("error", err.Error()))
		return err
	}
	// The same file again (a SIGHUP, a save without changes) is no new
	// version: it replaces the active one, which is not kept to roll back
	// to, so a rollback goes to the version before and repeated reloads
	// do not push the earlier versions out of the history.
	// (Same: the same file hash and version; a policy from code has no
	// hash, and is always a new version.)
	active := g.active.Load().base
	g.swap(sv, p.Hash == "" || p.Hash != active.Hash || p.Version != active.Version)
	g.endRollback()
	g.reloads.WithLabelValues("ok").Inc()
	for _, w := range p.Warnings {
		g.log.Warn("policy warning", slog.String("warning", w.Msg), slog.String("file", w.File), slog.Int("line", w.Line), slog.String("path", w.Path))
	}
	g.log.Info("policy reloaded", slog.String("version", p.Version), slog.String("hash", p.Hash))
	return nil
}

// needsRestart reports whether next changes a setting of cur that only a
// restart changes: the listeners (and their timeouts and caps), the
// store, the admin token or tracing.
func needsRestart(cur, next *policy.Policy) bool {
	return next.Public != cur.Public || next.Admin != cur.Admin || next.AdminToken != cur.AdminToken || next.Conns != cur.Conns ||
		next.Store.Type != cur.Store.Type || next.Store.URL != cur.Store.URL || next.Store.Mode != cur.Store.Mode || next.Tracing != cur.Tracing
}

// endRollback records, when a rollback is in force, that a new policy
// file puts it behind, for the whole fleet. When the state cannot be
// saved this gateway follows its file all the same, and the fleet's state
// says so once it can be. The caller holds g.mu.
func (g *Gateway) endRollback() {
	if g.state.Pinned == "" && len(g.state.RolledBack) == 0 {
		return
	}
	st := g.state
	st.Serial++
	st.Pinned, st.RolledBack = "", nil
	if err := g.saveState(st); err != nil {
		g.state.Pinned, g.state.RolledBack = "", nil
		g.log.Warn("recording that the new policy file ends a rollback", slog.String("error", err.Error()))
	}
}

// ReloadFile loads the policy file at path and reloads it. An invalid file
// is refused (logged and counted) and the active policy keeps serving.
func (g *Gateway) ReloadFile(path string) error {
	env := policy.ProcessEnv()
	env.Public, env.Admin = g.opts.Public, g.opts.Admin
	p, err := policy.LoadEnv(path, env)
	if err == nil && p.Hash != "" {
		g.mu.Lock()
		// A file rolled back from is not applied again (see Rollback).
		kept := slices.Contains(g.state.RolledBack, p.Hash)
		g.mu.Unlock()
		if kept {
			g.log.Info("policy file is the one rolled back from; keeping the rollback until the file changes",
				slog.String("version", p.Version), slog.String("hash", p.Hash))
			return nil
		}
	}
	if err != nil {
		g.reloads.WithLabelValues("invalid").Inc()
		g.log.Error("policy file refused, keeping the active policy", slog.String("file", path),
			slog.String("active_version", g.Policy().Version), slog.String("error", err.Error()))
		return err
	}
	return g.Reload(p)
}

// Rollback restores the policy that was active before the active one:
// rolling back again steps further back (up to maxHistory policies),
// never forward. Until the policy file changes, reloading it (a file
// event, SIGHUP) keeps the rollback: the file that was rolled back from
// is not applied again.
func (g *Gateway) Rollback() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.history)
	if n == 0 {
		return errors.New("rolling back: no earlier policy")
	}
	prev := g.history[n-1]
	// The version rolled back to is built anew, under the overrides of
	// now, before anything changes: one they do not fit (a tenant set to a
	// plan it lacks) is refused, and the state, the history and the
	// active version stay as they were.
	sv, err := g.buildFitting(prev.base)
	if err != nil {
		return fmt.Errorf("rolling back: %w", err)
	}
	st := g.state
	st.Serial++
	st.Pinned = prev.base.Hash
	st.RolledBack = append(append([]string(nil), st.RolledBack...), g.active.Load().base.Hash)
	if err := g.saveState(st); err != nil {
		return fmt.Errorf("rolling back: %w", err)
	}
	g.history = g.history[:n-1]
	g.swap(sv, false)
	g.reloads.WithLabelValues("rollback").Inc()
	g.log.Info("policy rolled back", slog.String("version", prev.pol.Version), slog.String("hash", prev.pol.Hash))
	return nil
}

// settleTime is how long a changed policy or keys file must stay the
// same before Watch loads it.
const settleTime = time.Second

// Watch reloads the policy file at path whenever it, or the keys file it
// names, changes and then stays the same for settleTime (a file written
// in place with pauses is loaded whole, not half written), until ctx
// ends. API keys and their plans thus change
// without a restart. It watches the files' directories, so editors that
// replace a file are seen, and what each file resolves to through
// symlinks: a symlink on the way swapped for another (a Kubernetes
// ConfigMap's ..data, a deployment's "current") is a change of the file,
// though no event names it, and the directory it now resolves into is
// watched in place of the one before.
func (g *Gateway) Watch(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching policy: %w", err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return fmt.Errorf("watching policy: %w", err)
	}
	pw := &policyWatch{g: g, w: w, path: path, dirs: map[string]bool{filepath.Dir(path): true}}
	pw.resolved = pw.resolve()
	pw.rewatch()
	go pw.loop(ctx)
	return nil
}

// A policyWatch is Watch at work: the policy file, the directories
// watched, and what each file resolved to through symlinks when last
// loaded.
type policyWatch struct {
	g        *Gateway
	w        *fsnotify.Watcher
	path     string
	dirs     map[string]bool   // the directories watched
	resolved map[string]string // each file's target (files) when last seen
}

// files are the policy file and its keys file, as named.
func (pw *policyWatch) files() []string {
	fs := []string{filepath.Clean(pw.path)}
	if kp := pw.g.Policy().KeysPath; kp != "" {
		fs = append(fs, filepath.Clean(kp))
	}
	return fs
}

// resolve maps each file to what it resolves to through symlinks (when
// it does).
func (pw *policyWatch) resolve() map[string]string {
	m := map[string]string{}
	for _, f := range pw.files() {
		if r, err := filepath.EvalSymlinks(f); err == nil {
			m[f] = r
		}
	}
	return m
}

// rewatch watches the directories of the files and of what they resolve
// to, and no others.
func (pw *policyWatch) rewatch() {
	want := map[string]bool{filepath.Dir(pw.path): true}
	for _, f := range pw.files() {
		want[filepath.Dir(f)] = true
	}
	for _, r := range pw.resolved {
		want[filepath.Dir(r)] = true
	}
	for d := range pw.dirs {
		if !want[d] {
			pw.w.Remove(d) // gone already, when its directory was removed
			delete(pw.dirs, d)
		}
	}
	for d := range want {
		if !pw.dirs[d] {
			if err := pw.w.Add(d); err != nil {
				pw.g.log.Warn("not watching a directory of the policy; SIGHUP still reloads", slog.String("dir", d), slog.String("error", err.Error()))
				continue
			}
			pw.dirs[d] = true
		}
	}
}

// named reports whether an event's name is one of the files or what one
// resolved to.
func (pw *policyWatch) named(name string) bool {
	name = filepath.Clean(name)
	for _, f := range pw.files() {
		if name == f || name == pw.resolved[f] {
			return true
		}
	}
	return false
}

// fingerprint is a digest of the files' content, to tell a file still
// being written from one that has settled.
func (pw *policyWatch) fingerprint() string {
	h := sha256.New()
	for _, f := range pw.files() {
		b, _ := os.ReadFile(f)
		h.Write(b)
		h.Write([]byte{0})
	}
	return string(h.Sum(nil))
}

// loop waits for changes until ctx ends: the events of one change are
// gathered for 100 ms, then the files are loaded once their content has
// stayed the same for settleTime.
func (pw *policyWatch) loop(ctx context.Context) {
	defer pw.w.Close()
	var debounce <-chan time.Time
	changed := false
	settling := "" // the fingerprint waited on to settle
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-pw.w.Events:
			if !ok {
				return
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) == 0 {
				continue
			}
			// Any change in a watched directory may be a symlink swapped
			// on the way to a file: whether it was is seen once the
			// events of the change are in.
			changed = changed || pw.named(ev.Name) && ev.Op&fsnotify.Remove == 0
			debounce = time.After(100 * time.Millisecond)
		case err, ok := <-pw.w.Errors:
			if !ok {
				return
			}
			pw.g.log.Warn("watching policy", slog.String("error", err.Error()))
		case <-debounce:
			debounce = nil
			if wait := pw.settled(changed, &settling); wait {
				debounce = time.After(settleTime)
				continue
			}
			changed, settling = false, ""
		}
	}
}

// settled loads the files if they changed (changed, or a symlink on the
// way now resolves elsewhere) and their content is the one waited on
// (settling), and rewatches; it reports true, having set settling to the
// content now, when that content is new: to be waited on for settleTime.
func (pw *policyWatch) settled(changed bool, settling *string) (wait bool) {
	now := pw.resolve()
	// A policy file that is gone (removed before its replacement is
	// written, a dangling symlink) is not loaded: its return is a change.
	_, there := now[filepath.Clean(pw.path)]
	if there && (changed || !maps.Equal(now, pw.resolved)) {
		// A file written in place, with a pause, parses half written
		// (fewer routes, fewer limits): load it once its content has
		// stayed the same for settleTime.
		if fp := pw.fingerprint(); fp != *settling {
			*settling = fp
			return true
		}
		pw.g.ReloadFile(pw.path)
		now = pw.resolve() // the keys file may have moved
	}
	pw.resolved = now
	pw.rewatch()
	return false
}
