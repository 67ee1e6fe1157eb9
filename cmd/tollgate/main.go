// Command tollgate runs and checks Tollgate gateways.
//
//	tollgate serve [--config FILE] [--redis URL] [--listen ADDR] [--admin ADDR]
//	               [--state FILE] [--simulate-budget DURATION]
//	                                   run the gateway; the policy reloads on
//	                                   file change and SIGHUP
//	tollgate check [--middleware] [--redis URL] [--listen ADDR] [--admin ADDR]
//	               [--state FILE] FILE
//	                                   validate a policy and print what it
//	                                   enforces; it refuses what serve would
//	                                   (with the same flags), or with
//	                                   --middleware what the middleware would
//	tollgate schema                    print the policy file's JSON Schema
//	tollgate simulate --policy CANDIDATE --active FILE --recording FILE|URL
//	                  [--json] [--svg FILE]
//	                                   replay a gateway's recent calls under a
//	                                   candidate policy
//	tollgate hash-key [KEY]            print the digest to list an API key under
//	                                   (the key is read from standard input
//	                                   when not given, so it stays out of
//	                                   shell history)
//	tollgate rls                       run Envoy's rate-limit service, configured by
//	                                   envoyproxy/ratelimit's environment variables
//	tollgate dev-jwks serve|token      for development: serve a JWKS on loopback
//	                                   and mint tokens it verifies
//	tollgate version                   print the version and build
//
// Every command prints its usage with -h or --help; docs/reference/cli.md
// lists every command, flag and environment variable.
//
//go:generate go test -run ^TestCLIReference$ . -update
package main

import (
	"bufio"
	"cmp"
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
  tollgate serve [--config FILE] [--redis URL] [--listen ADDR] [--admin ADDR]
                 [--state FILE] [--simulate-budget DURATION]
                               run the gateway (env TOLLGATE_CONFIG, TOLLGATE_REDIS_URL)
  tollgate check [--middleware] [--redis URL] [--listen ADDR] [--admin ADDR]
                 [--state FILE] FILE
                               validate a policy and print what it would enforce;
                               refuse what serve (with those flags) refuses, or with
                               --middleware what the net/http middleware refuses
  tollgate schema              print the policy file's JSON Schema (for editors)
  tollgate simulate --policy CANDIDATE --active FILE --recording FILE|URL
                    [--json] [--svg FILE]
                               replay a gateway's recent calls under a candidate policy
  tollgate hash-key [KEY]      print the digest under which to list an API key
                               (reads the key from standard input when not given)
  tollgate rls                 run Envoy's rate-limit service (envoyproxy/ratelimit's
                               environment: RUNTIME_ROOT, GRPC_PORT, REDIS_URL, ...,
                               which tollgate rls --help lists)
  tollgate dev-jwks serve [--listen ADDR] [--key FILE]
  tollgate dev-jwks token --sub SUBJECT [--plan PLAN] [--claim NAME=VALUE]...
                          [--ttl DURATION] [--iss ISSUER] [--aud AUDIENCE] [--key FILE]
                               for development: serve a JWKS on loopback, and print
                               tokens signed with its key
  tollgate version             print the version and build
