// Command tollgate runs and checks Tollgate gateways.
//
//	tollgate serve [--config FILE] [--redis URL] [--listen ADDR] [--admin ADDR]
//	                                   run the gateway; the policy reloads on
//	                                   file change and SIGHUP
//	tollgate check FILE                validate a policy and print what it enforces
//	tollgate hash-key [KEY]            print the digest to list an API key under
//	                                   (the key is read from standard input
//	                                   when not given, so it stays out of
//	                                   shell history)
//	tollgate rls                       run Envoy's rate-limit service, configured by
//	                                   envoyproxy/ratelimit's environment variables
//	tollgate version                   print the version and build
//
// Every command prints its usage with -h or --help.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/logsample"
	"github.com/tollgate/tollgate/policy"
)

const usage = `usage:
  tollgate serve [--config FILE] [--redis URL] [--listen ADDR] [--admin ADDR] [--state FILE]
                               run the gateway (env TOLLGATE_CONFIG, TOLLGATE_REDIS_URL)
  tollgate check FILE          validate a policy and print what it would enforce
  tollgate simulate --policy CANDIDATE --active FILE --recording FILE|URL
                               replay a gateway's recent calls under a candidate policy
  tollgate hash-key [KEY]      print the digest under which to list an API key
                               (reads the key from standard input when not given)
  tollgate rls                 run Envoy's rate-limit service (envoyproxy/ratelimit's
                               environment: RUNTIME_ROOT, GRPC_PORT, REDIS_URL, ...)
  tollgate version             print the version and build
Every command takes -h or --help.
`

