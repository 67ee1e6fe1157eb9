package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/filewatch/configmap"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/policy"
)

const reloadPolicy = `version: VERSION
listeners: {public: "127.0.0.1:8080", admin: "127.0.0.1:9090"}
identity: {secret: reload-test-secret-0123456789, anonymous_plan: open}
plans:
  open: {algorithm: fixed_window, rate: LIMIT, period: 1h}
routes:
  - {name: api, path: /api/, upstream: UPSTREAM}
`

// TestReloadUnderLoad sends requests while the policy file changes: no
// request fails, the new limit applies on the file's change (one
// reload), an invalid file leaves the active policy serving and is
// reported, and one call rolls back to the previous version.
func TestReloadUnderLoad(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write := func(version, limit string) {
		src := strings.NewReplacer("VERSION", version, "LIMIT", limit, "UPSTREAM", up.URL).Replace(reloadPolicy)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as editors and config tools do
			t.Fatal(err)
		}
	}
	write("v1", "5")
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := startStill(t, p, "") // a fixed window of an hour
	watch(t, g, path)
	base, admin, logs := g.public, g.admin, g.logs

	// Load throughout: every answer must be 200 or 429, never an error.
	stop := make(chan struct{})
	var bad atomic.Int64
	var badWhat atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(base + "/api/x")
				if err != nil {
					bad.Add(1)
					badWhat.Store(err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 429 {
					bad.Add(1)
					badWhat.Store(resp.Status)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	version := func() string {
		_, body := getBody(t, admin+"/policy")
		var v struct{ Version, Hash string }
		json.Unmarshal(body, &v)
		return v.Version
	}
	waitFor(t, "v1 exhausted", 10*time.Second, func() bool { return get(t, base+"/api/x").StatusCode == 429 })

	write("v2", "1000000")
	took := waitFor(t, "v2 active and admitting", 10*time.Second, func() bool {
		return version() == "v2" && get(t, base+"/api/x").StatusCode == 200
	})
	t.Logf("new policy applied %v after the file changed", took)
	// Within a second is the watch's doing, not this machine's speed: the
	// change itself reloads the file (nothing else here reloads it), once
	// its events are in (a quiet period of 100 ms), once for the events
	// of one replacement.
	if n := metric(t, &running{admin: admin}, `tollgate_policy_reloads_total{result="ok"}`); n != 1 {
		t.Errorf("the file replaced once was reloaded %v times, want 1", n)
	}

	// An invalid file is refused; v2 keeps serving.
	if err := os.WriteFile(path, []byte("version: v3\nplans: [not, a, map\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the invalid file reported", 10*time.Second, func() bool {
		return metric(t, &running{admin: admin}, `tollgate_policy_reloads_total{result="invalid"}`) >= 1
	})
	if v := version(); v != "v2" || get(t, base+"/api/x").StatusCode != 200 {
		t.Fatalf("after an invalid file the active policy is %q", v)
	}
	if !strings.Contains(logs.String(), "policy file refused") {
		t.Error("no log line for the refused file")
	}

	// One call restores the previous version.
	resp, err := client.Post(admin+"/policy/rollback", "application/json", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("rollback: %v %v", resp, err)
	}
	resp.Body.Close()
	if v := version(); v != "v1" {
		t.Fatalf("after the rollback: %q", v)
	}
	if code := get(t, base+"/api/x").StatusCode; code != 429 {
		t.Fatalf("v1's spent budget after the rollback: %d", code)
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d requests failed during reloads, e.g. %v", bad.Load(), badWhat.Load())
	}
}

// TestKeysFileReload: adding a key to the keys file gives it its plan
// within a second, without a restart.
func TestKeysFileReload(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	keys := filepath.Join(dir, "keys.yaml")
	src := strings.NewReplacer("VERSION", "k1", "LIMIT", "1000", "UPSTREAM", up.URL).Replace(reloadPolicy) +
		"keys_file: keys.yaml\n"
	src = strings.Replace(src, "plans:\n", "plans:\n  gold: {algorithm: fixed_window, rate: 7, period: 1h}\n", 1)
	os.WriteFile(path, []byte(src), 0o600)
	os.WriteFile(keys, []byte("api_keys: []\n"), 0o600)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	watch(t, g, path)
	base := g.public
	if code := get(t, base+"/api/x", "X-API-Key", freeKey).StatusCode; code != 401 {
		t.Fatalf("an unknown key: %d", code)
	}
	os.WriteFile(keys, []byte(`api_keys:
  - {id: gold-1, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", tenant: t1, plan: gold}
`), 0o600)
	took := waitFor(t, "the new key admitted", 5*time.Second, func() bool {
		resp := get(t, base+"/api/x", "X-API-Key", freeKey)
		return resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("RateLimit-Policy"), `"gold";q=7`)
	})
	t.Logf("a key added to the keys file worked %v later", took)
}

// watch makes a running gateway reload the policy file at path on change,
// until the test ends.
func watch(t *testing.T, g *running, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := g.g.Watch(ctx, path); err != nil {
		t.Fatal(err)
	}
}

// TestNewVersionKeepsBudgets: a new policy version that leaves a limit as
// it was keeps what was spent of it, a daily quota and a locked account
// included, and a limit that changes starts afresh. On both stores.
func TestNewVersionKeepsBudgets(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newLoginUpstream(t, 0)
		version := func(v, dailyQuota, maxFailures string) *policy.Policy {
			p := quickstart(t, up.URL, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.0/8]",
				"version: quickstart-1", "version: "+v,
				"{name: day, calendar: day, rate: 1000}", "{name: day, calendar: day, rate: "+dailyQuota+"}",
				"max_failures: 5", "max_failures: "+maxFailures)
			return p
		}
		g := startStill(t, version("v1", "10", "5"), redisURL) // a daily quota
		// The login service answers 401 to anything but a login: a
		// request it answers was admitted.
		api := func() int { return get(t, g.public+"/api/items", "X-API-Key", freeKey).StatusCode }
		login := func(password string, from int) int {
			return postLogin(t, g, fmt.Sprintf("203.0.113.%d", from), "/login", "application/json",
				`{"username":"carol","password":"`+password+`"}`)
		}
		for i := range 10 {
			if code := api(); code != 401 {
				t.Fatalf("v1: request %d of a daily quota of 10: %d", i+1, code)
			}
		}
		if code := api(); code != 429 {
			t.Fatalf("v1: an 11th request of a daily quota of 10: %d", code)
		}
		for i := range 5 {
			if code := login("guess", i); code != 401 {
				t.Fatalf("v1: guess %d: %d", i+1, code)
			}
		}
		if code := login("demo", 9); code != 429 {
			t.Fatalf("v1: the right password after 5 failures: %d, want 429 (locked)", code)
		}

		// A new version, the quota and the rule unchanged: both stand.
		if err := g.g.Reload(version("v2", "10", "5")); err != nil {
			t.Fatal(err)
		}
		if code := api(); code != 429 {
			t.Fatalf("v2, the same daily quota: %d, want 429 (spent under v1)", code)
		}
		if code := login("demo", 10); code != 429 {
			t.Fatalf("v2, the same rule: %d, want 429 (locked under v1)", code)
		}

		// A changed quota starts afresh; the login guard's state is what
		// happened, and stands under a changed rule.
		if err := g.g.Reload(version("v3", "11", "3")); err != nil {
			t.Fatal(err)
		}
		for i := range 11 {
			if code := api(); code != 401 {
				t.Fatalf("v3, a daily quota of 11: request %d: %d", i+1, code)
			}
		}
		if code := api(); code != 429 {
			t.Fatalf("v3: a 12th request of a daily quota of 11: %d", code)
		}
		if code := login("demo", 11); code != 429 {
			t.Fatalf("v3, a changed rule: %d, want 429 (locked under v1)", code)
		}
	})
}

