package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/internal/redistest"
)

// argsEnv makes this test binary run tollgate with the arguments it holds
// (a JSON list) instead of its tests.
const argsEnv = "TOLLGATE_TEST_ARGS"

func init() {
	if a := os.Getenv(argsEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			fmt.Fprintln(os.Stderr, argsEnv+":", err)
			os.Exit(2)
		}
		os.Exit(run(args, os.Stdin, os.Stdout, os.Stderr))
	}
}

// proc is a tollgate process: this test binary running one command.
type proc struct {
	args []string
	cmd  *exec.Cmd
	line chan string   // its output (stdout and stderr), a line at a time, the first 1,000
	done chan struct{} // closed once it exited
	err  error         // its exit, once done

	mu  sync.Mutex
	out strings.Builder // its output so far
}

// startTollgate runs `tollgate args...` with env added to the
// environment, until the test ends.
func startTollgate(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	a, _ := json.Marshal(args)
	p := &proc{args: args, cmd: exec.Command(os.Args[0], "-test.run=^$"), line: make(chan string, 1000), done: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), env...), argsEnv+"="+string(a))
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default: // nobody reads them: they are only kept
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// output is what p printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startWait is how long a process may take to start or stop: it bounds a
// hang (starting takes well under a second on a loaded machine).
const startWait = 10 * time.Second

// waitLine waits for the first line of p's that match accepts, failing
// the test if p exits first.
func (p *proc) waitLine(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	timeout := time.After(startWait)
	for {
		select {
		case l := <-p.line:
			if match(l) {
				return l
			}
		case <-p.done:
			t.Fatalf("tollgate %v exited (%v) before %s:\n%s", p.args, p.err, what, p.output())
		case <-timeout:
			t.Fatalf("tollgate %v: no %s within %v:\n%s", p.args, what, startWait, p.output())
		}
	}
}

// serving waits for a gateway's "serving" log line.
func (p *proc) serving(t *testing.T) logLine {
	t.Helper()
	var l logLine
	p.waitLine(t, "serving", func(s string) bool { return json.Unmarshal([]byte(s), &l) == nil && l.Msg == "serving" })
	return l
}

// exit waits for p to exit by itself and returns its error.
func (p *proc) exit(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(startWait):
		t.Fatalf("tollgate %v still running after %v:\n%s", p.args, startWait, p.output())
		return nil
	}
}

// stop sends SIGTERM and fails the test unless p exits cleanly.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.exit(t); err != nil {
		t.Errorf("tollgate %v after SIGTERM: %v:\n%s", p.args, err, p.output())
	}
}