// version is the release, set at build time:
// go build -ldflags "-X main.version=v1.2.3" ./cmd/tollgate
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "rls":
		return rls(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "simulate":
		return simulateCmd(args[1:], stdout, stderr)
	case "hash-key":
		return hashKey(args[1:], stdin, stdout, stderr)
	case "version":
		return printVersion(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return 2
}

// flags returns a flag set for a command whose usage line is use: -h and
// --help print it with the flags to stdout (exit 0), a bad flag prints
// it to stderr (exit 2).
func flags(name, use string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tollgate %s\n", use)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs; done reports that the command must end with
// code (help asked for, or bad flags).
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	case err != nil:
		return 2, true
	}
	return 0, false
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flags("check", "check FILE", stdout, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	p, err := policy.Load(fs.Arg(0))
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

func hashKey(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flags("hash-key", "hash-key [KEY]   (without KEY, the key is read from standard input)", stdout, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	var key string
	switch fs.NArg() {
	case 0:
		line, err := bufio.NewReader(io.LimitReader(stdin, 64<<10)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintln(stderr, "hash-key: reading the key:", err)
			return 1
		}
		key = strings.TrimRight(line, "\r\n")
		if key == "" {
			fmt.Fprintln(stderr, "hash-key: no key on standard input")
			return 2
		}
	case 1:
		key = fs.Arg(0)
	default:
		fs.Usage()
		return 2
	}
	fmt.Fprintln(stdout, identity.KeyDigest(key))
	return 0
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := flags("version", "version", stdout, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	rev, modified := "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		rev += " (modified)"
	}
	fmt.Fprintf(stdout, "tollgate %s, commit %s, %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flags("serve", "serve [--config FILE] [--redis URL] [--listen ADDR] [--admin ADDR]", stdout, stderr)
	config := fs.String("config", os.Getenv("TOLLGATE_CONFIG"), "policy file (required; env TOLLGATE_CONFIG)")
	redisURL := fs.String("redis", os.Getenv("TOLLGATE_REDIS_URL"), "Redis URL; overrides the policy's store (env TOLLGATE_REDIS_URL)")
	listen := fs.String("listen", "", "public listen address (host:port); overrides listeners.public")
	admin := fs.String("admin", "", "admin listen address (host:port); overrides listeners.admin, which off loopback needs listeners.admin_token_env")
	state := fs.String("state", "", "where admin changes (keys, tenants, rollbacks) are kept without Redis (default: the policy file's path + .state.json; with Redis they are kept there)")
	simBudget := fs.Duration("simulate-budget", gateway.DefaultSimulateBudget, "the CPU time a dashboard or POST /simulate replay may take before it is stopped (answered 503)")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if err := checkServeArgs(*config, *simBudget, fs.Args()); err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 2
	}
	env := policy.ProcessEnv()
	env.Public, env.Admin = *listen, *admin
	p, err := policy.LoadEnv(*config, env)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if p.Public == "" {
		fmt.Fprintln(stderr, "serve: the policy has no public listener: set listeners.public or --listen")
		return 1
	}
	log := serveLogger(p, stderr)
	if err := prepareServe(p, *redisURL, log); err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	if *state == "" {
		*state = *config + ".state.json"
	}
	g, err := gateway.New(gateway.Options{Policy: p, RedisURL: *redisURL, Logger: log, Public: *listen, Admin: *admin, Version: version,
		StateFile: *state, SimulateBudget: *simBudget})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer g.Close()
	if err := runGateway(g, p, *config, log); err != nil {
		if !errors.Is(err, errStopped) {
			fmt.Fprintln(stderr, "serve:", err)
		}
		return 1
	}
	return 0
}

// checkServeArgs checks serve's arguments: a policy file, a positive
// simulate budget, and nothing past the flags.
func checkServeArgs(config string, simBudget time.Duration, rest []string) error {
	switch {
	case simBudget <= 0:
		return errors.New("--simulate-budget must be positive")
	case config == "":
		return errors.New("--config (or TOLLGATE_CONFIG) is required")
	case len(rest) > 0:
		return fmt.Errorf("unexpected arguments %q", rest)
	}
	return nil
}

// errStopped is runGateway's and runRLS's error when the server stopped
// on an error it has logged.
var errStopped = errors.New("the gateway stopped")

// serveLogger returns the logger the policy asks for (logging: level,
// format; later reloads keep the first policy's), and raises the
// open-file limit: every connection is a file descriptor, so the process
// takes all it may have (the public connection cap is derived from it
// unless the policy sets listeners.max_conns).
func serveLogger(p *policy.Policy, stderr io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: p.Log.Level}
	var handler slog.Handler = slog.NewJSONHandler(stderr, hopts)
	if p.Log.Text {
		handler = slog.NewTextHandler(stderr, hopts)
	}
	log := slog.New(handler)
	if soft, hard, err := gateway.RaiseFileLimit(); err != nil {
		log.Warn("could not raise the open-file limit", slog.Uint64("soft", soft), slog.Uint64("hard", hard), slog.String("error", err.Error()))
	} else {
		log.Info("file limit", slog.Uint64("soft", soft), slog.Uint64("hard", hard))
	}
	return log
}

// prepareServe refuses a Redis URL that cannot work for p, logs the
// policy's warnings, and sends the trace exporter's errors to the log.
func prepareServe(p *policy.Policy, redisURL string, log *slog.Logger) error {
	if redisURL != "" {
		if err := policy.CheckRedisURL(redisURL); err != nil {
			return err
		}
		if p.SecretGenerated {
			return errors.New("a shared Redis store needs identity.secret or identity.secret_env in the policy, so every instance hashes subjects alike")
		}
	}
	for _, w := range p.Warnings {
		log.Warn("policy warning", slog.String("warning", w.Msg), slog.String("file", w.File), slog.Int("line", w.Line), slog.String("path", w.Path))
	}
	if p.SecretGenerated {
		log.Warn("no identity secret configured: using a random one for this process (fine for one instance on the memory store)")
	}
	if p.Tracing.On() {
		// The trace exporter's errors (a collector down or refusing) go to
		// the log, sampled per message, not to the standard logger.
		sampled := logsample.Logger(log)
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			sampled.Warn("sending traces failed", slog.String("error", err.Error()))
		}))
	}
	return nil
}

