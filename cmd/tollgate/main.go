// Command tollgate runs and checks Tollgate gateways.
//
//	tollgate serve --config FILE [--redis URL]   run the gateway (env TOLLGATE_REDIS_URL works too);
//	                                             the policy reloads on file change and SIGHUP
//	tollgate check FILE                          validate a policy and print what it enforces
//	tollgate hash-key KEY                        print the digest to list an API key under
//	tollgate rls                                 run Envoy's rate-limit service, configured by
//	                                             envoyproxy/ratelimit's environment variables
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

const usage = `usage:
  tollgate serve --config FILE [--redis URL]   run the gateway (env TOLLGATE_REDIS_URL works too)
  tollgate check FILE                          validate a policy and print what it would enforce
  tollgate hash-key KEY                        print the digest under which to list an API key
  tollgate rls                                 run Envoy's rate-limit service (envoyproxy/ratelimit's
                                               environment: RUNTIME_ROOT, GRPC_PORT, REDIS_URL, ...)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "rls":
		return rls(args[1:], stderr)
	case "check":
		if len(args) != 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		p, err := policy.Load(args[1])
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
	case "hash-key":
		if len(args) != 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		fmt.Fprintln(stdout, identity.KeyDigest(args[1]))
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return 2
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "policy file (required)")
	redisURL := fs.String("redis", os.Getenv("TOLLGATE_REDIS_URL"), "Redis URL; overrides the policy's store (env TOLLGATE_REDIS_URL)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *config == "" {
		fmt.Fprintln(stderr, "serve: --config is required")
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	// Every connection is a file descriptor: take all the process may have
	// (the public connection cap is derived from it unless the policy sets
	// listeners.max_conns).
	if soft, hard, err := gateway.RaiseFileLimit(); err != nil {
		log.Warn("could not raise the open-file limit", slog.Uint64("soft", soft), slog.Uint64("hard", hard), slog.String("error", err.Error()))
	} else {
		log.Info("file limit", slog.Uint64("soft", soft), slog.Uint64("hard", hard))
	}
	p, err := policy.Load(*config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *redisURL != "" {
		if err := policy.CheckRedisURL(*redisURL); err != nil {
			fmt.Fprintln(stderr, "serve:", err)
			return 1
		}
		if p.SecretGenerated {
			fmt.Fprintln(stderr, "serve: a shared Redis store needs identity.secret or identity.secret_env in the policy, so every instance hashes subjects alike")
			return 1
		}
	}
	for _, w := range p.Warnings {
		log.Warn("policy warning", slog.String("warning", w.Msg), slog.String("file", w.File), slog.Int("line", w.Line), slog.String("path", w.Path))
	}
	if p.SecretGenerated {
		log.Warn("no identity secret configured: using a random one for this process (fine for one instance on the memory store)")
	}
	g, err := gateway.New(gateway.Options{Policy: p, RedisURL: *redisURL, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer g.Close()
	pub, err := net.Listen("tcp", p.Public)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	adm, err := net.Listen("tcp", p.Admin)
	if err != nil {
		pub.Close()
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The policy reloads when its file changes and on SIGHUP; an invalid
	// file is refused and the active policy keeps serving.
	if err := g.Watch(ctx, *config); err != nil {
		log.Warn("not watching the policy file; SIGHUP still reloads", slog.String("error", err.Error()))
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			g.ReloadFile(*config)
		}
	}()
	if err := g.Serve(ctx, pub, adm); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("gateway stopped", slog.String("error", err.Error()))
		return 1
	}
	return 0
}

// describe prints what a policy enforces.
func describe(w io.Writer, p *policy.Policy) {
	switch n := len(p.Warnings); n {
	case 0:
		fmt.Fprintf(w, "policy %s (%s): OK\n", p.Version, p.Source)
	case 1:
		fmt.Fprintf(w, "policy %s (%s): OK, 1 warning\n", p.Version, p.Source)
	default:
		fmt.Fprintf(w, "policy %s (%s): OK, %d warnings\n", p.Version, p.Source, n)
	}
	fmt.Fprintf(w, "listeners: public %s, admin %s\n", p.Public, p.Admin)
	store := p.Store.Type
	if p.Store.Type == "redis" {
		store += " " + p.Store.URL
	}
	fmt.Fprintf(w, "store: %s\n", store)
	c := p.Conns
	total := "from the file limit"
	if c.MaxConns > 0 {
		total = strconv.Itoa(c.MaxConns)
	}
	fmt.Fprintf(w, "connections: %d per client address, %s in all, %d admin; timeouts: header %v, body %v, idle %v, send %v\n",
		c.MaxConnsPerClient, total, c.AdminMaxConns, c.HeaderTimeout, c.BodyTimeout, c.IdleTimeout, c.SendTimeout)
	fmt.Fprintln(w, "plans:")
	names := make([]string, 0, len(p.Plans))
	for n := range p.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var who []string
		if p.AnonymousPlan != nil && p.AnonymousPlan.Name == n {
			who = append(who, "clients by IP")
		}
		if p.UserPlan != nil && p.UserPlan.Name == n {
			who = append(who, "users from "+p.UserHeader)
		}
		keys := 0
		for _, k := range p.Keys {
			if k.Plan.Name == n {
				keys++
			}
		}
		if keys > 0 {
			who = append(who, fmt.Sprintf("%d API key(s)", keys))
		}
		fmt.Fprintf(w, "  %-12s %-22s %s\n", n, describePlan(p.Plans[n]), strings.Join(who, ", "))
	}
	fmt.Fprintln(w, "routes:")
	for _, r := range p.Routes {
		m := r.Method
		if m == "" {
			m = "*"
		}
		match := r.Path
		if r.Prefix {
			match += "*"
		}
		limit := "plan limit"
		if r.Limit != nil {
			limit = "own limit " + describePlan(r.Limit) + " per subject"
		}
		if r.Global != nil {
			limit += ", global " + r.Global.Limit.String()
		}
		if c := r.Concurrency; c != nil {
			per := "subject"
			if c.PerRoute {
				per = "route"
			}
			limit += fmt.Sprintf(", at most %d in flight per %s", c.Limit, per)
		}
		if l := r.Login; l != nil {
			limit += fmt.Sprintf(", login guard (field %q: %d failures lock %v..%v; %v failures per IP)",
				l.AccountField, l.Rule.Threshold, l.Rule.Lock, l.Rule.MaxLock, l.IPFailures.Limit)
		}
		mode := "fail_open"
		if r.FailClosed {
			mode = "fail_closed"
		}
		fmt.Fprintf(w, "  %-7s %-16s -> %-22s group %-8s cost %-3d %s, %s\n", m, match, r.Upstream, r.Group, r.Cost, limit, mode)
	}
	fmt.Fprintf(w, "invalid API keys: %v per client IP\n", p.InvalidKey.Limit)
	if p.Region != "" {
		fmt.Fprintf(w, "region: %s (every limit above is this region's share)\n", p.Region)
	}
	if len(p.TrustedProxies) > 0 {
		fmt.Fprintf(w, "trusted proxies: %v\n", p.TrustedProxies)
	}
}

// describePlan prints a plan's limits, e.g. "gcra 10/1s + gcra 1000/1h,
// tenant fixed_window 25/1m0s".
func describePlan(pl *policy.Plan) string {
	parts := make([]string, len(pl.Limits))
	for i, b := range pl.Limits {
		parts[i] = b.Limit.String()
	}
	s := strings.Join(parts, " + ")
	if pl.Tenant != nil {
		s += ", tenant " + pl.Tenant.Limit.String()
	}
	return s
}