// copyPolicy writes the policy of the repository's file name (the
// policy.yaml a ConfigMap holds, if it is one) to a file of the test's,
// with the edits applied: pairs of text to find (which must be there)
// and text to put in its place. Served there, its state file is the
// test's too.
func copyPolicy(t *testing.T, name string, edits ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err == nil && cm.Kind == "ConfigMap" {
		b = []byte(cm.Data["policy.yaml"])
	}
	s := string(b)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("%s no longer holds %q; update the test", name, edits[i])
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	file := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// shippedPolicies are the policies under examples/ and deploy/: YAML
// files with a version and plans (a ConfigMap's indented).
func shippedPolicies(t *testing.T) []string {
	t.Helper()
	version, plans := regexp.MustCompile(`(?m)^\s*version:`), regexp.MustCompile(`(?m)^\s*plans:`)
	var found []string
	for _, dir := range []string{"examples", "deploy"} {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			b, err := os.ReadFile(path)
			if err == nil && version.Match(b) && plans.Match(b) {
				rel, _ := filepath.Rel(filepath.Join("..", ".."), path)
				found = append(found, filepath.ToSlash(rel))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return found
}

// A shippedPolicy is a policy file of the repository, how to serve it,
// and why it must serve so.
type shippedPolicy struct {
	file    string
	env     []string // what the file's secret_env and admin_token_env name
	redis   bool     // its store is Redis: serve it on a real one
	refusal string   // serve's refusal; "" if it must serve
	check   []string // check's flags
	jwks    bool     // its jwks_url is dev-jwks's: serve one, on a free port
	reason  string
}

// TestShippedPolicies: every policy under examples/ and deploy/ passes
// check without a warning, and serve on it starts and answers ready on
// /readyz; one for the middleware alone passes check --middleware, and
// is refused by serve, saying why.
func TestShippedPolicies(t *testing.T) {
	secrets := []string{"TOLLGATE_SECRET=shipped-policies-test-secret", "TOLLGATE_ADMIN_TOKEN=shipped-policies-test-admin-token-0123456789"}
	cases := []shippedPolicy{
		{file: "examples/quickstart.yaml", reason: "the README's first command: it runs as written, on the memory store"},
		{file: "examples/minimal.yaml", reason: "the README's own policy: one plan, one key, one route"},
		{file: "examples/llm.yaml", reason: "token budgets for LLM APIs: it serves as written (its upstreams are only dialled by requests)"},
		{file: "examples/adaptive.yaml", reason: "an adaptive concurrency limit in shadow: it serves as written"},
		{file: "examples/jwt.yaml", jwks: true, reason: "runs as written too, beside dev-jwks serve: ready once its JWKS is fetched"},
		{file: "examples/middleware.yaml", check: []string{"--middleware"}, refusal: "has no upstream",
			reason: "for the net/http middleware alone: it loads, but the gateway needs upstreams to send requests to"},
		{file: "deploy/policy.yaml", env: secrets, redis: true, reason: "the image's policy: on Redis, with the secrets the deployment provides"},
		{file: "deploy/k8s/configmap.yaml", env: secrets, redis: true, reason: "the ConfigMap's policy.yaml, as Kubernetes mounts it"},
	}
	for _, f := range shippedPolicies(t) {
		if !slices.ContainsFunc(cases, func(c shippedPolicy) bool { return c.file == f }) {
			t.Errorf("%s is a policy this test does not check: add it", f)
		}
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			for _, e := range c.env {
				name, v, _ := strings.Cut(e, "=")
				t.Setenv(name, v)
			}
			var edits []string
			if c.jwks {
				edits = []string{"http://" + devJWKSAddr + devJWKSPath, startDevJWKS(t)}
			}
			file := copyPolicy(t, c.file, edits...)
			var out, errb bytes.Buffer
			if code := run(append(append([]string{"check"}, c.check...), file), nil, &out, &errb); code != 0 || errb.Len() != 0 {
				t.Fatalf("%s: check: exit %d, want 0 with nothing on stderr: %s", c.reason, code, errb.String())
			}
			args := []string{"serve", "--config", file, "--listen", "127.0.0.1:0", "--admin", "127.0.0.2:0"}
			if c.redis {
				args = append(args, "--redis", "redis://"+redistest.Start(t).Addr+"/0")
			}
			gw := startTollgate(t, c.env, args...)
			if c.refusal != "" {
				if err := gw.exit(t); err == nil || !strings.Contains(gw.output(), c.refusal) {
					t.Fatalf("%s: serve exited with %v, want an error saying %q:\n%s", c.reason, err, c.refusal, gw.output())
				}
				return
			}
			s := gw.serving(t)
			if status, body := awaitReady(t, s.Admin); status != "ready" {
				t.Fatalf("%s: /readyz still answers %s after %v, want ready:\n%s", c.reason, body, startWait, gw.output())
			}
			gw.stop(t)
		})
	}
}

// startDevJWKS starts dev-jwks serve (with args) on a free port, until
// the test ends, and returns its JWKS's URL.
func startDevJWKS(t *testing.T, args ...string) string {
	t.Helper()
	if len(args) == 0 {
		args = []string{"--key", filepath.Join(t.TempDir(), "key.json")}
	}
	jwks := startTollgate(t, nil, append([]string{"dev-jwks", "serve", "--listen", "127.0.0.1:0"}, args...)...)
	const at = "development JWKS at "
	line := jwks.waitLine(t, "the JWKS's address", func(l string) bool { return strings.HasPrefix(l, at) })
	url, _, _ := strings.Cut(strings.TrimPrefix(line, at), " ")
	t.Cleanup(func() { jwks.stop(t) }) // it stops cleanly on SIGTERM
	return url
}

// awaitReady asks the gateway's admin listener /readyz until it answers
// ready, or for startWait (the store may still be connecting: then it is
// degraded), and returns its last status and body.
func awaitReady(t *testing.T, admin string) (status, body string) {
	t.Helper()
	for deadline := time.Now().Add(startWait); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ready struct{ Status string }
		if resp.StatusCode != 200 || json.Unmarshal(b, &ready) != nil {
			t.Fatalf("/readyz: %d %s", resp.StatusCode, b)
		}
		if ready.Status == "ready" || time.Now().After(deadline) {
			return ready.Status, string(b)
		}
	}
}

// TestJWTExampleWithDevJWKS: the README's commands for examples/jwt.yaml,
// run as the binary runs them. dev-jwks serve publishes a key file's key,
// dev-jwks token signs with it, and the gateway on examples/jwt.yaml (its
// jwks_url, issuer and audience dev-jwks's defaults; only the JWKS's port
// is the test's) serves that token on the plan of its claim and refuses
// those it cannot trust.
func TestJWTExampleWithDevJWKS(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key.json")
	url := startDevJWKS(t, "--key", key)

	mint := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"dev-jwks", "token"}, args...), nil, &out, &errb); code != 0 {
			t.Fatalf("dev-jwks token %v: exit %d: %s", args, code, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	cfg := copyPolicy(t, "examples/jwt.yaml", "http://"+devJWKSAddr+devJWKSPath, url)
	gw := startTollgate(t, nil, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--admin", "127.0.0.2:0")
	s := gw.serving(t)

	for _, c := range []struct {
		token  string // "" for none
		status int
		policy string // in RateLimit-Policy
		reason string
	}{
		{mint("--key", key, "--sub", "alice", "--plan", "pro", "--claim", "org=acme"), 200, `"pro.minute";q=1000`,
			"signed with the key dev-jwks serve publishes: the pro plan its claim names"},
		{mint("--key", key, "--sub", "bob"), 200, `"free.minute";q=100`, "a token naming no plan: the user plan, free"},
		{"", 200, `"anonymous";q=20`, "no token is not a refusal in this example: the anonymous plan, per client IP"},
		{mint("--key", filepath.Join(dir, "other.json"), "--sub", "alice", "--plan", "pro"), 401, "",
			"signed with a key the JWKS does not publish"},
		{mint("--key", key, "--sub", "alice", "--aud", "another-api"), 401, "", "for another audience"},
		{mint("--key", key, "--sub", "alice", "--iss", "https://idp.example.com/"), 401, "", "from another issuer"},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Public+"/api/items", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(resp.Header.Get("RateLimit-Policy"), c.policy) {
			t.Errorf("%s: %d, RateLimit-Policy %q; want %d and %q: %s", c.reason, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), c.status, c.policy, body)
		}
	}
	gw.stop(t)
}