Every command takes -h or --help.
`

// version, when set at build time, is the version reported in place of
// the module's:
// go build -ldflags "-X main.version=v1.2.3" ./cmd/tollgate
var version string

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
		return 2
	}
	return cmd(args[1:], stdin, stdout, stderr)
}

// A command runs a subcommand on its arguments (those after its name)
// and returns the exit code.
type command func(args []string, stdin io.Reader, stdout, stderr io.Writer) int

// commands are the subcommands by name.
var commands = map[string]command{
	"serve":    withoutStdin(serve),
	"rls":      withoutStdin(rls),
	"check":    withoutStdin(check),
	"schema":   withoutStdin(printSchema),
	"simulate": withoutStdin(simulateCmd),
	"hash-key": hashKey,
	"dev-jwks": withoutStdin(devJWKS),
	"version":  withoutStdin(printVersion),
	"-h":       help,
	"--help":   help,
	"help":     help,
}

// withoutStdin makes a command of f, which reads no standard input.
func withoutStdin(f func(args []string, stdout, stderr io.Writer) int) command {
	return func(args []string, _ io.Reader, stdout, stderr io.Writer) int { return f(args, stdout, stderr) }
}

// help prints the usage to stdout.
func help(_ []string, _ io.Reader, stdout, _ io.Writer) int {
	fmt.Fprint(stdout, usage)
	return 0
}

func schemaFlags() *flag.FlagSet { return flags("schema", "schema") }

// printSchema prints the policy file's JSON Schema.
func printSchema(args []string, stdout, stderr io.Writer) int {
	fs := schemaFlags()
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	stdout.Write(policy.Schema)
	return 0
}

func hashKeyFlags() *flag.FlagSet {
	return flags("hash-key", "hash-key [KEY]   (without KEY, the key is read from standard input)")
}

func hashKey(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := hashKeyFlags()
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	key, code := fs.Arg(0), 0
	if fs.NArg() == 0 {
		key, code = readKey(stdin, stderr)
	}
	if code != 0 {
		return code
	}
	fmt.Fprintln(stdout, identity.KeyDigest(key))
	return 0
}

// readKey reads an API key, the first line of stdin; without one, it
// says why on stderr and returns the exit code (1 if reading failed, 2
// if there was no key).
func readKey(stdin io.Reader, stderr io.Writer) (key string, code int) {
	line, err := bufio.NewReader(io.LimitReader(stdin, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "hash-key: reading the key:", err)
		return "", 1
	}
	key = strings.TrimRight(line, "\r\n")
	if key == "" {
		fmt.Fprintln(stderr, "hash-key: no key on standard input")
		return "", 2
	}
	return key, 0
}

func versionFlags() *flag.FlagSet { return flags("version", "version") }

func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := versionFlags()
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintf(stdout, "tollgate %s, commit %s, %s %s/%s\n", releaseVersion(version, bi), buildRevision(bi), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// buildVersion returns the version of this binary (see releaseVersion).
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return releaseVersion(version, bi)
}

// releaseVersion returns the version tollgate reports: override (set at
// build time) if any, else the module's version in the build information
// bi when it has one (go install ...@v1.2.3 or @latest sets it; a build
// from a tagged checkout, v1.2.3+dirty when modified), else "dev" (go
// build or go run without VCS information: see buildRevision).
func releaseVersion(override string, bi *debug.BuildInfo) string {
	switch {
	case override != "":
		return override
	case bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)":
		return bi.Main.Version
	}
	return "dev"
}

// buildRevision returns the commit the binary was built from (bi's),
// marked "(modified)" if the tree had uncommitted changes; "unknown"
// without the build's VCS information.
func buildRevision(bi *debug.BuildInfo) string {
	if bi == nil {
		return "unknown"
	}
	settings := make(map[string]string, len(bi.Settings))
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	rev := cmp.Or(settings["vcs.revision"], "unknown")
	if settings["vcs.modified"] == "true" {
		rev += " (modified)"
	}
	return rev
}

// serveFlags returns serve's flags.
func serveFlags(o *serveOptions) *flag.FlagSet {
	fs := flags("serve", "serve [--config FILE] [--redis URL] [--listen ADDR] [--admin ADDR] [--state FILE] [--simulate-budget DURATION]")
	envFlag(fs, &o.config, "config", "TOLLGATE_CONFIG", "the policy `file`, required")
	gatewayFlags(fs, o)
	fs.DurationVar(&o.simBudget, "simulate-budget", gateway.DefaultSimulateBudget, "the CPU time a dashboard or POST /simulate replay may take before it is stopped (answered 503)")
	return fs
}

func serve(args []string, stdout, stderr io.Writer) int {
	var o serveOptions
	fs := serveFlags(&o)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if err := checkServeArgs(o, fs.Args()); err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 2
	}
	return exitCode(stderr, runServe(context.Background(), o, stderr))
}

// gatewayFlags defines on fs the flags that say how serve serves its
// policy file, which check takes too, to refuse what serve would.
func gatewayFlags(fs *flag.FlagSet, o *serveOptions) {
	envFlag(fs, &o.redisURL, "redis", "TOLLGATE_REDIS_URL", "Redis `URL`; overrides the policy's store")
	fs.StringVar(&o.listen, "listen", "", "the public listen `address` (host:port); overrides listeners.public")
	fs.StringVar(&o.admin, "admin", "", "the admin listen `address` (host:port); overrides listeners.admin, which off loopback needs listeners.admin_token_env")
	fs.StringVar(&o.state, "state", "", "the `file` where admin changes (keys, tenants, rollbacks) are kept without Redis (default: the policy file's path + .state.json; with Redis they are kept there)")
}

// serveOptions are serve's flags.
type serveOptions struct {
	config, redisURL, listen, admin, state string
	simBudget                              time.Duration
}

// checkServeArgs checks serve's arguments: a policy file, a positive
// simulate budget, and nothing past the flags.
func checkServeArgs(o serveOptions, rest []string) error {
	switch {
	case o.simBudget <= 0:
		return errors.New("--simulate-budget must be positive")
	case o.config == "":
		return errors.New("--config (or TOLLGATE_CONFIG) is required")
	case len(rest) > 0:
		return fmt.Errorf("unexpected arguments %q", rest)
	}
	return nil
}

// runServe loads the policy file, logging to stderr as it asks, and
// serves it until stopped (see runGateway).
func runServe(ctx context.Context, o serveOptions, stderr io.Writer) error {
	p, err := loadServePolicy(o)
	if err != nil {
		return err
	}
	log := serveLogger(p, stderr)
	prepareServe(p, log)
	return serveGateway(ctx, p, o, log)
}

// loadServePolicy loads the policy file as serve serves it with o (its
// listen addresses in place of the file's), and refuses what the gateway
// cannot serve (see gatewayIssues).
func loadServePolicy(o serveOptions) (*policy.Policy, error) {
	env := policy.ProcessEnv()
	env.Public, env.Admin = o.listen, o.admin
	p, err := policy.LoadEnv(o.config, env)
	if err != nil {
		return nil, err
	}
	if err := gatewayIssues(p, o.redisURL); err != nil {
		return nil, err
	}
	return p, nil
}

// gatewayIssues returns all that the gateway refuses in p, a policy the
// middleware takes, served with the Redis URL redisURL if any: no public
// listener, routes without an upstream (at their lines), and a Redis URL
// that cannot work for p (see checkServeRedis). It returns nil for none.
func gatewayIssues(p *policy.Policy, redisURL string) error {
	var issues []policy.Issue
	if p.Public == "" {
		issues = append(issues, policy.Issue{File: p.Source, Path: "listeners.public",
			Msg: "no public listener: the gateway needs one (set it, or pass --listen)"})
	}
	issues = append(issues, p.GatewayIssues...)
	var err error
	if len(issues) > 0 {
		err = &policy.ValidationError{Issues: issues}
	}
	if rerr := checkServeRedis(p, redisURL); rerr != nil {
		err = errors.Join(err, fmt.Errorf("--redis: %w", rerr))
	}
	return err
}

// gatewayOptions returns the options of the gateway serve builds for p
// with o, logging to log.
func gatewayOptions(p *policy.Policy, o serveOptions, log *slog.Logger) gateway.Options {
	return gateway.Options{Policy: p, RedisURL: o.redisURL, Logger: log, Public: o.listen, Admin: o.admin, Version: buildVersion(),
		StateFile: cmp.Or(o.state, o.config+".state.json"), SimulateBudget: o.simBudget}
}

// serveGateway builds the gateway for p and runs it until stopped (see
// runGateway).
func serveGateway(ctx context.Context, p *policy.Policy, o serveOptions, log *slog.Logger) error {
	g, err := gateway.New(gatewayOptions(p, o, log))
	if err != nil {
		return err
	}
	defer g.Close()
	if err := runGateway(ctx, g, p, o.config, log); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// exitCode returns the exit code of a command that ended with err: 0
// for nil, else 1, after printing err to stderr unless it is errStopped
// (already logged).
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	if !errors.Is(err, errStopped) {
		fmt.Fprintln(stderr, err)
	}
	return 1
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
	hopts := logOptions(p.Log.Level)
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

// logOptions returns the options of tollgate's log handlers at level:
// every duration is written as text ("10s", "20ms"), not as the JSON
// handler's count of nanoseconds.
func logOptions(level slog.Leveler) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
}

// durationText is a ReplaceAttr that writes a duration as its String().
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// prepareServe logs the policy's warnings, and sends the trace
// exporter's errors to the log.
func prepareServe(p *policy.Policy, log *slog.Logger) {
	logPolicyWarnings(p, log)
	if p.Tracing.On() {
		// The trace exporter's errors (a collector down or refusing) go to
		// the log, sampled per message, not to the standard logger.
		sampled := logsample.Logger(log)
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			sampled.Warn("sending traces failed", slog.String("error", err.Error()))
		}))
	}
}

// checkServeRedis refuses a Redis URL, if given, that is invalid, or
// that p cannot use: every instance on one store must hash subjects with
// the same identity secret, and a sentinel store (store.mode) needs its
// master set named.
func checkServeRedis(p *policy.Policy, redisURL string) error {
	if redisURL == "" {
		return nil
	}
	if err := policy.CheckRedisURL(redisURL); err != nil {
		return err
	}
	switch {
	case p.SecretGenerated:
		return errors.New("a shared Redis store needs identity.secret or identity.secret_env in the policy, so every instance hashes subjects alike")
	case p.Store.Mode == "sentinel" && !strings.Contains(redisURL, "master_set="):
		return errors.New("the policy's store.mode sentinel needs ?master_set=<name> in the url")
	}
	return nil
}

// logPolicyWarnings logs p's warnings, and that its identity secret is
// random if it names none.
func logPolicyWarnings(p *policy.Policy, log *slog.Logger) {
	for _, w := range p.Warnings {
		log.Warn("policy warning", slog.String("warning", w.Msg), slog.String("file", w.File), slog.Int("line", w.Line), slog.String("path", w.Path))
	}
	if p.SecretGenerated {
		log.Warn("no identity secret configured: using a random one for this process (fine for one instance on the memory store)")
	}
}

// runGateway serves g on p's listeners until ctx ends or SIGTERM or
// SIGINT comes, reloading the policy file config when it changes and on SIGHUP (an
// invalid file is refused and the active policy keeps serving). An error
// serving is logged (errStopped).
func runGateway(ctx context.Context, g *gateway.Gateway, p *policy.Policy, config string, log *slog.Logger) error {
	pub, adm, err := listenGateway(p)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
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

// listenGateway opens p's public and admin listeners.
func listenGateway(p *policy.Policy) (pub, adm net.Listener, err error) {
	pub, err = net.Listen("tcp", p.Public)
	if err != nil {
		return nil, nil, err
	}
	adm, err = net.Listen("tcp", p.Admin)
	if err != nil {
		pub.Close()
		return nil, nil, err
	}
	return pub, adm, nil
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
