package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The client address of the tests that go through nginx or Caddy: not
// 127.0.0.1, the proxies' own address, which Tollgate trusts.
var clientAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}

// proxyClient talks to a proxy from clientAddr.
var proxyClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	DialContext:         (&net.Dialer{LocalAddr: clientAddr, Timeout: 5 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 16,
}}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// example reads examples/<file> and puts the test's addresses in place of
// the example's, each of which must be there (so a changed example fails
// loudly, not silently untested).
func example(t *testing.T, file string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("examples/%s no longer holds %q; update the test", file, replace[i])
		}
		s = strings.ReplaceAll(s, replace[i], replace[i+1])
	}
	return s
}

// proxyBinary finds a proxy's executable, failing (never skipping) the
// test when it is missing: .ci/run installs Debian's package.
func proxyBinary(t *testing.T, name, debian string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); fileExists(p) {
		return p
	}
	t.Fatalf("%s is missing: install Debian's %s package (.ci/run and make test do)", name, debian)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// runProxy starts cmd in its own process group, waits until addr accepts
// connections, and kills the group when the test ends. logs names the
// files whose content a failure shows.
func runProxy(t *testing.T, cmd *exec.Cmd, addr string, logs ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// The whole group: nginx's workers too.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out.String())
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, b)
			}
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited: %s", filepath.Base(cmd.Path), out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened on %s: %v", filepath.Base(cmd.Path), addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startNginx runs examples/nginx/nginx.conf in front of upstream, asking
// the gateway at tollgate (host:port), and returns its URL. It runs
// unprivileged in a temporary prefix (pid, logs, temporary files).
func startNginx(t *testing.T, tollgate, upstream string) string {
	t.Helper()
	bin := proxyBinary(t, "nginx", "nginx")
	dir := t.TempDir()
	addr := freeAddr(t)
	conf := example(t, "nginx/nginx.conf",
		"127.0.0.1:8080", tollgate, "127.0.0.1:9000", upstream, "listen 127.0.0.1:8000", "listen "+addr)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, exec.Command(bin, "-p", dir, "-c", path), addr, filepath.Join(dir, "error.log"))
	return "http://" + addr
}

// startCaddy runs examples/caddy/Caddyfile in front of upstream, asking
// the gateway at tollgate, and returns its URL.
func startCaddy(t *testing.T, tollgate, upstream string) string {
	t.Helper()
	bin := proxyBinary(t, "caddy", "caddy")
	dir := t.TempDir()
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	conf := example(t, "caddy/Caddyfile",
		"127.0.0.1:8080", tollgate, "127.0.0.1:9000", upstream, "\n:8000 {", "\n:"+port+" {")
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	runProxy(t, cmd, addr)
	return "http://" + addr
}

// proxyGet sends a request to a proxy from clientAddr.
func proxyGet(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := proxyClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
	return resp, b.Bytes()
}

// rawRequest sends a request line and headers as written, from
// clientAddr, and returns the response's status and headers.
func rawRequest(t *testing.T, addr, line string, header ...string) (int, http.Header) {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: clientAddr, Timeout: 5 * time.Second}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := line + "\r\nHost: " + addr + "\r\nConnection: close\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}