// TestRollbackStepsBack: each rollback steps one version further back,
// never forward; a reload of the file rolled back from keeps the
// rollback, and a changed file is applied.
func TestRollbackStepsBack(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(version string) {
		s := strings.Replace(strings.ReplaceAll(string(b), "builtin:echo", up.URL), "version: quickstart-1", "version: "+version, 1)
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	for _, v := range []string{"v2", "v3"} {
		write(v)
		if err := g.g.ReloadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	version := func() string { return g.g.Policy().Version }
	for _, want := range []string{"v2", "v1"} {
		if err := g.g.Rollback(); err != nil || version() != want {
			t.Fatalf("rollback: %v, active %s, want %s", err, version(), want)
		}
	}
	if err := g.g.Rollback(); err == nil || version() != "v1" {
		t.Fatalf("a rollback past the oldest: %v, active %s", err, version())
	}
	// The file still holds v3, rolled back from: reloading it keeps v1.
	if err := g.g.ReloadFile(path); err != nil || version() != "v1" {
		t.Fatalf("reloading the rolled-back file: %v, active %s", err, version())
	}
	write("v4")
	if err := g.g.ReloadFile(path); err != nil || version() != "v4" {
		t.Fatalf("a changed file: %v, active %s", err, version())
	}
	if err := g.g.Rollback(); err != nil || version() != "v1" {
		t.Fatalf("rollback from v4: %v, active %s", err, version())
	}
}

// TestFailedRollbackChangesNothing: a rollback refused because the
// runtime overrides do not fit the version rolled back to (a tenant set to
// a plan only the active version has) changes nothing: the version, the
// versions kept to roll back to, and the fleet's state, which used to say
// the rollback happened (so the active file was then ignored as the one
// rolled back from, and a rollback that did fit had nothing to go back to).
func TestFailedRollbackChangesNothing(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(version string, gold bool) {
		s := strings.Replace(strings.ReplaceAll(string(b), "builtin:echo", up.URL), "version: quickstart-1", "version: "+version, 1)
		if gold {
			s = strings.Replace(s, "\nplans:\n", "\nplans:\n  gold: {rate: 5000, period: 1m}\n", 1)
		}
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("v1", false)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	write("v2", true)
	if err := g.g.ReloadFile(path); err != nil {
		t.Fatal(err)
	}
	if err := g.g.Override(policy.Overrides{Tenants: map[string]string{"acme": "gold"}}); err != nil {
		t.Fatal(err)
	}
	version := func() string { return g.g.Policy().Version }
	if err := g.g.Rollback(); err == nil || version() != "v2" {
		t.Fatalf("a rollback to a version without the overridden plan: %v, active %s", err, version())
	}
	if _, body := getBody(t, g.admin+"/policy"); !strings.Contains(string(body), `"previous":{"hash":"`) ||
		!strings.Contains(string(body), `"version":"v1"`) {
		t.Fatalf("after a failed rollback, /policy: %s", body)
	}
	// A changed file (v3) is applied; its rollback goes to v2, then v1.
	write("v3", true)
	if err := g.g.ReloadFile(path); err != nil || version() != "v3" {
		t.Fatalf("a new file after a failed rollback: %v, active %s", err, version())
	}
	if err := g.g.Override(policy.Overrides{Tenants: map[string]string{"acme": ""}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"v2", "v1"} {
		if err := g.g.Rollback(); err != nil || version() != want {
			t.Fatalf("rollback: %v, active %s, want %s", err, version(), want)
		}
	}
}

// TestReloadSymlinkSwap: a policy file mounted as Kubernetes mounts a
// ConfigMap (policy.yaml -> ..data/policy.yaml, ..data -> a dated
// directory, the update an atomic swap of ..data) is reloaded when ..data
// is swapped, though no event names policy.yaml; a swap to a file that
// does not compile (a truncated one) keeps the active policy and what was
// spent of it.
func TestReloadSymlinkSwap(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	n := 0
	swap := func(src string) {
		t.Helper()
		n++
		ts := filepath.Join(dir, fmt.Sprintf("..2026_12_01_%d", n))
		if err := os.Mkdir(ts, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "policy.yaml"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	src := func(version, limit string) string {
		return strings.NewReplacer("VERSION", version, "LIMIT", limit, "UPSTREAM", up.URL).Replace(reloadPolicy)
	}
	swap(src("v1", "5"))
	if err := os.Symlink("..data/policy.yaml", path); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	watch(t, g, path)
	for range 3 {
		if code := get(t, g.public+"/api/x").StatusCode; code != 200 {
			t.Fatalf("v1: %d", code)
		}
	}
	// Truncated mid-way: the routes are gone, the file does not compile.
	v2 := src("v2", "5")
	swap(v2[:strings.Index(v2, "routes:")+4])
	waitFor(t, "the truncated file refused", 5*time.Second, func() bool {
		_, body := getBody(t, g.admin+"/metrics")
		return strings.Contains(string(body), `tollgate_policy_reloads_total{result="invalid"} 1`)
	})
	if v := g.g.Policy().Version; v != "v1" {
		t.Fatalf("a truncated file swapped in: active %s", v)
	}
	// A valid version that keeps the limit keeps what was spent of it.
	swap(src("v3", "5"))
	waitFor(t, "v3 served after the swap", 5*time.Second, func() bool { return g.g.Policy().Version == "v3" })
	for i := range 3 {
		code := get(t, g.public+"/api/x").StatusCode
		if want := map[bool]int{true: 200, false: 429}[i < 2]; code != want {
			t.Fatalf("v3, request %d of the hour (5 allowed): %d, want %d", i+4, code, want)
		}
	}
	// Many swaps in a row, the old directories left in place: the
	// watches do not pile up (each swap moves the one on the directory
	// resolved into), and the last version is served. The watch moves its
	// watches after it reloads (and a last batch of events may still be
	// on its way), so their number is read once it has settled on the two
	// directories, the file's and the one it resolves into, before the
	// swaps and after; piled up, they never come back to two.
	const want = 2
	settled := func(when string) {
		t.Helper()
		n := inotifyWatches(t)
		if n < 0 {
			return // not Linux: nothing to count
		}
		for settle := time.Now().Add(10 * time.Second); n != want && time.Now().Before(settle); n = inotifyWatches(t) {
			time.Sleep(20 * time.Millisecond)
		}
		if n != want {
			t.Errorf("inotify watches %s: %d, want %d (the file's directory and the one it resolves into)", when, n, want)
		}
	}
	settled("before 20 swaps")
	for i := 4; i < 24; i++ {
		swap(src(fmt.Sprint("v", i), "5"))
	}
	waitFor(t, "v23 served after the swaps", 10*time.Second, func() bool { return g.g.Policy().Version == "v23" })
	settled("after 20 swaps")
}

// inotifyWatches counts this process's inotify watches (Linux; -1
// elsewhere, where no count is compared).
func inotifyWatches(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		return -1
	}
	n := 0
	for _, fd := range fds {
		b, _ := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		n += strings.Count(string(b), "inotify wd:")
	}
	return n
}

// TestReloadFileRemovedThenWritten: a policy file removed, then written
// anew a moment later (as some deploy tools do), is not reported as an
// invalid policy while it is gone, and its new content is served.
func TestReloadFileRemovedThenWritten(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	src := func(version string) []byte {
		return []byte(strings.NewReplacer("VERSION", version, "LIMIT", "5", "UPSTREAM", up.URL).Replace(reloadPolicy))
	}
	os.WriteFile(path, src("v1"), 0o600)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	watch(t, g, path)
	os.Remove(path)
	// The watch's quiet period (100ms) passes with the file gone; doing
	// nothing then leaves nothing to wait for.
	time.Sleep(400 * time.Millisecond)
	os.WriteFile(path, src("v2"), 0o600)
	waitFor(t, "v2 served", 5*time.Second, func() bool { return g.g.Policy().Version == "v2" })
	if _, body := getBody(t, g.admin+"/metrics"); !strings.Contains(string(body), `tollgate_policy_reloads_total{result="invalid"} 0`) {
		t.Errorf("a removed policy file counted as invalid")
	}
}

// TestReloadSameFileKeepsHistory: reloading a file that did not change (a
// SIGHUP, an editor's save without changes, a watch event) is no new
// version: the versions kept to roll back to stay as they were, and a
// rollback goes to the version before, not to the same one again.
func TestReloadSameFileKeepsHistory(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write := func(version string) {
		src := strings.NewReplacer("VERSION", version, "LIMIT", "5", "UPSTREAM", up.URL).Replace(reloadPolicy)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	write("v2")
	for range maxHistory + 2 {
		if err := g.g.ReloadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.g.Rollback(); err != nil || g.g.Policy().Version != "v1" {
		t.Fatalf("rollback after reloading v2 again and again: %v, active %s, want v1", err, g.g.Policy().Version)
	}
}

// maxHistory is gateway.maxHistory: how many versions a gateway keeps.
const maxHistory = 16

// TestReloadHalfWrittenFile: a policy file written in place (truncated,
// then written) with a pause of over 100 ms was loaded half written, and
// half a policy file is often a valid policy: here the first half lacks
// the export route and its limit. What is loaded is the whole file, and
// only once.
func TestReloadHalfWrittenFile(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	src := func(version string) string {
		return strings.NewReplacer("VERSION", version, "LIMIT", "5", "UPSTREAM", up.URL).Replace(reloadPolicy)
	}
	os.WriteFile(path, []byte(src("v1")), 0o600)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	watch(t, g, path)
	var seen sync.Map // the route names of every policy served
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			pol := g.g.Policy()
			var names []string
			for _, r := range pol.Routes {
				names = append(names, r.Name)
			}
			seen.Store(pol.Version+" "+strings.Join(names, ","), true)
		}
	}()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(src("v2")) // a whole policy already, without export
	f.Sync()
	time.Sleep(300 * time.Millisecond) // the writer pauses, past the watch's 100 ms
	f.WriteString("  - {name: export, path: /api/export, upstream: " + up.URL + "}\n")
	f.Close()
	waitFor(t, "v2 served", 10*time.Second, func() bool { return g.g.Policy().Version == "v2" })
	close(stop)
	wg.Wait()
	seen.Range(func(k, _ any) bool {
		if v := k.(string); strings.HasPrefix(v, "v2") && v != "v2 api,export" {
			t.Errorf("a half-written file was loaded: %s", v)
		}
		return true
	})
	if _, body := getBody(t, g.admin+"/metrics"); !strings.Contains(string(body), `tollgate_policy_reloads_total{result="ok"} 1`) {
		t.Errorf("want one reload: %s", regexp.MustCompile(`tollgate_policy_reloads_total\{[^\n]*`).FindAll(body, -1))
	}
}

// reloads is how many times the gateway reloaded its policy, or refused
// to, since it started: tollgate_policy_reloads_total of every result.
func reloads(t *testing.T, g *running) int {
	t.Helper()
	_, body := getBody(t, g.admin+"/metrics")
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^tollgate_policy_reloads_total\{[^}]*\} (\d+)$`).FindAllSubmatch(body, -1) {
		var v int
		fmt.Sscan(string(m[1]), &v)
		n += v
	}
	return n
}

// logTo sets a gateway's logger to one writing JSON lines to w, from
// level up.
func logTo(w io.Writer, level slog.Level) func(*gateway.Options) {
	return func(o *gateway.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
}

// quiet is how long a test waits to see that nothing is reloaded: ten
// times the watch's gathering of a change's events (100 ms). A change it
// does look at, it loads a second (settleTime) after.
const quiet = time.Second

// TestReloadOnlyOnChange: a policy file and its keys file. What leaves
// them as they are reloads nothing: a change beside them is not watched,
// and one that writes the same bytes again is seen and found the same.
// Then a real change reloads, once.
func TestReloadOnlyOnChange(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		// seen: the watch looks at the change (and finds the files as
		// loaded); otherwise it does not even look.
		seen   bool
		change func(t *testing.T, dir string, policy []byte)
	}{
		{name: "a file made beside the policy", reason: "of the policy's directory, only the policy's and the keys file's entries matter",
			change: func(t *testing.T, dir string, _ []byte) {
				os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o600)
			}},
		{name: "a file beside the policy written again and again", reason: "a log, say: not the policy",
			change: func(t *testing.T, dir string, _ []byte) {
				for i := range 20 {
					os.WriteFile(filepath.Join(dir, "app.log"), []byte(strings.Repeat("line\n", i)), 0o600)
				}
			}},
		{name: "the policy written again, the same bytes", reason: "a save without changes", seen: true,
			change: func(t *testing.T, dir string, policy []byte) {
				os.WriteFile(filepath.Join(dir, "policy.yaml"), policy, 0o600)
			}},
		{name: "the keys file written again, the same bytes", reason: "a deploy tool that rewrites every file", seen: true,
			change: func(t *testing.T, dir string, _ []byte) {
				os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte("api_keys: []\n"), 0o600)
			}},
		{name: "the policy replaced by a copy", reason: "an editor's save: a new file renamed over it, the same bytes", seen: true,
			change: func(t *testing.T, dir string, policy []byte) {
				os.WriteFile(filepath.Join(dir, ".policy.yaml.swp"), policy, 0o600)
				if err := os.Rename(filepath.Join(dir, ".policy.yaml.swp"), filepath.Join(dir, "policy.yaml")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "the policy's times changed", reason: "touch: the content is the same",
			change: func(t *testing.T, dir string, _ []byte) {
				now := time.Now()
				if err := os.Chtimes(filepath.Join(dir, "policy.yaml"), now, now); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "policy.yaml")
			src := func(version string) []byte {
				return []byte(strings.NewReplacer("VERSION", version, "LIMIT", "5", "UPSTREAM", up.URL).Replace(reloadPolicy) + "keys_file: keys.yaml\n")
			}
			os.WriteFile(path, src("v1"), 0o600)
			os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte("api_keys: []\n"), 0o600)
			p, err := policy.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			logs := &fixture.SyncBuffer{}
			g := startClock(t, p, "", nil, logTo(logs, slog.LevelDebug))
			watch(t, g, path)
			c.change(t, dir, src("v1"))
			if c.seen {
				waitFor(t, "the watch looking at the change ("+c.reason+")", 5*time.Second, func() bool {
					return strings.Contains(logs.String(), `"msg":"policy unchanged`) || reloads(t, g) > 0
				})
			} else {
				time.Sleep(quiet)
			}
			if n := reloads(t, g); n != 0 {
				t.Fatalf("%d reloads; want none: %s", n, c.reason)
			}
			os.WriteFile(path, src("v2"), 0o600)
			waitFor(t, "a real change served", 10*time.Second, func() bool { return g.g.Policy().Version == "v2" })
			if n := reloads(t, g); n != 1 {
				t.Fatalf("a real change: %d reloads, want 1", n)
			}
		})
	}
}

