package envoyrls_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/internal/filewatch/configmap"
	"github.com/tollgate/tollgate/internal/redistest"
)

// rDomain is domain r's configuration: key k, n requests a minute.
func rDomain(n int) string {
	return fmt.Sprintf("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
}

// quiet is how long a test waits to see that nothing is reloaded: ten
// times the watch's gathering of a change's events (100 ms).
const quiet = time.Second

// watchedService is a rate-limit service that watches its configuration
// as `tollgate rls` does under an environment.
type watchedService struct {
	*fixture
	logs *redistest.SyncBuffer // its logs, from Debug up, unless logged elsewhere
}

// watchEnv starts a rate-limit service serving domain r at 5 a minute
// and watching the configuration env places (RUNTIME_ROOT, ...), which
// the test has laid out; it logs to log, or to its logs.
func watchEnv(t *testing.T, env map[string]string, log io.Writer) *watchedService {
	t.Helper()
	w := &watchedService{logs: &redistest.SyncBuffer{}}
	level := slog.LevelInfo
	if log == nil {
		log, level = w.logs, slog.LevelDebug
	}
	logger := slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: level}))
	w.fixture = newFixture(t, "memory", fixtureOptions{files: map[string]string{"r.yaml": rDomain(5)}, server: envoyrls.Options{Logger: logger}})
	set, err := envoyrls.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.srv.Watch(t.Context(), set.ConfigDir, set.Load); err != nil {
		t.Fatal(err)
	}
	return w
}

// limit is the limit served for domain r's key k.
func (w *watchedService) limit(t *testing.T) uint32 {
	return w.ask(t, "r", 0, withHits(desc("k", "x"), 0)).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

// loads is how many configurations were loaded since the start, or
// refused.
func (w *watchedService) loads() int {
	return int(testutilCounter(w.metrics.ConfigLoads.WithLabelValues("success")) + testutilCounter(w.metrics.ConfigLoads.WithLabelValues("error")))
}

// unchanged is how many times the watch found the configuration as it
// was loaded, and did not reload it.
func (w *watchedService) unchanged() int {
	return strings.Count(w.logs.String(), `"msg":"rate-limit configuration unchanged`)
}

// waitLimit waits until domain r's limit is want.
func (w *watchedService) waitLimit(t *testing.T, what string, want uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.limit(t) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: limit %d, want %d", what, w.limit(t), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// swapLink points the symlink at link to target as a deployment does:
// a new symlink renamed over it.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestReloadOnlyOnChange: RUNTIME_ROOT a symlink to a release's
// directory, as envoyproxy/ratelimit is deployed. What leaves the
// configuration's files as they are reloads nothing: a change beside
// them is not watched, and one that writes the same bytes again is seen
// and found the same. Then a real change reloads, once.
func TestReloadOnlyOnChange(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		// seen: the watch looks at the change (and finds the files as
		// loaded); otherwise it does not even look.
		seen   bool
		change func(t *testing.T, root string)
	}{
		{name: "a file made beside RUNTIME_ROOT", reason: "of RUNTIME_ROOT's directory, only RUNTIME_ROOT's own entry matters",
			change: func(t *testing.T, root string) { writeConfig(t, root, map[string]string{"other": "x"}) }},
		{name: "a file beside RUNTIME_ROOT written again and again", reason: "a log, say: not the configuration",
			change: func(t *testing.T, root string) {
				for i := range 20 {
					writeConfig(t, root, map[string]string{"app.log": strings.Repeat("line\n", i)})
				}
			}},
		{name: "a file made in RUNTIME_ROOT beside the configuration's directory", reason: "RUNTIME_ROOT/notes is not RUNTIME_ROOT/config",
			change: func(t *testing.T, root string) {
				writeConfig(t, filepath.Join(root, "rt"), map[string]string{"notes": "x"})
			}},
		{name: "the configuration written again, the same bytes", reason: "a save without changes", seen: true,
			change: func(t *testing.T, root string) {
				writeConfig(t, filepath.Join(root, "rt", "config"), map[string]string{"r.yaml": rDomain(5)})
			}},
		{name: "the configuration's times changed", reason: "touch: the content is the same",
			change: func(t *testing.T, root string) {
				now := time.Now()
				if err := os.Chtimes(filepath.Join(root, "rt", "config", "r.yaml"), now, now); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "RUNTIME_ROOT swapped to a copy", reason: "a new release with the same files: their names and content are the same", seen: true,
			change: func(t *testing.T, root string) {
				writeConfig(t, filepath.Join(root, "v2", "config"), map[string]string{"r.yaml": rDomain(5)})
				swapLink(t, filepath.Join(root, "v2"), filepath.Join(root, "rt"))
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			writeConfig(t, filepath.Join(root, "v1", "config"), map[string]string{"r.yaml": rDomain(5)})
			if err := os.Symlink(filepath.Join(root, "v1"), filepath.Join(root, "rt")); err != nil {
				t.Fatal(err)
			}
			w := watchEnv(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "rt")}, nil)
			c.change(t, root)
			if c.seen {
				deadline := time.Now().Add(5 * time.Second)
				for w.unchanged() == 0 && w.loads() == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("the watch never looked at the change (%s)", c.reason)
					}
					time.Sleep(20 * time.Millisecond)
				}
			} else {
				time.Sleep(quiet)
			}
			if n := w.loads(); n != 0 {
				t.Fatalf("%d reloads; want none: %s", n, c.reason)
			}
			writeConfig(t, filepath.Join(root, "rt", "config"), map[string]string{"r.yaml": rDomain(9)})
			w.waitLimit(t, "a real change", 9)
			if n := w.loads(); n != 1 {
				t.Fatalf("a real change: %d reloads, want 1", n)
			}
		})
	}
}

