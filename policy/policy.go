package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // calendar quotas name IANA zones; do not depend on the host's

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/overload"
)

// Policy is a validated, compiled policy file. It is immutable. Budgets
// walks every budget it holds.
type Policy struct {
	Version string
	Source  string // the file it was loaded from
	// Hash is the hex SHA-256 of the file (and its keys file): what is
	// running, exactly.
	Hash string
	// KeysPath is the keys file's path ("" when the keys are inline).
	KeysPath      string
	Public, Admin string // listen addresses
	// AdminToken, when set, is required as a bearer token on every admin
	// request.
	AdminToken string
	Store      StoreSpec
	// Secret keys the identity HMAC. When the file sets none (memory store
	// only) it is the Env's (ProcessEnv's: random, drawn once per process,
	// so a reload keeps it) and SecretGenerated is true.
	Secret          []byte
	SecretGenerated bool
	UserHeader      string
	TrustedProxies  []netip.Prefix
	// MaxCredentialBody is the largest form, JSON or multipart body read
	// for a credential (IdentitySpec.MaxBody); zero means
	// DefaultMaxCredentialBody.
	MaxCredentialBody int64
	// CredentialFields are the query, body and cookie fields read for a
	// credential (IdentitySpec.CredentialFields); nil means
	// identity.DefaultFields.
	CredentialFields identity.Fields
	// Trusted is TrustedProxies as the identity package uses it.
	Trusted       identity.TrustedProxies
	Plans         map[string]*Plan
	AnonymousPlan *Plan
	UserPlan      *Plan
	// JWT, when non-nil, verifies bearer JWTs (JWTSpec compiled).
	JWT *JWT
	// Allowlist, when non-nil, lists subjects never refused by a rate
	// limit.
	Allowlist *Allowlist
	// Keys maps an API key digest ("sha256:<hex>") to the key.
	Keys map[string]*APIKey
	// TenantPlans overrides the plan of every key of a tenant.
	TenantPlans map[string]*Plan
	InvalidKey  *Budget // the per-IP limit on invalid API keys
	Routes      []*Route
	// condHeaders and condQuery are the headers and query parameters
	// that some route matches or keys on.
	condHeaders, condQuery []string
	hostRoutes             bool // some route names a host
	LegacyHeaders          bool
	// LLMHeaders adds the x-ratelimit-*-tokens headers (HeaderSpec.LLM).
	LLMHeaders bool
	// Log is how the gateway logs (LogSpec compiled).
	Log             LogSettings
	UpstreamTimeout time.Duration
	// Tracing is where and how the gateway sends traces (TracingSpec
	// compiled); its zero value is off.
	Tracing TracingSettings
	// Region is this gateway's region ("" without regions); every budget
	// (Budgets) already holds this region's share.
	Region string
	// Warnings lists what the file allows that is probably a mistake but
	// not an error (trusted_proxies covering every address): tollgate
	// check prints them and tollgate serve logs them.
	Warnings []Issue
	// GatewayIssues lists, at their lines, what the gateway (tollgate
	// serve) refuses in a policy the middleware takes: routes without an
	// upstream. tollgate check refuses them as serve does.
	GatewayIssues []Issue

	// Conns bounds the listeners' connections and how slow a client may be.
	Conns ConnLimits
}

// LogSettings are the compiled logging settings.
type LogSettings struct {
	Level           slog.Level
	Text            bool    // text lines instead of JSON
	AccessSample    float64 // the share of requests logged, 0 to 1
	AccessPerSecond int     // the most access lines a second
}

// TracingSettings are the compiled tracing settings.
type TracingSettings struct {
	// URL is where spans are posted (the endpoint's /v1/traces); empty
	// means tracing is off.
	URL         string
	Sample      float64 // the share of new traces recorded, 0 to 1
	ServiceName string
}

// On reports whether tracing is on.
func (t TracingSettings) On() bool { return t.URL != "" }

// Budget is one limit as enforced: its header name, the limit, and the
// name under which its state is stored.
type Budget struct {
	Name  string
	Limit tollgate.Limit
	// StoreName names the budget's state in the store: what the budget is
	// (its kind and names) and the identity of its limit, never the
	// policy's version (storenames.go lists every name). So a new version that
	// leaves a limit as it was keeps what was spent of it, a daily or
	// monthly quota included, and a limit changed in anything it enforces
	// (algorithm, rate, period, burst, max_delay, calendar, time zone, a
	// region's share) starts afresh. Shadow mode is not part of it: a
	// shadow budget is charged as an enforced one would be.
	StoreName string
	// Shadow budgets are evaluated and counted but never enforced. A
	// file-level shadow: true sets it on every budget but the guards
	// (BudgetRole.Guard), which are never in shadow.
	Shadow bool
	// Handle is the limit prepared once, under StoreName, for the store
	// requests of the budget (see Request): stores neither validate nor
	// prepare it again.
	Handle *algo.Handle
	// Unit is what the budget counts: requests, or tokens on a token
	// route (Route.Tokens).
	Unit Unit
	// Models, when non-nil, are the models the budget applies to (a token
	// route's calls for them); PerModel counts each apart.
	Models   map[string]bool
	PerModel bool

	id string // the kind and names part of StoreName
}

