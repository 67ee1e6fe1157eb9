package main

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// update makes TestCLIReference write the reference instead of
// comparing it (go generate ./cmd/tollgate).
var update = flag.Bool("update", false, "write "+cliFile)

// cliFile is the CLI reference, from this directory.
const cliFile = "../../docs/reference/cli.md"

// TestCLIReference: docs/reference/cli.md is what the commands' flag sets
// and rls's environment make; `go generate ./cmd/tollgate` writes it
// again.
func TestCLIReference(t *testing.T) {
	want := cliReference()
	if *update {
		if err := os.WriteFile(cliFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(cliFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/reference/cli.md is stale: run go generate ./cmd/tollgate")
	}
}

// TestFlagSetsCoverCommands: every command has its flag set in flagSets,
// and so its section in the reference.
func TestFlagSetsCoverCommands(t *testing.T) {
	var names []string
	for _, f := range flagSets {
		name, _, _ := strings.Cut(f().Name(), " ") // dev-jwks serve: a subcommand of dev-jwks
		names = append(names, name)
	}
	for name := range commands {
		if name != "help" && !strings.HasPrefix(name, "-") && !slices.Contains(names, name) {
			t.Errorf("command %s has no flag set in flagSets, so the CLI reference lacks it", name)
		}
	}
	for _, name := range names {
		if commands[name] == nil {
			t.Errorf("flagSets has %s, which is no command (the commands: %v)", name, slices.Sorted(maps.Keys(commands)))
		}
	}
}

// cliReference returns the CLI reference: the usage, then each command's
// usage line and flags (rls's: its environment variables).
func cliReference() []byte {
	var b bytes.Buffer
	b.WriteString("# CLI reference\n\n")
	b.WriteString("<!-- Generated from cmd/tollgate's flag sets and rls's environment (`go generate ./cmd/tollgate`); do not edit. -->\n\n")
	b.WriteString("Every command of `tollgate`, its flags and the environment variables that set them, as `tollgate COMMAND --help` prints them. " +
		"A flag is given as `--name value`, `--name=value` or with one dash; a flag given overrides its environment variable. " +
		"The policy file's keys are in the [configuration reference](configuration.md).\n\n")
	var sets []*flag.FlagSet
	var links []string
	for _, f := range flagSets {
		fs := f()
		sets = append(sets, fs)
		links = append(links, fmt.Sprintf("[%s](#%s)", fs.Name(), fs.Name()))
	}
	fmt.Fprintf(&b, "Commands: %s.\n\n```text\n%s```\n", strings.Join(links, ", "), usage)
	for _, fs := range sets {
		fmt.Fprintf(&b, "\n## %s\n\n`tollgate %s`\n\n", fs.Name(), usageLine(fs))
		if fs.Name() == "rls" {
			writeRLSEnv(&b)
			continue
		}
		writeFlags(&b, fs)
	}
	return b.Bytes()
}

// usageLine is what follows "usage: tollgate " in fs's help.
func usageLine(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.Usage()
	line, _, _ := strings.Cut(b.String(), "\n")
	return strings.TrimPrefix(line, "usage: tollgate ")
}

// writeFlags writes fs's flags as a table: name, default, environment
// variable, meaning.
func writeFlags(b *bytes.Buffer, fs *flag.FlagSet) {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		b.WriteString("No flags.\n")
		return
	}
	b.WriteString("| flag | default | environment | meaning |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		arg, meaning := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if arg != "" {
			name += " " + arg
		}
		env := ""
		if v, ok := f.Value.(envValue); ok {
			env = "`" + v.env + "`"
			meaning = strings.TrimSuffix(meaning, " (env "+v.env+")")
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", name, def, env, cell(meaning))
	})
}

// writeRLSEnv writes the environment variables rls reads as a table, and
// those it ignores.
func writeRLSEnv(b *bytes.Buffer) {
	b.WriteString("No flags: Envoy's rate-limit service is configured as envoyproxy/ratelimit is, by these environment variables.\n\n")
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, v := range rlsVars {
		def := ""
		if v.def != "" {
			def = "`" + v.def + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", v.name, def, cell(v.meaning))
	}
	fmt.Fprintf(b, "\nIgnored with a warning (envoyproxy/ratelimit's, without effect here): `%s`.\n", strings.Join(rlsIgnored, "`, `"))
}

// cell is text as a Markdown table's cell: no column breaks, no
// emphasis, no HTML.
func cell(text string) string {
	return strings.NewReplacer("|", `\|`, "*", `\*`, "<", "&lt;", "\n", " ").Replace(text)
}