// TestReloadLogBeside: a gateway that logs into a file beside its policy
// file, another process logging there too, reloads once for one change:
// a line logged is no change of the policy.
func TestReloadLogBeside(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	src := func(version string) []byte {
		return []byte(strings.NewReplacer("VERSION", version, "LIMIT", "1000", "UPSTREAM", up.URL).Replace(reloadPolicy))
	}
	os.WriteFile(path, src("v1"), 0o600)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "gateway.log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	g := startClock(t, p, "", nil, logTo(log, slog.LevelInfo))
	watch(t, g, path)
	os.WriteFile(path, src("v2"), 0o600)
	waitFor(t, "v2 served", 10*time.Second, func() bool { return g.g.Policy().Version == "v2" })
	// Requests logged, and another process logging beside it, a line at
	// a time, each past the watch's gathering of a change's events; then
	// quiet for as long as a change takes to load.
	for range 8 {
		get(t, g.public+"/api/x")
		f, err := os.OpenFile(filepath.Join(dir, "app.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, "GET /healthz 200")
		f.Close()
		time.Sleep(quiet / 4)
	}
	time.Sleep(2 * quiet)
	if n := reloads(t, g); n != 1 {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("%d reloads for one change, want 1; its log:\n%.2000s", n, b)
	}
}

// TestReloadConfigMap: the policy and its keys file in a ConfigMap
// mounted as a directory (`tollgate serve --config /etc/tollgate/policy.yaml`,
// the volume on /etc/tollgate), as the kubelet lays it out and updates
// it: each update (..data swapped) is served, a key added to the keys
// file and a new version of the policy.
func TestReloadConfigMap(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	pol := func(version string) string {
		src := strings.NewReplacer("VERSION", version, "LIMIT", "1000", "UPSTREAM", up.URL).Replace(reloadPolicy) + "keys_file: keys.yaml\n"
		return strings.Replace(src, "plans:\n", "plans:\n  gold: {algorithm: fixed_window, rate: 7, period: 1h}\n", 1)
	}
	gold := `api_keys:
  - {id: gold-1, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", tenant: t1, plan: gold}
`
	cm := configmap.Mount(t, dir, map[string]string{"policy.yaml": pol("v1"), "keys.yaml": "api_keys: []\n"})
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	watch(t, g, path)
	if code := get(t, g.public+"/api/x", "X-API-Key", freeKey).StatusCode; code != 401 {
		t.Fatalf("an unknown key: %d", code)
	}
	cm.Update(t, map[string]string{"policy.yaml": pol("v1"), "keys.yaml": gold})
	waitFor(t, "the key added to the ConfigMap admitted", 10*time.Second, func() bool {
		resp := get(t, g.public+"/api/x", "X-API-Key", freeKey)
		return resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("RateLimit-Policy"), `"gold";q=7`)
	})
	cm.Update(t, map[string]string{"policy.yaml": pol("v2"), "keys.yaml": gold})
	waitFor(t, "v2 served from the ConfigMap", 10*time.Second, func() bool { return g.g.Policy().Version == "v2" })
	if n := reloads(t, g); n != 2 {
		t.Errorf("two updates: %d reloads, want 2", n)
	}
}