// Request returns the store request that charges cost to subject (in
// group tag, "" for the subject's own) under the budget.
func (b *Budget) Request(subject, tag string, cost int64) tollgate.Request {
	if b.Handle == nil { // a budget made outside compile
		return tollgate.Request{Name: b.StoreName, Subject: subject, Tag: tag, Limit: b.Limit, Cost: cost}
	}
	r := b.Handle.Request(subject, cost)
	r.Tag = tag
	return r
}

// newBudget returns the budget whose header name is name, enforcing l,
// whose state is stored under id (made in storenames.go).
func newBudget(name, id string, l tollgate.Limit, shadow bool) *Budget {
	b := &Budget{Name: name, id: id, Shadow: shadow}
	b.setLimit(l)
	return b
}

// setLimit makes l the budget's limit, and names its state after it.
func (b *Budget) setLimit(l tollgate.Limit) {
	b.Limit = l
	b.StoreName = storeName(unitID(b.id, b.Unit), l)
}

// Plan is what a subject is entitled to.
type Plan struct {
	Name string
	// Limits all apply to each subject, charged together, all or nothing.
	Limits []*Budget
	// Tenant lists the budgets shared by all users of one tenant, charged
	// in the same atomic call as Limits (none: each user counts alone).
	Tenant []*Budget
	// Unlimited plans have no limits: their subjects are counted, never
	// refused by a rate limit (see PlanSpec.Unlimited).
	Unlimited bool
}

// All yields the plan's limits, then its tenant budgets.
func (pl *Plan) All() iter.Seq[*Budget] {
	return func(yield func(*Budget) bool) {
		for _, b := range pl.Limits {
			if !yield(b) {
				return
			}
		}
		for _, b := range pl.Tenant {
			if !yield(b) {
				return
			}
		}
	}
}

// Allowlist is the subjects counted but never refused by a rate limit
// (AllowlistSpec compiled).
type Allowlist struct {
	Keys, Users, Tenants map[string]bool
	Addresses            []netip.Prefix
}

