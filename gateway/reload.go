package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/filewatch"
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
// ends. API keys and their plans thus change without a restart. What is
// watched is each file's entry in its directory (an editor's save, a file
// replaced) and every symlink on the way to it: one swapped for another
// (a Kubernetes ConfigMap's ..data, a deployment's "current") is a change
// of the file, though no event names it. Other files beside them (a log,
// say) are not watched, and files written again with the same bytes are
// not loaded again. A policy file that is gone (removed before its
// replacement is written, a dangling symlink) is not loaded: its return
// is a change.
func (g *Gateway) Watch(ctx context.Context, path string) error {
	err := filewatch.Watch(ctx, filewatch.Options{
		Paths: func() []string { return g.policyFiles(path) },
		Digest: func() (string, bool) {
			if _, err := os.Stat(path); err != nil {
				return "", false
			}
			return fingerprint(g.policyFiles(path)), true
		},
		Load:   func() { g.ReloadFile(path) },
		Settle: settleTime,
		What:   "policy",
		Logger: g.log,
	})
	if err != nil {
		return fmt.Errorf("watching policy: %w", err)
	}
	return nil
}

// policyFiles are the policy file at path and the keys file the active
// policy names.
func (g *Gateway) policyFiles(path string) []string {
	fs := []string{path}
	if kp := g.Policy().KeysPath; kp != "" {
		fs = append(fs, kp)
	}
	return fs
}

// fingerprint is a digest of the files' content (one unreadable reads
// as empty).
func fingerprint(files []string) string {
	h := sha256.New()
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%d\x00", len(b))
		h.Write(b)
	}
	return string(h.Sum(nil))
}
