package reference_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/internal/reference"
	"github.com/tollgate/tollgate/policy"
)

const root = "../.."

// TestGeneratedFilesCurrent: the schema and the reference in the tree are
// what the policy's types and comments make; `go generate ./policy`
// writes them again.
func TestGeneratedFilesCurrent(t *testing.T) {
	schema, md, err := reference.Generate(filepath.Join(root, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{reference.SchemaFile: schema, reference.MarkdownFile: md} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./policy", path)
		}
	}
	if !bytes.Equal(policy.Schema, schema) {
		t.Error("policy.Schema is not policy/schema.json")
	}
}

// compiled returns the schema compiled by a real JSON Schema validator.
func compiled(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(policy.Schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(reference.SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(reference.SchemaID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// instance is a YAML policy as the validator reads JSON.
func instance(t *testing.T, text []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(text, &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// policyFiles are the policies shipped in examples/ and deploy/: the YAML
// files there that the policy package loads.
func policyFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"examples/*.yaml", "deploy/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "\nroutes:") {
				files = append(files, f)
			}
		}
	}
	if len(files) < 4 {
		t.Fatalf("found %d policies in examples/ and deploy/: %v", len(files), files)
	}
	return files
}

// TestShippedPoliciesMatchSchema: every policy in examples/ and deploy/
// is valid under the schema, as an editor checks it.
func TestShippedPoliciesMatchSchema(t *testing.T) {
	s := compiled(t)
	for _, f := range policyFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(instance(t, b)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		ref, ok := strings.CutPrefix(first, "# yaml-language-server: $schema=")
		if !ok {
			t.Errorf("%s does not begin with # yaml-language-server: $schema=…", f)
			continue
		}
		if got, err := os.ReadFile(filepath.Join(filepath.Dir(f), ref)); err != nil || !bytes.Equal(got, policy.Schema) {
			t.Errorf("%s names %s as its schema, which is not policy/schema.json (%v)", f, ref, err)
		}
	}
}

// TestSchemaRefuses: the schema refuses what the policy package refuses
// as written, so that an editor says it where the file is.
func TestSchemaRefuses(t *testing.T) {
	s := compiled(t)
	base, err := os.ReadFile(filepath.Join(root, "examples/quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, find, replace, why string }{
		{"unknown key", "  free:\n", "  free:\n    perod: 1m\n", "a misspelt key is no key of a plan"},
		{"wrong type", "    cost: 10\n", "    cost: lots\n", "a cost is an integer"},
		{"bad duration", "timeout: ", "timeout: soon #", "a duration is a Go duration or days"},
		{"unknown top-level", "version:", "verison: x\nversion:", "a top-level key must be one of the file's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := string(base)
			if !strings.Contains(text, c.find) {
				t.Fatalf("examples/quickstart.yaml no longer holds %q; update the test", c.find)
			}
			text = strings.Replace(text, c.find, c.replace, 1)
			if err := s.Validate(instance(t, []byte(text))); err == nil {
				t.Errorf("accepted (%s)", c.why)
			}
			if _, err := policy.Parse([]byte(text), "x.yaml"); err == nil {
				t.Errorf("the policy package accepts what the schema refuses (%s)", c.why)
			}
		})
	}
}