// Address reports whether the client address a is on the list.
func (l *Allowlist) Address(a netip.Addr) bool {
	if l == nil {
		return false
	}
	a = a.Unmap()
	for _, p := range l.Addresses {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// JWT is how bearer JWTs are verified and whom they name (JWTSpec
// compiled, defaults filled in).
type JWT struct {
	JWKSURL    string
	Issuer     string
	Audience   []string
	Algorithms []string
	// HMACSecret is the HS* algorithms' secret (nil without them).
	HMACSecret                           []byte
	ClockSkew                            time.Duration
	SubjectClaim, TenantClaim, PlanClaim string
	// DefaultPlan is the plan of a token whose plan claim is absent or
	// names no plan.
	DefaultPlan                         *Plan
	RefreshInterval, MinRefreshInterval time.Duration
	// KeyClaims are the claims route limits are counted per (limit_key
	// claim:<name>): a verified token's are read (jwtauth.Claims.Extra).
	KeyClaims []string
}

// Symmetric reports whether alg is an HMAC algorithm (HS256, ...).
func Symmetric(alg string) bool { return strings.HasPrefix(alg, "HS") }

// APIKey is one configured key.
type APIKey struct {
	ID, Tenant, User string
	// Plan is the plan in force: the tenant's override, else OwnPlan.
	Plan *Plan
	// OwnPlan is the plan the key itself names.
	OwnPlan *Plan
}

// Route is one compiled route.
type Route struct {
	Name, Method, Path string
	Prefix             bool
	key                string   // MatchKey(Path): what Match compares
	segs, params       []string // a path with parameters: its segments ("" for a parameter) and parameter names
	// Params names the path's parameters (in lower case), nil for none.
	Params []string
	// Host ("" for any), Headers and Query are what the request must
	// carry besides its path and method.
	Host           string
	Headers, Query []Cond
	// LimitKey is what the route's limit is counted per; nil for the
	// subject.
	LimitKey []KeyPart
	Upstream string
	Group    string
	Cost     int64
	// Limit, when non-nil, replaces the subject's plan on this route, or
	// with LimitAdds is charged beside it in the same atomic call.
	Limit     *Plan
	LimitAdds bool
	// Refusal, when non-nil, is the answer to a request the route's
	// rate limits, quotas or concurrency limit refuse.
	Refusal *Refusal
	// Global, when non-nil, is one budget for the route shared by every
	// subject. It lives in another Redis slot, so it cannot be decided in
	// the same call as the subject's (and tenant's) limits: the request
	// holds a place in it first, which is charged once those limits admit
	// the request and given back if they refuse it (see package
	// httplimit). So nothing is ever admitted past any limit, and a
	// refusal by either side charges neither.
	Global *Budget
	// Candidate, when non-nil, is a shadow budget per subject evaluated
	// beside the enforced limits.
	Candidate  *Budget
	FailClosed bool
	// Login, when non-nil, guards this route against password guessing.
	Login *Login
	// Concurrency, when non-nil, bounds its requests in flight.
	Concurrency *Concurrency
	// Steps are the checks its calls take, in order (see Step).
	Steps []Step
	// Tokens, when non-nil, makes the route an LLM API charged by the
	// token (TokensSpec compiled).
	Tokens *Tokens
	// Adaptive, when non-nil, is the adaptive concurrency limit of the
	// route's upstream (AdaptiveSpec compiled).
	Adaptive *Adaptive
}

// Adaptive is a compiled adaptive concurrency limit. Routes sharing an
// upstream share one: the same Upstream, Config and Plans.
type Adaptive struct {
	// Upstream names the limit: the scheme and host of the routes'
	// upstream (or "group:<group>" for a route without one, which the
	// middleware serves).
	Upstream string
	// Config is the limiter's; its Shares are the shares of Plans, in
	// that order.
	Config overload.Config
	Plans  []string
	Shadow bool
}

// Class returns the class of plan (a name) in a's limiter: its index in
// Plans, or -1 for a plan with no share.
func (a *Adaptive) Class(plan string) int { return slices.Index(a.Plans, plan) }

// Refusal is a route's answer to a refused request (RefusalSpec
// compiled): Status, and Body of ContentType when Body is not empty.
type Refusal struct {
	Status      int
	ContentType string
	Body        []byte
}

// Login is a compiled login guard.
type Login struct {
	AccountField    string
	MaxBody         int64
	FailureStatuses map[int]bool
	Rule            algo.LockoutRule
	// StoreName names the accounts' guard state: "login/<group>", neither
	// the version nor the rule. The state records what happened to an
	// account (failures, locks and their level), which means the same
	// under any rule, so a new version, whatever its rule, keeps every
	// account's failures and locks (a rule change never unlocks an
	// account), and instances running two versions at once during a
	// rollout count one account's failures together.
	StoreName  string
	IPFailures *Budget
}

// Concurrency is a compiled concurrency limit.
type Concurrency struct {
	Limit    int64
	PerRoute bool
	LeaseTTL time.Duration
	// StoreName names the leases: "concurrency/<group>", neither the
	// version nor the limit. A lease is a request in flight, whatever the
	// limit, so a new version keeps counting the requests already in
	// flight against its limit instead of admitting its whole limit
	// beside them.
	StoreName string
}

// Issue is one thing wrong (an error), or probably wrong (a warning),
// in a policy file: where, and what. (An HTTP problem details body is
// httplimit.Problem, unrelated.)
type Issue struct {
	File string
	Line int // 0 when unknown
	Path string
	Msg  string
}

// String returns "file:line: path: message".
func (p Issue) String() string {
	loc := p.File
	if p.Line > 0 {
		loc += ":" + strconv.Itoa(p.Line)
	}
	if p.Path != "" {
		return fmt.Sprintf("%s: %s: %s", loc, p.Path, p.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, p.Msg)
}

// ValidationError lists every issue found in a policy file.
type ValidationError struct{ Issues []Issue }

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Issues))
	for i, p := range e.Issues {
		lines[i] = p.String()
	}
	return "invalid policy:\n  " + strings.Join(lines, "\n  ")
}

// Load reads and compiles the policy file at path (and its keys file),
// with the process's environment (ProcessEnv).
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading policy: %w", err)
	}
	return ParseEnv(data, path, ProcessEnv())
}

// LoadEnv is Load with env in place of the process's environment.
func LoadEnv(path string, env Env) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading policy: %w", err)
	}
	return ParseEnv(data, path, env)
}

