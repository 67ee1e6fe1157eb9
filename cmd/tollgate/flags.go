package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// flagSets make each command's flag set, in the order of the usage: the
// CLI reference (docs/reference/cli.md) is generated from them.
var flagSets = []func() *flag.FlagSet{
	func() *flag.FlagSet { return serveFlags(new(serveOptions)) },
	func() *flag.FlagSet { return checkFlags(new(serveOptions), new(bool)) },
	schemaFlags,
	func() *flag.FlagSet { return simulateFlags(new(simulateOptions)) },
	hashKeyFlags,
	rlsFlags,
	func() *flag.FlagSet { return devJWKSServeFlags(new(string), new(string)) },
	func() *flag.FlagSet { return devJWKSTokenFlags(new(tokenSpec), new(string)) },
	versionFlags,
}

// flags returns a flag set for a command whose usage line is use: -h and
// --help print it with the flags (see parse).
func flags(name, use string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tollgate %s\n", use)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs, then sets each flag not given that an
// environment variable sets (envFlag) from it; done reports that the
// command must end with code (help asked for, or bad flags). The usage is
// printed once: for help to stdout (exit 0), for a bad flag to stderr
// after the flag's error (exit 2). (The flag package would print it to
// stderr on help too, so it is silenced while parsing.) Later usages, for
// bad arguments, go to stderr.
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(stderr)
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	case err != nil:
		fs.Usage()
		return 2, true
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(envValue); ok && !given[f.Name] {
			v.Set(os.Getenv(v.env))
		}
	})
	return 0, false
}

// envFlag defines a string flag on fs, stored in p, that the environment
// variable env sets when the command line does not: its help says so,
// and shows no default (the environment's value is none).
func envFlag(fs *flag.FlagSet, p *string, name, env, usage string) {
	fs.Var(envValue{p, env}, name, usage+" (env "+env+")")
}

// envValue is the value of a flag envFlag defines.
type envValue struct {
	p   *string
	env string // the variable that sets it when the flag is not given
}

func (v envValue) String() string {
	if v.p == nil { // the flag package's zero value, for its help
		return ""
	}
	return *v.p
}

func (v envValue) Set(s string) error {
	*v.p = s
	return nil
}
