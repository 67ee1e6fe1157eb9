package main

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/envoyrls"
)

// A helpCase is a command line and why it must act as the test says.
type helpCase struct {
	args   []string
	reason string
}

// helpCases are the ways of asking for help, and why each must work.
var helpCases = []helpCase{
	{[]string{"--help"}, "the usual way to ask a program for its usage"},
	{[]string{"-h"}, "the short form of --help"},
	{[]string{"help"}, "the usage as a command, as go and git take it"},
	{[]string{"serve", "--help"}, "serve's flags and usage line"},
	{[]string{"serve", "-h"}, "serve's flags, short form"},
	{[]string{"check", "--help"}, "check's usage"},
	{[]string{"schema", "--help"}, "schema's usage, not the schema"},
	{[]string{"simulate", "--help"}, "simulate's flags"},
	{[]string{"simulate", "-h"}, "simulate's flags, short form"},
	{[]string{"rls", "--help"}, "rls is configured by the environment, which its help lists"},
	{[]string{"rls", "-h"}, "rls's help, short form"},
	{[]string{"hash-key", "--help"}, "hash-key's usage, not a key named --help"},
	{[]string{"version", "--help"}, "version's usage"},
	{[]string{"dev-jwks", "--help"}, "dev-jwks's subcommands"},
	{[]string{"dev-jwks", "serve", "--help"}, "dev-jwks serve's flags"},
	{[]string{"dev-jwks", "token", "-h"}, "dev-jwks token's flags, short form"},
}

// TestHelpOnce: help, asked for in any way, is the usage once, on
// stdout (nothing on stderr), and exit 0.
func TestHelpOnce(t *testing.T) {
	for _, c := range helpCases {
		var out, errb bytes.Buffer
		code := run(c.args, nil, &out, &errb)
		if code != 0 || errb.Len() != 0 || strings.Count(out.String(), "usage:") != 1 {
			t.Errorf("%v (%s): exit %d, want 0; stdout %q, want the usage once; stderr %q, want nothing",
				c.args, c.reason, code, out.String(), errb.String())
		}
	}
	for name := range commands {
		if !slices.ContainsFunc(helpCases, func(c helpCase) bool { return c.args[0] == name }) {
			t.Errorf("command %q has no help case", name)
		}
	}
}

// TestBadUsage: an unknown command, no command or a bad flag prints the
// usage once on stderr, nothing on stdout, and exits 2.
func TestBadUsage(t *testing.T) {
	for _, c := range []helpCase{
		{nil, "no command: the usage says which there are"},
		{[]string{"bogus"}, "an unknown command is a mistake, not a request for help"},
		{[]string{"serve", "--bogus"}, "a flag serve does not take"},
		{[]string{"check", "--bogus"}, "a flag check does not take"},
		{[]string{"schema", "--bogus"}, "schema takes no flags"},
		{[]string{"schema", "extra"}, "schema takes no arguments"},
		{[]string{"simulate", "--bogus"}, "a flag simulate does not take"},
		{[]string{"rls", "--bogus"}, "rls takes no flags"},
		{[]string{"hash-key", "--bogus"}, "a flag hash-key does not take"},
		{[]string{"version", "--bogus"}, "version takes no flags"},
		{[]string{"dev-jwks"}, "dev-jwks without a subcommand says which there are"},
		{[]string{"dev-jwks", "--bogus"}, "dev-jwks takes a subcommand, not a flag"},
		{[]string{"dev-jwks", "token", "--bogus"}, "a flag dev-jwks token does not take"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, nil, &out, &errb)
		if code != 2 || out.Len() != 0 || strings.Count(errb.String(), "usage:") != 1 {
			t.Errorf("%v (%s): exit %d, want 2; stdout %q, want nothing; stderr %q, want the usage once",
				c.args, c.reason, code, out.String(), errb.String())
		}
	}
}

// flagLine is a flag as the flag package prints it in a usage.
var flagLine = regexp.MustCompile(`(?m)^  -(\S+)`)

// TestHelpListsEveryFlag: a command's usage line, and its entry in the
// usage of every command, lists every flag it takes.
func TestHelpListsEveryFlag(t *testing.T) {
	var all bytes.Buffer
	run([]string{"--help"}, nil, &all, &bytes.Buffer{})
	for _, c := range []struct {
		name, reason string
	}{
		{"serve", "--state and --simulate-budget were missing from its usage line"},
		{"simulate", "--json and --svg are optional, but flags all the same"},
		{"check", "takes serve's flags, which decide what it refuses, and --middleware"},
		{"hash-key", "takes no flags: nothing to miss"},
	} {
		var out bytes.Buffer
		run([]string{c.name, "--help"}, nil, &out, &bytes.Buffer{})
		use, _, _ := strings.Cut(out.String(), "\n")
		entry := commandEntry(all.String(), c.name)
		for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
			flag := regexp.MustCompile(`--` + regexp.QuoteMeta(m[1]) + `([ \]\n]|$)`)
			if !flag.MatchString(use) {
				t.Errorf("%s (%s): usage line %q lacks --%s", c.name, c.reason, use, m[1])
			}
			if !flag.MatchString(entry) {
				t.Errorf("%s (%s): the usage's entry %q lacks --%s", c.name, c.reason, entry, m[1])
			}
		}
	}
}

// commandEntry is the lines of the usage that describe the command name:
// from its "  tollgate name" line to the next command's.
func commandEntry(usage, name string) string {
	_, rest, ok := strings.Cut(usage, "  tollgate "+name+" ")
	if !ok {
		return ""
	}
	entry, _, _ := strings.Cut(rest, "  tollgate ")
	return entry
}

// TestRLSHelpListsEnvironment: the variables rls lists (rlsVars and
// rlsIgnored) are those envoyrls.SettingsFromEnv reads, and rls --help
// names each, as a word.
func TestRLSHelpListsEnvironment(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"rls", "--help"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	read := map[string]bool{}
	for _, c := range []struct {
		env    map[string]string
		reason string
	}{
		{nil, "the defaults read nearly every variable"},
		{map[string]string{"USE_PROMETHEUS": "true"}, "PROMETHEUS_ADDR is read only with USE_PROMETHEUS"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1,b:2", "REDIS_TYPE": "CLUSTER"}, "a TCP cluster"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"}, "the xDS settings, TLS's too, are read only with CONFIG_TYPE=GRPC_XDS_SOTW"},
	} {
		getenv := func(name string) string {
			read[name] = true
			return c.env[name]
		}
		if _, err := envoyrls.SettingsFromEnv(getenv); err != nil {
			t.Fatalf("%s: %v", c.reason, err)
		}
	}
	listed := map[string]bool{}
	for _, v := range rlsVars {
		listed[v.name] = true
	}
	for _, name := range rlsIgnored {
		listed[name] = true
	}
	for name := range read {
		if !listed[name] {
			t.Errorf("SettingsFromEnv reads %s, which rlsVars and rlsIgnored do not list", name)
		}
	}
	for name := range listed {
		if !read[name] {
			t.Errorf("rlsVars or rlsIgnored lists %s, which SettingsFromEnv does not read", name)
		}
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(out.String()) {
			t.Errorf("rls --help does not name %s:\n%s", name, out.String())
		}
	}
	if strings.Contains(out.String(), "README") {
		t.Errorf("rls --help sends to the README instead of listing the variables:\n%s", out.String())
	}
}
