package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

func TestCheckQuickstart(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check", "../../examples/quickstart.yaml"}, nil, &out, &errb); code != 0 {
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
	if code := run([]string{"check", f}, nil, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "bad.yaml:3:") {
		t.Errorf("error lacks file:line:\n%s", errb.String())
	}
}

// TestSchema: tollgate schema prints policy.Schema, valid JSON, and
// nothing else.
func TestSchema(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"schema"}, nil, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if !bytes.Equal(out.Bytes(), policy.Schema) {
		t.Errorf("stdout is not policy.Schema:\n%s", out.String())
	}
	if !json.Valid(out.Bytes()) {
		t.Errorf("stdout is not valid JSON:\n%s", out.String())
	}
}

func TestHashKey(t *testing.T) {
	var out, errb bytes.Buffer
	run([]string{"hash-key", "free-demo-key"}, nil, &out, &errb)
	if got := strings.TrimSpace(out.String()); got != "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb" {
		t.Fatalf("hash-key = %q", got)
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("no args: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"serve"}, nil, &out, &errb); code != 2 {
		t.Fatalf("serve without --config: exit %d", code)
	}
	errb.Reset()
	if code := run([]string{"serve", "--config", "x.yaml", "--simulate-budget", "0s"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--simulate-budget") {
		t.Fatalf("serve with no replay budget: exit %d, %q", code, errb.String())
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
	if code := run([]string{"check", f}, nil, &out, &errb); code != 0 {
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
	if code := run([]string{"check", "../../examples/quickstart.yaml"}, nil, &out, &errb); code != 0 || errb.Len() != 0 {
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
	if code := run([]string{"check", f}, nil, &out, &errb); code != 1 {
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
	if code := serve([]string{"--config", f}, io.Discard, &errb); code != 1 {
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

// TestHelp: every command prints its usage with -h or --help, to
// standard output, and exits 0; a bad flag exits 2.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"serve", "--help"}, {"serve", "-h"}, {"check", "--help"},
		{"hash-key", "--help"}, {"version", "--help"}} {
		var out, errb bytes.Buffer
		if code := run(args, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"check", "--bogus"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Errorf("bad flag: exit %d, stderr %q", code, errb.String())
	}
}

// TestVersion prints the version and the Go it was built with.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "tollgate dev, commit ") ||
		!strings.Contains(out.String(), runtime.Version()) {
		t.Fatalf("exit %d: %q %q", code, out.String(), errb.String())
	}
}

// TestReleaseVersion: the version reported is the one set at build time,
// else the module's from the build information when it is a version,
// else dev; the commit is the VCS revision, marked when modified.
func TestReleaseVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "c197ef9ca010"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		override string
		bi       *debug.BuildInfo
		version  string
		commit   string
		reason   string
	}{
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", "unknown", "go install ...@v1.2.3 sets the module's version, and no VCS information"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261203092606-c197ef9ca010"}}, "v0.0.0-20261203092606-c197ef9ca010", "unknown",
			"go install ...@latest of an untagged commit sets a pseudo-version: a version all the same"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3+dirty"}, Settings: vcs}, "v1.2.3+dirty", "c197ef9ca010 (modified)",
			"a build from a modified checkout of a tag says so"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs[:1]}, "dev", "c197ef9ca010", "go build without VCS stamping: (devel) is no version"},
		{"", &debug.BuildInfo{}, "dev", "unknown", "a test binary has no module version"},
		{"", nil, "dev", "unknown", "a binary without build information"},
		{"v9.9.9", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v9.9.9", "unknown", "-ldflags -X main.version overrides the module's version"},
	} {
		if got := releaseVersion(c.override, c.bi); got != c.version {
			t.Errorf("%s: version %q, want %q", c.reason, got, c.version)
		}
		if got := buildRevision(c.bi); got != c.commit {
			t.Errorf("%s: commit %q, want %q", c.reason, got, c.commit)
		}
	}
}

// TestHashKeyFromStdin: without an argument the key is read from standard
// input (so it stays out of shell history), giving the same digest.
func TestHashKeyFromStdin(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"hash-key"}, strings.NewReader("free-demo-key\n"), &out, &errb); code != 0 ||
		strings.TrimSpace(out.String()) != "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb" {
		t.Fatalf("exit %d: %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"hash-key"}, strings.NewReader(""), &out, &errb); code != 2 || out.Len() != 0 {
		t.Fatalf("empty standard input: exit %d, %q", code, out.String())
	}
}

// TestServeListenOverride: --listen and --admin replace the file's
// addresses, are checked as the file's are (an admin listener off
// loopback needs a token), and TOLLGATE_CONFIG names the file.
func TestServeListenOverride(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	f := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(f, []byte(strings.Replace(trustAll, "PUBLIC", "127.0.0.1:0", 1)), 0o600)
	var errb bytes.Buffer
	// The overriding address is taken: serve fails binding it, so it used it.
	if code := serve([]string{"--config", f, "--listen", taken.Addr().String()}, io.Discard, &errb); code != 1 || !strings.Contains(errb.String(), "address already in use") {
		t.Fatalf("--listen on a taken address: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := serve([]string{"--config", f, "--admin", "0.0.0.0:9999"}, io.Discard, &errb); code != 1 || !strings.Contains(errb.String(), "not loopback") {
		t.Fatalf("--admin off loopback without a token: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	t.Setenv("TOLLGATE_CONFIG", f)
	if code := serve([]string{"--listen", taken.Addr().String()}, io.Discard, &errb); code != 1 || !strings.Contains(errb.String(), "address already in use") {
		t.Fatalf("TOLLGATE_CONFIG: exit %d: %s", code, errb.String())
	}
}

// gatewayBase is a policy serve serves: on PUBLIC, with an upstream and
// an identity secret.
const gatewayBase = `version: v1
listeners: {public: "PUBLIC", admin: "127.0.0.2:0"}
identity: {anonymous_plan: free, secret: "0123456789abcdef0123"}
plans:
  free: {rate: 100, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
`

// TestCheckRefusesWhatServeRefuses: check, with serve's flags, exits 1
// with every reason serve would refuse the policy, and serve refuses it
// saying the same; what check passes, serve starts with (it gets as far
// as binding PUBLIC, taken here).
func TestCheckRefusesWhatServeRefuses(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	middleware, err := os.ReadFile("../../examples/middleware.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		policy string   // PUBLIC is the taken address
		state  string   // the runtime state file's content, if any
		flags  []string // serve's, which check takes too
		code   int      // check's exit code
		msgs   []string // in check's stderr and serve's; FILE is the policy file
		reason string
	}{
		{"gateway", gatewayBase, "", nil, 0, nil, "a policy for the gateway: both take it"},
		{"middleware", string(middleware), "", nil, 1, []string{
			"FILE: listeners.public: no public listener",
			fmt.Sprintf("FILE:%d: routes[0].upstream: route export has no upstream", lineOf(t, middleware, "name: export")),
			fmt.Sprintf("FILE:%d: routes[1].upstream: route api has no upstream", lineOf(t, middleware, "name: api")),
		}, "a policy for the middleware alone: every reason at its line, not only the first"},
		{"middleware listening", string(middleware), "", []string{"--listen", "PUBLIC"}, 1, []string{
			fmt.Sprintf("FILE:%d: routes[0].upstream: route export has no upstream", lineOf(t, middleware, "name: export")),
		}, "--listen gives it a listener, not upstreams"},
		{"no listener", strings.Replace(gatewayBase, `public: "PUBLIC", `, "", 1), "", nil, 1, []string{
			"FILE: listeners.public: no public listener: the gateway needs one (set it, or pass --listen)",
		}, "the gateway needs a public listener"},
		{"listen flag", strings.Replace(gatewayBase, `public: "PUBLIC", `, "", 1), "", []string{"--listen", "PUBLIC"}, 0, nil,
			"--listen is the public listener, for check as for serve"},
		{"invalid", strings.Replace(gatewayBase, "rate: 100", "rate: -3", 1), "", nil, 1, []string{
			"FILE:5: plans.free: invalid limit: rate must be at least 1, got -3",
		}, "what the policy package refuses"},
		{"admin off loopback", gatewayBase, "", []string{"--admin", "0.0.0.0:9999"}, 1, []string{
			"listeners.admin: the admin listener on 0.0.0.0:9999 is not loopback",
		}, "--admin is checked as the file's address is"},
		{"bad redis", gatewayBase, "", []string{"--redis", "bogus://x"}, 1, []string{
			`--redis: parsing redis url: unknown scheme "bogus"`,
		}, "a Redis URL the store cannot open"},
		{"redis without secret", strings.Replace(gatewayBase, `, secret: "0123456789abcdef0123"`, "", 1), "", []string{"--redis", "redis://127.0.0.1:1"}, 1, []string{
			"--redis: a shared Redis store needs identity.secret",
		}, "instances sharing a store must hash subjects alike"},
		{"redis sentinel", strings.Replace(gatewayBase, "identity:", "store: {mode: sentinel}\nidentity:", 1), "", []string{"--redis", "redis://127.0.0.1:1"}, 1, []string{
			"--redis: the policy's store.mode sentinel needs ?master_set=<name> in the url",
		}, "the gateway cannot open a sentinel store without its master set"},
		{"bad state", gatewayBase, "{", nil, 1, []string{
			"creating gateway: reading the runtime state FILE.state.json: unexpected end of JSON input",
		}, "the gateway refuses a runtime state it cannot read, which check reads without connecting anywhere"},
		{"state flag", gatewayBase, "{", []string{"--state", "STATE"}, 1, []string{
			"creating gateway: reading the runtime state STATE: unexpected end of JSON input",
		}, "--state names the state file, for check as for serve"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "p.yaml")
			state := f + ".state.json"
			os.WriteFile(f, []byte(strings.ReplaceAll(c.policy, "PUBLIC", taken.Addr().String())), 0o600)
			if c.state != "" {
				os.WriteFile(state, []byte(c.state), 0o600)
			}
			subst := strings.NewReplacer("PUBLIC", taken.Addr().String(), "STATE", state, "FILE", f)
			flags := make([]string, len(c.flags))
			for i, fl := range c.flags {
				flags[i] = subst.Replace(fl)
			}
			var out, errb bytes.Buffer
			code := run(append(append([]string{"check"}, flags...), f), nil, &out, &errb)
			if code != c.code {
				t.Errorf("%s: check exits %d, want %d: %s", c.reason, code, c.code, errb.String())
			}
			var serveErr bytes.Buffer
			if code := serve(append([]string{"--config", f}, flags...), io.Discard, &serveErr); code != 1 {
				t.Fatalf("%s: serve exits %d, want 1: %s", c.reason, code, serveErr.String())
			}
			if c.code == 0 && !strings.Contains(serveErr.String(), "address already in use") {
				t.Errorf("%s: check passes what serve refuses before it listens: %s", c.reason, serveErr.String())
			}
			for _, m := range c.msgs {
				m = subst.Replace(m)
				if !strings.Contains(errb.String(), m) {
					t.Errorf("%s: check's stderr lacks %q:\n%s", c.reason, m, errb.String())
				}
				if !strings.Contains(serveErr.String(), m) {
					t.Errorf("%s: serve's stderr lacks %q:\n%s", c.reason, m, serveErr.String())
				}
			}
		})
	}
}

// TestCheckMiddleware: check --middleware checks a file for the
// middleware alone, which needs no listener and no upstream, and takes
// none of serve's flags.
func TestCheckMiddleware(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		out    string // in stdout, or stderr if the exit is not 0
		reason string
	}{
		{[]string{"--middleware", "../../examples/middleware.yaml"}, 0, "policy app-1 (../../examples/middleware.yaml): OK",
			"a policy for the middleware: no listener, no upstreams"},
		{[]string{"--middleware", "../../examples/quickstart.yaml"}, 0, "policy quickstart-1", "a gateway's policy is the middleware's too"},
		{[]string{"--middleware", "testdata/nonexistent.yaml"}, 1, "no such file", "the file is still loaded and checked"},
		{[]string{"--middleware", "--listen", "127.0.0.1:8080", "../../examples/middleware.yaml"}, 2,
			"--middleware checks the file for the middleware alone: it takes none of serve's flags", "a listener is serve's, not the middleware's"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"check"}, c.args...), nil, &out, &errb)
		got := out.String()
		if c.code != 0 {
			got = errb.String()
		}
		if code != c.code || !strings.Contains(got, c.out) {
			t.Errorf("%v (%s): exit %d, want %d; output lacks %q:\n%s%s", c.args, c.reason, code, c.code, c.out, out.String(), errb.String())
		}
	}
}