// TestReloadLogBeside: a service that logs into a file beside what it
// watches, another process logging there too, reloads once for one
// change: its log line of the reload is no change to reload for again.
// (It was: each reload's line set off the next, forever.)
func TestReloadLogBeside(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		env          func(root string) map[string]string
		config, log  string // under root
	}{
		{name: "beside RUNTIME_ROOT", reason: "envoyproxy/ratelimit's layout: RUNTIME_ROOT a symlink, watched for swaps",
			env: func(root string) map[string]string {
				return map[string]string{"RUNTIME_ROOT": filepath.Join(root, "rt")}
			},
			config: "rt/config", log: "rls.log"},
		{name: "beside the configuration's directory", reason: "Istio's layout: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY holds the directory",
			env: func(root string) map[string]string {
				return map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit"}
			},
			config: "ratelimit/config", log: "ratelimit/rls.log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if strings.HasPrefix(c.config, "rt/") {
				writeConfig(t, filepath.Join(root, "v1", "config"), map[string]string{"r.yaml": rDomain(5)})
				if err := os.Symlink(filepath.Join(root, "v1"), filepath.Join(root, "rt")); err != nil {
					t.Fatal(err)
				}
			} else {
				writeConfig(t, filepath.Join(root, c.config), map[string]string{"r.yaml": rDomain(5)})
			}
			logPath := filepath.Join(root, c.log)
			log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { log.Close() })
			w := watchEnv(t, c.env(root), log)
			writeConfig(t, filepath.Join(root, c.config), map[string]string{"r.yaml": rDomain(7)})
			w.waitLimit(t, "the change", 7)
			// Another process logs beside it, a line at a time, each past
			// the watch's gathering of a change's events; then quiet.
			other := filepath.Join(filepath.Dir(logPath), "app.log")
			for range 8 {
				f, err := os.OpenFile(other, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintln(f, "GET /healthz 200")
				f.Close()
				time.Sleep(quiet / 4)
			}
			time.Sleep(quiet)
			b, _ := os.ReadFile(logPath)
			if n := w.loads(); n != 1 {
				t.Fatalf("%s: %d reloads for one change, want 1 (%s); its log:\n%.2000s", c.name, n, c.reason, b)
			}
		})
	}
}

// TestReloadConfigMap: the configuration a ConfigMap mounted as a
// directory, as Istio runs envoyproxy/ratelimit (its samples/ratelimit:
// RUNTIME_ROOT=/data, RUNTIME_SUBDIRECTORY=ratelimit, the volume on
// /data/ratelimit/config, RUNTIME_IGNOREDOTFILES=true so that the
// kubelet's ..data and timestamped directories are not read twice). Each
// update the kubelet makes (..data swapped) is served: a limit changed,
// a file added, a file removed.
func TestReloadConfigMap(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data", "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cm := configmap.Mount(t, dir, map[string]string{"config.yaml": rDomain(5)})
	w := watchEnv(t, map[string]string{"RUNTIME_ROOT": filepath.Join(root, "data"), "RUNTIME_SUBDIRECTORY": "ratelimit",
		"RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true"}, nil)
	if got := w.limit(t); got != 5 {
		t.Fatalf("at the start: limit %d", got)
	}
	cm.Update(t, map[string]string{"config.yaml": rDomain(7)})
	w.waitLimit(t, "the ConfigMap updated", 7)

	oDomain := "domain: o\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"
	oLimit := func() uint32 {
		st := w.ask(t, "o", 0, withHits(desc("k", "x"), 0)).Statuses
		if len(st) == 0 {
			return 0
		}
		return st[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	cm.Update(t, map[string]string{"config.yaml": rDomain(7), "o.yaml": oDomain})
	waitUntil(t, "a file added to the ConfigMap", func() bool { return oLimit() == 3 })

	cm.Update(t, map[string]string{"config.yaml": rDomain(11)})
	w.waitLimit(t, "a file removed from the ConfigMap", 11)
	if got := oLimit(); got != 0 {
		t.Fatalf("domain o, its file removed: limit %d", got)
	}
}

// waitUntil waits until cond holds, for 5 seconds at most.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
