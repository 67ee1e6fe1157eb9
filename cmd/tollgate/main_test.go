package main

import (
	"bytes"
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
