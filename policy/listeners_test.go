package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// withListeners is the valid policy with its listeners written out on
// lines 2-4, then the given settings from line 5.
func withListeners(settings ...string) string {
	head := "version: v1\nlisteners:\n  public: 127.0.0.1:8080\n  admin: 127.0.0.1:9090\n"
	for _, s := range settings {
		head += "  " + s + "\n"
	}
	return strings.Replace(valid, "version: v1\nlisteners: {public: \"127.0.0.1:8080\", admin: \"127.0.0.1:9090\"}\n", head, 1)
}

func TestConnLimitsDefaults(t *testing.T) {
	p, err := policy.Parse([]byte(withListeners()), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := policy.ConnLimits{HeaderTimeout: 10 * time.Second, BodyTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		SendTimeout: time.Minute, MaxConnsPerClient: 256, AdminMaxConns: 64}
	if p.Conns != want {
		t.Fatalf("defaults: %+v, want %+v", p.Conns, want)
	}

	p, err = policy.Parse([]byte(withListeners("body_timeout: 3s", "header_timeout: 2s", "idle_timeout: 30s", "send_timeout: 20s",
		"max_conns_per_client: 10", "max_conns: 1000", "admin_max_conns: 8")), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want = policy.ConnLimits{HeaderTimeout: 2 * time.Second, BodyTimeout: 3 * time.Second, IdleTimeout: 30 * time.Second,
		SendTimeout: 20 * time.Second, MaxConnsPerClient: 10, MaxConns: 1000, AdminMaxConns: 8}
	if p.Conns != want {
		t.Fatalf("set: %+v, want %+v", p.Conns, want)
	}

	// A total cap below the default per-client cap lowers it.
	p, err = policy.Parse([]byte(withListeners("max_conns: 50")), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Conns.MaxConnsPerClient != 50 {
		t.Fatalf("max_conns 50: per client %d, want 50", p.Conns.MaxConnsPerClient)
	}
}

func TestConnLimitsInvalid(t *testing.T) {
	for _, tt := range []struct {
		setting, want string
	}{
		{"body_timeout: 10ms", "p.yaml:5: listeners.body_timeout: want 100ms to 1h, got 10ms"},
		{"body_timeout: -1s", "p.yaml:5: listeners.body_timeout: want 100ms to 1h, got -1s"},
		{"body_timeout: 2h", "p.yaml:5: listeners.body_timeout: want 100ms to 1h, got 2h0m0s"},
		{"header_timeout: 5m", "p.yaml:5: listeners.header_timeout: want 100ms to 1m, got 5m0s"},
		{"idle_timeout: 1ms", "p.yaml:5: listeners.idle_timeout: want 100ms to 1h, got 1ms"},
		{"send_timeout: 1h", "p.yaml:5: listeners.send_timeout: want 100ms to 10m, got 1h0m0s"},
		{"body_timeout: 10", "p.yaml:5: want a duration, got a number `10` (a duration such as 500ms, 30s, 1m, 1h, 7d)"},
		{"max_conns_per_client: -1", "p.yaml:5: listeners.max_conns_per_client: want at least 1 connection, got -1"},
		{"max_conns: -5", "p.yaml:5: listeners.max_conns: want at least 1 connection"},
		{"admin_max_conns: -1", "p.yaml:5: listeners.admin_max_conns: want at least 1 connection, got -1"},
		{"max_conns_per_clients: 5", `p.yaml:5: unknown field "max_conns_per_clients": did you mean "max_conns_per_client"?`},
	} {
		_, err := policy.Parse([]byte(withListeners(tt.setting)), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.setting, err, tt.want)
		}
	}
	_, err := policy.Parse([]byte(withListeners("max_conns: 10", "max_conns_per_client: 20")), "p.yaml")
	if err == nil || !strings.Contains(err.Error(), "p.yaml:6: listeners.max_conns_per_client: 20 per client exceeds max_conns 10") {
		t.Errorf("per client over the total: %v", err)
	}
}
