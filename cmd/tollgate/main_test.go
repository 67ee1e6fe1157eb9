package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckQuickstart(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check", "../../examples/quickstart.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"OK", "free", "sliding_log 100/1m0s", "/api/export", "cost 10", "fail_closed",
		"connections: 256 per client address, from the file limit in all, 64 admin; timeouts: header 10s, body 10s, idle 2m0s, send 1m0s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCheckBadFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(f, []byte("version: v1\nplans:\n  free: {rate: -3, period: 1m}\n"), 0o600)
	var out, errb bytes.Buffer
	if code := run([]string{"check", f}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "bad.yaml:3:") {
		t.Errorf("error lacks file:line:\n%s", errb.String())
	}
}

func TestHashKey(t *testing.T) {
	var out, errb bytes.Buffer
	run([]string{"hash-key", "free-demo-key"}, &out, &errb)
	if got := strings.TrimSpace(out.String()); got != "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb" {
		t.Fatalf("hash-key = %q", got)
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("no args: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"serve"}, &out, &errb); code != 2 {
		t.Fatalf("serve without --config: exit %d", code)
	}
}

// trustAll is a valid policy that trusts every IPv4 peer as a proxy.
const trustAll = `version: v1
listeners: {public: "PUBLIC", admin: "127.0.0.1:0"}
identity:
  anonymous_plan: free
  trusted_proxies: ["0.0.0.0/1", "128.0.0.0/1"]
plans:
  free: {rate: 100, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
`

// TestCheckWarns: a policy that trusts every address loads, so check
// exits 0, but says so on stderr with the line of trusted_proxies.
func TestCheckWarns(t *testing.T) {
	f := filepath.Join(t.TempDir(), "trust.yaml")
	os.WriteFile(f, []byte(strings.Replace(trustAll, "PUBLIC", "127.0.0.1:8080", 1)), 0o600)
	var out, errb bytes.Buffer
	if code := run([]string{"check", f}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "warning: " + f + ":5: identity.trusted_proxies: trusts every IPv4 address"; !strings.Contains(errb.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errb.String())
	}
	if !strings.Contains(out.String(), "OK, 1 warning") {
		t.Errorf("stdout does not count the warning:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"check", "../../examples/quickstart.yaml"}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Errorf("quickstart: exit %d, stderr %q", code, errb.String())
	}
}

// TestCheckRefusesUnmatchablePath: a route path no cleaned request path
// can equal is an error at its line.
func TestCheckRefusesUnmatchablePath(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.yaml")
	src := strings.Replace(trustAll, "PUBLIC", "127.0.0.1:8080", 1) + "  - {name: export, path: /api/../export, upstream: builtin:echo}\n"
	os.WriteFile(f, []byte(src), 0o600)
	var out, errb bytes.Buffer
	if code := run([]string{"check", f}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if want := f + `:10: routes[1].path: "/api/../export" is not a clean path`; !strings.Contains(errb.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errb.String())
	}
}

// TestServeLogsWarnings: serve logs the policy's warnings as it starts
// (here it then fails, the public address being taken).
func TestServeLogsWarnings(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	f := filepath.Join(t.TempDir(), "trust.yaml")
	os.WriteFile(f, []byte(strings.Replace(trustAll, "PUBLIC", taken.Addr().String(), 1)), 0o600)
	var errb bytes.Buffer
	if code := serve([]string{"--config", f}, &errb); code != 1 {
		t.Fatalf("exit %d, want 1 (address in use): %s", code, errb.String())
	}
	var logged bool
	for _, line := range strings.Split(errb.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["level"] == "WARN" && strings.Contains(fmt.Sprint(rec["warning"]), "trusts every IPv4 address") &&
			rec["file"] == f && rec["line"] == 5.0 && rec["path"] == "identity.trusted_proxies" {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no WARN record for trusted_proxies:\n%s", errb.String())
	}
}
