package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
)

// TestSimulateCandidateOpensNoFile: a candidate posted to /simulate (by
// the dashboard, which posts whatever a #try= link holds, so by any page
// that navigates an operator's browser there) must not make the gateway
// open a path of its choosing. keys_file naming a FIFO held the replay
// lock and a goroutine forever (/dev/zero: read until out of memory), and
// naming a secret file echoed its content in the validation error.
func TestSimulateCandidateOpensNoFile(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	get(t, g.public+"/api/items", "X-API-Key", freeKey)
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("TOLLGATE_ADMIN_TOKEN=s3cr3t-from-the-gateway-host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// No writer ever opens the FIFO; unblock a reader when the test ends.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	c := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{secret, fifo} {
		cand := "keys_file: " + path + "\n" + string(b)
		js, _ := json.Marshal(map[string]string{"policy": cand})
		req, _ := http.NewRequest(http.MethodPost, g.admin+"/simulate", strings.NewReader(string(js)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("keys_file %s: %v", path, err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(out), "s3cr3t") {
			t.Errorf("keys_file %s: the answer shows the file's content: %s", path, out)
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("keys_file %s: %d %s, want the candidate replayed without its keys file", path, resp.StatusCode, out)
		}
	}
}

// TestSimulateCandidateFetchesNothing: a candidate's JWKS URL is not
// fetched. The replay's engine registered it in the process's shared
// JWKS cache, which fetched it at once and then again every
// refresh_interval for as long as the process ran: a link to the
// dashboard (#try=) made the gateway send GETs to any https URL, or any
// loopback http one, and each new URL added another fetched forever.
func TestSimulateCandidateFetchesNothing(t *testing.T) {
	t.Parallel() // its own gateway; it mostly waits for fetches that must not come
	var hits atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"keys":[]}`))
	}))
	t.Cleanup(idp.Close)
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	get(t, g.public+"/api/items", "X-API-Key", freeKey)
	b, err := os.ReadFile("../examples/jwt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cand := strings.Replace(string(b), "http://127.0.0.1:8088/.well-known/jwks.json", idp.URL+"/internal/jwks", 1)
	if status, out := postCandidate(t, g, cand); status != http.StatusOK {
		t.Fatalf("/simulate: %d %s", status, out)
	}
	// The cache fetches in the background: give it the time it took.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && hits.Load() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the candidate's JWKS URL was fetched %d times", n)
	}
}

// TestSimulateBudget: a replay's CPU is bounded by its budget
// (Options.SimulateBudget): one past it is stopped and answered 503,
// saying which budget; within it, the same replay is answered. (A framed
// dashboard ran a replay of a 1 MiB candidate every 3 s for whoever
// framed it, about a core.) The budget here is a nanosecond, so the
// replay is stopped at its first check, however fast the machine.
func TestSimulateBudget(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	for _, c := range []struct {
		budget time.Duration
		status int
		reason string
	}{
		{time.Nanosecond, http.StatusServiceUnavailable, "past the budget at once"},
		{0, http.StatusOK, "the default budget, over 10 times what 10 calls take"},
	} {
		g := startClock(t, config(t, up.URL, "[]"), "", nil, func(o *gateway.Options) { o.SimulateBudget = c.budget })
		for range 10 {
			get(t, g.public+"/api/items", "X-API-Key", freeKey)
		}
		b, err := os.ReadFile("../examples/quickstart.yaml")
		if err != nil {
			t.Fatal(err)
		}
		status, out := postCandidate(t, g, string(b))
		if status != c.status {
			t.Errorf("budget %v (%s): %d %s, want %d", c.budget, c.reason, status, out, c.status)
		}
		if c.status == http.StatusServiceUnavailable && !strings.Contains(string(out), "SimulateBudget") {
			t.Errorf("budget %v: the refusal does not say which budget: %s", c.budget, out)
		}
	}
}

// postCandidate posts a candidate policy to the gateway's /simulate and
// returns the status and the body.
func postCandidate(t *testing.T, g *running, candidate string) (int, []byte) {
	t.Helper()
	js, _ := json.Marshal(map[string]string{"policy": candidate})
	req, _ := http.NewRequest(http.MethodPost, g.admin+"/simulate", strings.NewReader(string(js)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}