// runGateway serves g on p's listeners until SIGTERM or SIGINT,
// reloading the policy file config when it changes and on SIGHUP (an
// invalid file is refused and the active policy keeps serving). An error
// serving is logged (errStopped).
func runGateway(g *gateway.Gateway, p *policy.Policy, config string, log *slog.Logger) error {
	pub, err := net.Listen("tcp", p.Public)
	if err != nil {
		return err
	}
	adm, err := net.Listen("tcp", p.Admin)
	if err != nil {
		pub.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := g.Watch(ctx, config); err != nil {
		log.Warn("not watching the policy file; SIGHUP still reloads", slog.String("error", err.Error()))
	}
	defer onHUP(func() { g.ReloadFile(config) })()
	if err := g.Serve(ctx, pub, adm); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("gateway stopped", slog.String("error", err.Error()))
		return errStopped
	}
	return nil
}

// onHUP calls reload on every SIGHUP, until the function it returns is
// called.
func onHUP(reload func()) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			reload()
		}
	}()
	return func() { signal.Stop(hup) }
}

// describe prints what a policy enforces.
func describe(w io.Writer, p *policy.Policy) {
	fmt.Fprintf(w, "policy %s (%s): %s\n", p.Version, p.Source, describeWarnings(len(p.Warnings)))
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
	describePlans(w, p)
	describeRoutes(w, p)
	if l := p.Allowlist; l != nil {
		fmt.Fprintf(w, "allowlist (counted, never refused by a rate limit): %d key(s), %d user(s), %d tenant(s), addresses %v\n",
			len(l.Keys), len(l.Users), len(l.Tenants), l.Addresses)
	}
	if j := p.JWT; j != nil {
		fmt.Fprintf(w, "bearer JWTs: %s\n", describeJWT(j))
	}
	fmt.Fprintf(w, "invalid API keys: %v per client IP\n", p.InvalidKey.Limit)
	if p.Region != "" {
		fmt.Fprintf(w, "region: %s (every limit above is this region's share)\n", p.Region)
	}
	if len(p.TrustedProxies) > 0 {
		fmt.Fprintf(w, "trusted proxies: %v\n", p.TrustedProxies)
	}
}

// describeWarnings says that a policy with n warnings is valid, and how
// many warnings it has.
func describeWarnings(n int) string {
	switch n {
	case 0:
		return "OK"
	case 1:
		return "OK, 1 warning"
	}
	return fmt.Sprintf("OK, %d warnings", n)
}

// describePlans lists the plans and who is on each.
func describePlans(w io.Writer, p *policy.Policy) {
	fmt.Fprintln(w, "plans:")
	names := make([]string, 0, len(p.Plans))
	for n := range p.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %-22s %s\n", n, describePlan(p.Plans[n]), strings.Join(planMembers(p, n), ", "))
	}
}

// planMembers says who is on the plan named n: clients by IP, users, API
// keys, JWTs naming no plan.
func planMembers(p *policy.Policy, n string) []string {
	var who []string
	if p.AnonymousPlan != nil && p.AnonymousPlan.Name == n {
		who = append(who, "clients by IP")
	}
	if p.UserPlan != nil && p.UserPlan.Name == n && p.UserHeader != "" {
		who = append(who, "users from "+p.UserHeader)
	}
	if keys := keysOnPlan(p, n); keys > 0 {
		who = append(who, fmt.Sprintf("%d API key(s)", keys))
	}
	if p.JWT != nil && p.JWT.DefaultPlan != nil && p.JWT.DefaultPlan.Name == n {
		who = append(who, "JWTs naming no plan")
	}
	return who
}

// keysOnPlan counts the API keys on the plan named n.
func keysOnPlan(p *policy.Policy, n string) int {
	keys := 0
	for _, k := range p.Keys {
		if k.Plan.Name == n {
			keys++
		}
	}
	return keys
}