// Parse compiles a policy from YAML, with the process's environment
// (ProcessEnv). name is used in error messages and to find a keys_file
// relative to it.
func Parse(data []byte, name string) (*Policy, error) {
	return ParseEnv(data, name, ProcessEnv())
}

// ParseEnv compiles a policy from YAML as Parse does, taking environment
// variables and the generated secret from env alone.
func ParseEnv(data []byte, name string, env Env) (*Policy, error) {
	c := &compiler{file: name}
	var f File
	c.lines = c.decode(data, name, &f)
	if c.unreadable {
		return nil, c.err()
	}
	decoded := len(c.problems)
	keys, ok := c.keys(&f, name, env)
	if !ok {
		return nil, c.err()
	}
	p := c.compile(&f, env)
	c.compileKeys(p, keys.list, keys.lines, keys.file)
	c.allowlist(p, f.Allowlist)
	c.withoutEchoes(decoded)
	if len(c.problems) > 0 {
		return nil, c.err()
	}
	p.Source = name
	p.Warnings = c.warnings
	if f.KeysFile != "" && !env.NoFiles {
		p.KeysPath = keysPath(name, f.KeysFile)
	}
	p.Hash = policyHash(data, p.KeysPath)
	return p, nil
}

// keyList is where the API keys of a policy are listed: the file's own
// list, or its keys file's, with the line map of the file they are in.
type keyList struct {
	list  []KeySpec
	lines map[string]int
	file  string
}

// keys returns the API keys of the file f (named name): its own, or
// those of its keys file, which it reads unless env opens no files. ok
// is false when the keys file cannot be read or decoded.
func (c *compiler) keys(f *File, name string, env Env) (keys keyList, ok bool) {
	keys = keyList{list: f.APIKeys, lines: c.lines, file: name}
	if f.KeysFile == "" {
		return keys, true
	}
	if env.NoFiles {
		c.warnf("keys_file", "not read: this policy comes from a request, and such a policy opens no file; it has only the keys listed in api_keys")
		return keys, true
	}
	kp := keysPath(name, f.KeysFile)
	fileKeys, ok := c.readKeysFile(name, kp)
	if !ok {
		return keys, false
	}
	if len(f.APIKeys) > 0 && len(fileKeys.list) > 0 {
		c.add(c.lines, name, "keys_file", "API keys are listed both here and in %s; keep them in one place", f.KeysFile)
	}
	if len(fileKeys.list) > 0 {
		keys = fileKeys
	}
	return keys, true
}

// readKeysFile reads and decodes the keys file at kp that the policy
// file name names; ok is false when it cannot be read or decoded.
func (c *compiler) readKeysFile(name, kp string) (keys keyList, ok bool) {
	data, err := os.ReadFile(kp)
	if err != nil {
		c.add(c.lines, name, "keys_file", "reading keys file: %v", err)
		return keyList{}, false
	}
	var kf struct {
		APIKeys []KeySpec `yaml:"api_keys"`
	}
	kl := c.decode(data, kp, &kf)
	return keyList{list: kf.APIKeys, lines: kl, file: kp}, len(c.problems) == 0
}

// keysPath returns the path of the keys file keysFile that the policy
// file name names: relative to name's directory unless absolute.
func keysPath(name, keysFile string) string {
	if filepath.IsAbs(keysFile) {
		return keysFile
	}
	return filepath.Join(filepath.Dir(name), keysFile)
}

// policyHash returns the hex SHA-256 of a policy file's data and of its
// keys file at keysPath, if any and readable.
func policyHash(data []byte, keysPath string) string {
	h := sha256.New()
	h.Write(data)
	if keysPath != "" {
		if kd, err := os.ReadFile(keysPath); err == nil {
			h.Write(kd)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Match returns the route for a request, or nil. path should be cleaned
// (CleanPath); routes are matched on MatchKey of it, so spellings that
// common servers read as one path (upper case, path parameters) match
// alike. A prefix route (/api/) matches its path, the path without the
// slash (/api) and every path under it; an exact route (/login) matches
// its path and the path with a trailing slash (/login/), which many
// upstreams serve alike. The most specific route wins: one whose path is
// the request's, else the longest match (an exact /api beats the prefix
// /api/ for /api, which beats the exact /api for /api/); at equal
// specificity a route naming the method beats one that matches any.
//
// Match sees no host, header or query: a route that requires any of them
// does not match (see MatchRequest).
func (p *Policy) Match(method, path string) *Route {
	r, _ := p.MatchRequest(RouteRequest{Method: method, Path: path})
	return r
}
