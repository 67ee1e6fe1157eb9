package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

// checkFlags returns check's flags: --middleware, and serve's that
// decide what it refuses.
func checkFlags(o *serveOptions, middleware *bool) *flag.FlagSet {
	fs := flags("check", "check [--middleware] [--redis URL] [--listen ADDR] [--admin ADDR] [--state FILE] FILE")
	fs.BoolVar(middleware, "middleware", false, "check the file for the net/http middleware alone (package httplimit), which needs no listener and no upstream, not for serve")
	gatewayFlags(fs, o)
	return fs
}

// check validates a policy file and prints what it enforces.
func check(args []string, stdout, stderr io.Writer) int {
	var o serveOptions
	var middleware bool
	fs := checkFlags(&o, &middleware)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if middleware && fs.NFlag() > 1 {
		fmt.Fprintln(stderr, "check: --middleware checks the file for the middleware alone: it takes none of serve's flags")
		return 2
	}
	o.config = fs.Arg(0)
	p, err := checkPolicy(o, middleware)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// Warnings go with errors, to stderr; they do not fail the check.
	for _, w := range p.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	describe(stdout, p)
	return 0
}

// checkPolicy loads the policy file o.config as check does: for the
// middleware alone, or else as serve would serve it with o, refusing all
// that serve refuses before it listens.
func checkPolicy(o serveOptions, middleware bool) (*policy.Policy, error) {
	if middleware {
		return policy.Load(o.config)
	}
	p, err := loadServePolicy(o)
	if err != nil {
		return nil, err
	}
	if err := tryGateway(p, o); err != nil {
		return nil, err
	}
	return p, nil
}

// tryGateway builds the gateway serve would build for p with o, and
// closes it: what gateway.New refuses (a runtime state file it cannot
// read, ...), check refuses. It connects to nothing: a memory store
// stands in for Redis, and a policy on Redis keeps its runtime state
// there, so no state file is read for it.
func tryGateway(p *policy.Policy, o serveOptions) error {
	store := memory.New(memory.Options{})
	defer store.Close()
	opts := gatewayOptions(p, o, slog.New(slog.DiscardHandler))
	opts.Store, opts.RecordSize = store, -1
	if o.redisURL != "" || p.Store.Type == "redis" {
		opts.StateFile = ""
	}
	g, err := gateway.New(opts)
	if err != nil {
		return err
	}
	g.Close()
	return nil
}