// describeRoutes lists the routes.
func describeRoutes(w io.Writer, p *policy.Policy) {
	fmt.Fprintln(w, "routes:")
	for _, r := range p.Routes {
		m := r.Method
		if m == "" {
			m = "*"
		}
		mode := "fail_open"
		if r.FailClosed {
			mode = "fail_closed"
		}
		fmt.Fprintf(w, "  %-7s %-16s -> %-22s group %-8s cost %-3d %s, %s\n", m, describeMatch(r), r.Upstream, r.Group, r.Cost, describeLimits(r), mode)
	}
}

// describeLimits says what limits a route: its own limit or the plan's,
// its global budget, concurrency, login guard and refusal.
func describeLimits(r *policy.Route) string {
	limit := "plan limit per subject"
	if r.Limit != nil {
		limit = "own limit " + describePlan(r.Limit) + " per " + describeKey(r.LimitKey)
		if r.LimitAdds {
			limit = "plan limit + " + limit
		}
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
	if rf := r.Refusal; rf != nil {
		limit += fmt.Sprintf(", refused with %d", rf.Status)
		if len(rf.Body) > 0 {
			limit += " and its own " + rf.ContentType + " body"
		}
	}
	return limit
}

// describeMatch prints what a route matches besides its method: its
// path ("*" for everything under a prefix, {param} segments as written),
// and the host, headers and query it requires.
func describeMatch(r *policy.Route) string {
	m := r.Path
	if r.Prefix {
		m += "*"
	}
	var conds []string
	if r.Host != "" {
		conds = append(conds, "host "+r.Host)
	}
	for _, c := range r.Headers {
		conds = append(conds, "header "+describeCond(c))
	}
	for _, c := range r.Query {
		conds = append(conds, "query "+describeCond(c))
	}
	if len(conds) > 0 {
		m += " [" + strings.Join(conds, ", ") + "]"
	}
	return m
}

func describeCond(c policy.Cond) string {
	if c.Any {
		return c.Name + " present"
	}
	return c.Name + "=" + c.Value
}

// describeKey prints what a route limit is counted per.
func describeKey(parts []policy.KeyPart) string {
	if len(parts) == 0 {
		return "subject"
	}
	s := make([]string, len(parts))
	for i, k := range parts {
		s[i] = k.String()
	}
	return strings.Join(s, " + ")
}

// describeJWT prints how bearer JWTs are verified and whom they name.
func describeJWT(j *policy.JWT) string {
	var parts []string
	if j.JWKSURL != "" {
		parts = append(parts, fmt.Sprintf("keys from %s (refreshed every %v, at most every %v)", j.JWKSURL, j.RefreshInterval, j.MinRefreshInterval))
	}
	if j.HMACSecret != nil {
		parts = append(parts, "HMAC secret from the environment")
	}
	parts = append(parts, "algorithms "+strings.Join(j.Algorithms, ", "), fmt.Sprintf("clock skew %v", j.ClockSkew))
	if j.Issuer != "" {
		parts = append(parts, "issuer "+j.Issuer)
	}
	if len(j.Audience) > 0 {
		parts = append(parts, "audience "+strings.Join(j.Audience, " or "))
	}
	who := "subject from claim " + j.SubjectClaim
	if j.TenantClaim != "" {
		who += ", tenant from " + j.TenantClaim
	}
	if j.PlanClaim != "" {
		who += ", plan from " + j.PlanClaim
	}
	parts = append(parts, who)
	return strings.Join(parts, "; ") + "; invalid tokens count as invalid API keys"
}

// describePlan prints a plan's limits, e.g. "gcra 10/1s + gcra 1000/1h,
// tenant fixed_window 25/1m0s".
func describePlan(pl *policy.Plan) string {
	if pl.Unlimited {
		return "unlimited (counted)"
	}
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
