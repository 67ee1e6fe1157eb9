package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// openFiles reads the soft and hard "Max open files" of a process.
func openFiles(t *testing.T, pid int) (soft, hard uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "Max open files")); len(f) >= 2 && strings.HasPrefix(line, "Max open files") {
			soft, _ = strconv.ParseUint(f[0], 10, 64)
			hard, _ = strconv.ParseUint(f[1], 10, 64)
			return soft, hard
		}
	}
	t.Fatalf("no Max open files in /proc/%d/limits", pid)
	return 0, 0
}

// logLine is what the tests read of serve's JSON log.
type logLine struct {
	Msg      string `json:"msg"`
	Soft     uint64 `json:"soft"`
	Hard     uint64 `json:"hard"`
	MaxConns int    `json:"max_conns"`
	Derived  bool   `json:"max_conns_from_file_limit"`
	Public   string `json:"public"`
	Admin    string `json:"admin"`
}

// served is a `tollgate serve` process.
type served struct {
	cmd     *exec.Cmd
	limit   *logLine // its "file limit" line
	serving logLine  // its "serving" line
	exited  bool
}

// startServe runs `tollgate serve` on the quickstart policy (listening on
// free ports) after the shell command ulimit, and waits until it serves.
func startServe(t *testing.T, ulimit string) *served {
	t.Helper()
	s := &served{cmd: exec.Command("sh", "-c", ulimit+` && exec "$0" -test.run='^$'`, os.Args[0])}
	args, _ := json.Marshal([]string{"serve", "--config", quickstartOnFreePorts(t)})
	s.cmd.Env = append(os.Environ(), argsEnv+"="+string(args))
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.exited {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
	})
	lines := make(chan logLine)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
	}()
	for s.serving.Msg == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("serve exited before serving")
			}
			switch l.Msg {
			case "file limit":
				s.limit = &l
			case "serving":
				s.serving = l
			}
		case <-time.After(10 * time.Second):
			t.Fatal("serve did not start within 10s")
		}
	}
	go func() {
		for range lines {
		}
	}()
	return s
}

// quickstartOnFreePorts writes the quickstart policy listening on free
// ports (public on 127.0.0.1, admin on 127.0.0.2) and returns its path.
func quickstartOnFreePorts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(strings.Replace(string(b), "public: 127.0.0.1:8080", "public: 127.0.0.1:0", 1), "admin: 127.0.0.1:9090", "admin: 127.0.0.2:0", 1)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stop sends SIGTERM and waits for a clean exit.
func (s *served) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	err := s.cmd.Wait()
	s.exited = true
	if err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
}

func ownFileLimit(t *testing.T) syscall.Rlimit {
	t.Helper()
	var own syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &own); err != nil {
		t.Fatal(err)
	}
	if own.Max < 8192 {
		t.Fatalf("this test needs a hard file limit of at least 8192, have %d", own.Max)
	}
	return own
}

// TestServeRaisesFileLimit starts `tollgate serve` with a low soft limit on
// open files: it raises the soft limit to the hard limit, says so, and
// derives its cap on public connections from it.
func TestServeRaisesFileLimit(t *testing.T) {
	own := ownFileLimit(t)
	s := startServe(t, "ulimit -Sn 256")
	soft, hard := openFiles(t, s.cmd.Process.Pid)
	if soft != hard || hard != own.Max {
		t.Errorf("/proc/<pid>/limits: open files %d soft, %d hard; want both %d (started with 256 soft)", soft, hard, own.Max)
	}
	if s.limit == nil || s.limit.Soft != soft || s.limit.Hard != hard {
		t.Errorf("logged file limit %+v, want soft %d hard %d", s.limit, soft, hard)
	}
	if want := int(soft-256-64) / 2; !s.serving.Derived || s.serving.MaxConns != want {
		t.Errorf("serving with max_conns %d (derived: %v), want %d derived from the file limit", s.serving.MaxConns, s.serving.Derived, want)
	}
	s.stop(t)
}

// TestServeDefaultsHoldSlowBodies is the reported attack on the defaults:
// `tollgate serve` with a hard limit of 2,048 open files, and two client
// addresses that each open 2,000 connections sending the headers of a
// request and the first byte of its body, and hold them. Before, the
// process ran out of file descriptors and neither /api nor the admin
// /healthz answered; with the default per-address cap (256) and the
// total derived from the file limit both keep answering.
func TestServeDefaultsHoldSlowBodies(t *testing.T) {
	ownFileLimit(t)
	s := startServe(t, "ulimit -n 2048")
	var (
		mu      sync.Mutex
		held    []net.Conn
		refused int
		wg      sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
				for range 500 {
					c, err := d.Dial("tcp", s.serving.Public)
					if err != nil {
						mu.Lock()
						refused++
						mu.Unlock()
						continue
					}
					io.WriteString(c, "POST /login HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	// The attack held, the process has descriptors to spare: before, it
	// ran out of them (the hard limit, 2,048) and answered nothing.
	openFDs := func() int {
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
		return len(fds)
	}
	if n := openFDs(); n > 2048-64 {
		t.Errorf("the gateway has %d files open under the attack, near its limit of 2,048", n)
	}

	// While they are held: ordinary requests on new connections, and
	// /healthz, each answered. The client timeout only bounds a hang
	// (a gateway out of descriptors answers nothing until the body
	// timeout cuts the attack, 10 s after it began): 5 s, where a loaded
	// machine took up to 0.8 s.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}}
	ordinary := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	admin := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var worst time.Duration
	for i := range 40 {
		for _, u := range []string{"http://" + s.serving.Public + "/api/items", "http://" + s.serving.Admin + "/healthz"} {
			c := ordinary
			if strings.HasSuffix(u, "/healthz") {
				c = admin
			}
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			req.Header.Set("X-API-Key", "pro-demo-key")
			t0 := time.Now()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("request %d to %s during the attack: %v", i, u, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d to %s during the attack: %d", i, u, resp.StatusCode)
			}
			worst = max(worst, time.Since(t0))
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Logf("4,000 slow connections attempted: %d refused while connecting, the rest accepted and then either held or closed at once; the gateway had %d files open (cap %d); slowest ordinary request or /healthz %v",
		refused, openFDs(), s.serving.MaxConns, worst.Round(time.Millisecond))
	for _, c := range held {
		c.Close()
	}
	s.stop(t)
}
