package policy_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// noSecret is a policy that sets no identity secret and reads its admin
// token from the environment.
const noSecret = `version: v1
listeners: {public: "127.0.0.1:8080", admin: "0.0.0.0:9090", admin_token_env: TOLLGATE_TEST_ADMIN_TOKEN}
identity: {anonymous_plan: free}
plans:
  free: {rate: 100, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
`

// TestGeneratedSecretPerProcess: a file without a secret gets a random one
// per process, as Policy.Secret says, not per load: reloading the same
// file must not rename every subject (and so forget every budget).
func TestGeneratedSecretPerProcess(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_ADMIN_TOKEN", "0123456789abcdef")
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(noSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := policy.Parse([]byte(noSecret), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !a.SecretGenerated || len(a.Secret) < 16 {
		t.Fatalf("generated secret: %v %x", a.SecretGenerated, a.Secret)
	}
	if !bytes.Equal(a.Secret, b.Secret) || !bytes.Equal(a.Secret, c.Secret) {
		t.Fatalf("one process, three secrets: %x %x %x", a.Secret, b.Secret, c.Secret)
	}
}

// TestCompileReadsOnlyItsEnv: ParseEnv takes the environment variables and
// the generated secret from its Env, never from the process, so the same
// file and Env compile to the same policy.
func TestCompileReadsOnlyItsEnv(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_ADMIN_TOKEN", "the process's token, not the Env's")
	t.Setenv("TOLLGATE_TEST_SECRET", "the process's secret, not the Env's")
	env := policy.Env{
		Vars:   map[string]string{"TOLLGATE_TEST_ADMIN_TOKEN": "token-from-the-env-0123", "TOLLGATE_TEST_SECRET": "secret-from-the-env-0123"},
		Secret: []byte("generated-secret-0123456789abcdef"),
	}
	for range 2 {
		p, err := policy.ParseEnv([]byte(noSecret), "p.yaml", env)
		if err != nil {
			t.Fatal(err)
		}
		if p.AdminToken != "token-from-the-env-0123" || string(p.Secret) != "generated-secret-0123456789abcdef" || !p.SecretGenerated {
			t.Fatalf("admin token %q, secret %q (generated: %v)", p.AdminToken, p.Secret, p.SecretGenerated)
		}
		src := strings.Replace(noSecret, "identity: {", "identity: {secret_env: TOLLGATE_TEST_SECRET, ", 1)
		if p, err = policy.ParseEnv([]byte(src), "p.yaml", env); err != nil {
			t.Fatal(err)
		}
		if string(p.Secret) != "secret-from-the-env-0123" || p.SecretGenerated {
			t.Fatalf("secret_env: secret %q (generated: %v)", p.Secret, p.SecretGenerated)
		}
	}
	// Variables the Env lacks are unset, whatever the process holds.
	_, err := policy.ParseEnv([]byte(noSecret), "p.yaml", policy.Env{Secret: env.Secret})
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_TEST_ADMIN_TOKEN must hold a token") {
		t.Fatalf("admin token from an Env without it: %v", err)
	}
	// No secret in the file and none given to generate: a clear error.
	_, err = policy.ParseEnv([]byte(noSecret), "p.yaml", policy.Env{Vars: env.Vars})
	if err == nil || !strings.Contains(err.Error(), "identity") {
		t.Fatalf("no secret at all: %v", err)
	}
}

// TestNoFilesOpensNoFile: with Env.NoFiles a keys_file is not opened (a
// path that does not exist compiles, with a warning), and the policy's
// keys are the ones it lists.
func TestNoFilesOpensNoFile(t *testing.T) {
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data := append([]byte("keys_file: /nonexistent/keys.yaml\n"), b...)
	env := policy.ProcessEnv()
	if _, err := policy.ParseEnv(data, "candidate", env); err == nil {
		t.Fatal("a missing keys_file compiled without NoFiles")
	}
	env.NoFiles = true
	p, err := policy.ParseEnv(data, "candidate", env)
	if err != nil {
		t.Fatal(err)
	}
	if p.KeysPath != "" || len(p.Warnings) == 0 || !strings.Contains(p.Warnings[len(p.Warnings)-1].String(), "keys_file") {
		t.Errorf("keys path %q, warnings %v", p.KeysPath, p.Warnings)
	}
}

// TestBlindEnvTellsNothing: /simulate compiles policy text from a
// request; its errors told whether a variable of the process was set
// and how long its value was ("must hold at least 32 bytes"). With
// Env.Blind, a candidate naming a variable set long, set short or unset
// compiles alike, and fails alike for a reason of its own.
func TestBlindEnvTellsNothing(t *testing.T) {
	vars := map[string]string{"LONG": strings.Repeat("s", 40), "SHORT": "abc"}
	var outcomes []string
	for _, name := range []string{"LONG", "SHORT", "UNSET"} {
		src := strings.Replace(noSecret, "identity: {", "identity: {secret_env: "+name+", ", 1)
		src = strings.ReplaceAll(src, "TOLLGATE_TEST_ADMIN_TOKEN", name)
		for _, broken := range []bool{false, true} {
			s := src
			if broken {
				s += "tenants:\n  acme: {plan: gold}\n"
			}
			_, err := policy.ParseEnv([]byte(s), "p.yaml", policy.Env{Vars: vars, Secret: []byte("generated-secret-0123456789abcdef"), Blind: true})
			outcomes = append(outcomes, fmt.Sprintf("%v %v", broken, strings.ReplaceAll(fmt.Sprint(err), name, "NAME")))
		}
	}
	if outcomes[0] != "false <nil>" || outcomes[1] == "true <nil>" {
		t.Fatalf("a blind compile: %q", outcomes[:2])
	}
	for i := 2; i < len(outcomes); i++ {
		if outcomes[i] != outcomes[i%2] {
			t.Errorf("a variable set otherwise compiled otherwise: %q, then %q", outcomes[i%2], outcomes[i])
		}
	}
}
