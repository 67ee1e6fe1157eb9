package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// chromium returns Debian's Chromium, which .ci/run installs; a missing
// browser fails the test rather than skipping it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: the dashboard test drives a real headless browser; install it (Debian: apt-get install chromium)")
	return ""
}

// TestDashboard drives /dashboard in headless Chromium: the page must show
// live data from the gateway (the active version, the refusals it saw, the
// most refused subject) and it saves a screenshot.
func TestDashboard(t *testing.T) {
	bin := chromium(t)
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	admitUntilRefused(t, g.public+"/api/items", 200, "X-API-Key", freeKey)
	for i := 0; i < 9; i++ {
		get(t, g.public+"/api/items", "X-API-Key", freeKey)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // keep traffic flowing so the rates move
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				get(t, g.public+"/api/items", "X-API-Key", proKey)
			}
		}
	}()
	run := func(extra ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
			"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=4000"}
		out, err := exec.CommandContext(ctx, bin, append(append(args, extra...), g.admin+"/dashboard")...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", extra, err)
		}
		return out
	}
	dom := string(run("--dump-dom"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`id="version">quickstart-1<`),
		regexp.MustCompile(`id="refused-total">1\d<`),                            // the 10 refusals above
		regexp.MustCompile(`<td>u_[A-Za-z0-9_-]{22}</td><td class="n">1\d</td>`), // alice (the free key) as a pseudonym
		regexp.MustCompile(`id="breaker"[^>]*>no shared store<`),
	} {
		if !want.MatchString(dom) {
			t.Errorf("the dashboard lacks %s; DOM:\n%.3000s", want, dom)
		}
	}
	shot := filepath.Join(os.TempDir(), "tollgate-dashboard.png")
	os.Remove(shot)
	run("--screenshot="+shot, "--window-size=1280,720")
	if st, err := os.Stat(shot); err != nil || st.Size() < 5000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("dashboard screenshot: %s", shot)
}