// TestCheckJWTExample: the JWT example loads, and check says how tokens
// are verified, what each route matches and what its limit counts per.
func TestCheckJWTExample(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check", "../../examples/jwt.yaml"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"bearer JWTs: keys from http://127.0.0.1:8088/.well-known/jwks.json (refreshed every 15m0s, at most every 30s); algorithms RS256, ES256, EdDSA; clock skew 30s; issuer tollgate-dev-jwks; audience tollgate-api; subject from claim sub, tenant from org, plan from plan",
		"/api/users/{id}/export", "plan limit + own limit fixed_window 3/1m0s per subject + path:id", "refused with 503 and its own application/json body",
		"/api/reports/* [header X-Org present]", "plan limit + own limit fixed_window 30/1h0m0s per subject + header:X-Org",
		"per subject + claim:org", "/* [host admin.example.com]", "internal     unlimited (counted)",
		"allowlist (counted, never refused by a rate limit): 0 key(s), 1 user(s), 0 tenant(s), addresses [10.20.0.0/16]",
		"fixed_window 20000/168h0m0s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
}

// lineOf returns the number of the first line of text that holds s.
func lineOf(t *testing.T, text []byte, s string) int {
	t.Helper()
	for i, line := range strings.Split(string(text), "\n") {
		if strings.Contains(line, s) {
			return i + 1
		}
	}
	t.Fatalf("no line holds %q", s)
	return 0
}
