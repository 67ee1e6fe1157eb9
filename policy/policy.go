package policy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // calendar quotas name IANA zones; do not depend on the host's

	"github.com/redis/rueidis"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/identity"
)

// Policy is a validated, compiled policy file. It is immutable.
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
	// only) it is random per process and SecretGenerated is true.
	Secret          []byte
	SecretGenerated bool
	UserHeader      string
	TrustedProxies  []netip.Prefix
	// Trusted is TrustedProxies as the identity package uses it.
	Trusted       identity.TrustedProxies
	Plans         map[string]*Plan
	AnonymousPlan *Plan
	UserPlan      *Plan
	// Keys maps an API key digest ("sha256:<hex>") to the key.
	Keys map[string]*APIKey
	// TenantPlans overrides the plan of every key of a tenant.
	TenantPlans     map[string]*Plan
	InvalidKey      *Budget // the per-IP limit on invalid API keys
	Routes          []*Route
	LegacyHeaders   bool
	UpstreamTimeout time.Duration
	// Region is this gateway's region ("" without regions); every budget
	// below already holds this region's share.
	Region string
	// Warnings lists what the file allows that is probably a mistake but
	// not an error (trusted_proxies covering every address): tollgate
	// check prints them and tollgate serve logs them.
	Warnings []Problem

	// Conns bounds the listeners' connections and how slow a client may be.
	Conns ConnLimits
}

// Budget is one limit as enforced: its header name, the limit, and the
// name under which its state is stored.
type Budget struct {
	Name  string
	Limit tollgate.Limit
	// StoreName names the budget's state in the store: what the budget is
	// (its kind and names, see newBudget) and the identity of its limit
	// (see storeName), never the policy's version. So a new version that
	// leaves a limit as it was keeps what was spent of it, a daily or
	// monthly quota included, and a limit changed in anything it enforces
	// (algorithm, rate, period, burst, max_delay, calendar, time zone, a
	// region's share) starts afresh. Shadow mode is not part of it: a
	// shadow budget is charged as an enforced one would be.
	StoreName string
	// Shadow budgets are evaluated and counted but never enforced.
	Shadow bool

	id string // the kind and names part of StoreName
}

// newBudget returns the budget whose header name is name, enforcing l,
// whose state is stored under id: "plan/<plan>" for a plan's one limit,
// "plan/<plan>/<limit>" for one of several, "tenant/<plan>",
// "route/<group>", "global/<group>", "candidate/<group>", "invalid_key"
// or "login_ip/<group>". Names hold no '/' or '@' (namePattern), so no
// two budgets share an id.
func newBudget(name, id string, l tollgate.Limit, shadow bool) *Budget {
	b := &Budget{Name: name, id: id, Shadow: shadow}
	b.setLimit(l)
	return b
}

// setLimit makes l the budget's limit, and names its state after it.
func (b *Budget) setLimit(l tollgate.Limit) {
	b.Limit = l
	b.StoreName = storeName(b.id, l)
}

// storeName returns "<id>@<hash>", the hash being the first 10 hex digits
// (40 bits) of the SHA-256 of the limit's [tollgate.LimitName], which
// differs for limits that enforce anything differently: a changed limit
// keeps its old state only if the hashes collide, once in 2^40 changes.
// The hash keeps keys as short as "<version>:plan:free" made them with a
// 10-character version, so a store holds as many.
func storeName(id string, l tollgate.Limit) string {
	sum := sha256.Sum256([]byte(tollgate.LimitName(l)))
	return id + "@" + hex.EncodeToString(sum[:5])
}

// Plan is what a subject is entitled to.
type Plan struct {
	Name string
	// Limits all apply to each subject, charged together, all or nothing.
	Limits []*Budget
	// Tenant, if set, is shared by all users of one tenant and charged in
	// the same atomic call as Limits.
	Tenant *Budget
}

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
	key                string // MatchKey(Path): what Match compares
	Upstream           string
	Group              string
	Cost               int64
	// Limit, when non-nil, replaces the subject's plan on this route.
	Limit *Plan
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

// Problem is one thing wrong with a policy file.
type Problem struct {
	File string
	Line int // 0 when unknown
	Path string
	Msg  string
}

func (p Problem) String() string {
	loc := p.File
	if p.Line > 0 {
		loc += ":" + strconv.Itoa(p.Line)
	}
	if p.Path != "" {
		return fmt.Sprintf("%s: %s: %s", loc, p.Path, p.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, p.Msg)
}

// ValidationError lists every problem found in a policy file.
type ValidationError struct{ Problems []Problem }

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid policy:\n  " + strings.Join(lines, "\n  ")
}

// Load reads and compiles the policy file at path (and its keys file).
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading policy: %w", err)
	}
	return Parse(data, path)
}

// Parse compiles a policy from YAML. name is used in error messages and
// to find a keys_file relative to it.
func Parse(data []byte, name string) (*Policy, error) {
	c := &compiler{file: name}
	var f File
	c.lines = c.decode(data, name, &f)
	if len(c.problems) > 0 {
		return nil, c.err()
	}
	keys := f.APIKeys
	keyLines, keyFile := c.lines, name
	if f.KeysFile != "" {
		kp := f.KeysFile
		if !filepath.IsAbs(kp) {
			kp = filepath.Join(filepath.Dir(name), kp)
		}
		data, err := os.ReadFile(kp)
		if err != nil {
			c.add(c.lines, name, "keys_file", "reading keys file: %v", err)
			return nil, c.err()
		}
		var kf struct {
			APIKeys []KeySpec `yaml:"api_keys"`
		}
		kl := c.decode(data, kp, &kf)
		if len(c.problems) > 0 {
			return nil, c.err()
		}
		if len(f.APIKeys) > 0 && len(kf.APIKeys) > 0 {
			c.add(c.lines, name, "keys_file", "API keys are listed both here and in %s; keep them in one place", f.KeysFile)
		}
		if len(kf.APIKeys) > 0 {
			keys, keyLines, keyFile = kf.APIKeys, kl, kp
		}
	}
	p := c.compile(&f)
	c.compileKeys(p, keys, keyLines, keyFile)
	if len(c.problems) > 0 {
		return nil, c.err()
	}
	p.Source = name
	p.Warnings = c.warnings
	h := sha256.New()
	h.Write(data)
	if f.KeysFile != "" {
		kp := f.KeysFile
		if !filepath.IsAbs(kp) {
			kp = filepath.Join(filepath.Dir(name), kp)
		}
		if kd, err := os.ReadFile(kp); err == nil {
			h.Write(kd)
		}
		p.KeysPath = kp
	}
	p.Hash = hex.EncodeToString(h.Sum(nil))
	return p, nil
}

type compiler struct {
	file     string
	lines    map[string]int
	problems []Problem
	warnings []Problem
	zone     string // the file's default time zone
}

func (c *compiler) err() error {
	sort.SliceStable(c.problems, func(i, j int) bool {
		a, b := c.problems[i], c.problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
	return &ValidationError{Problems: c.problems}
}

// add records a problem at a path of the file whose line map is lines.
func (c *compiler) add(lines map[string]int, file, path, format string, args ...any) {
	c.problems = append(c.problems, problemAt(lines, file, path, format, args...))
}

func (c *compiler) addf(path, format string, args ...any) {
	c.add(c.lines, c.file, path, format, args...)
}

// warnf records a warning: the policy loads, but check and serve say it.
func (c *compiler) warnf(path, format string, args ...any) {
	c.warnings = append(c.warnings, problemAt(c.lines, c.file, path, format, args...))
}

// problemAt places a message at a path of the file whose line map is lines.
func problemAt(lines map[string]int, file, path, format string, args ...any) Problem {
	line := 0
	for p := path; p != ""; p = parent(p) {
		if l, ok := lines[p]; ok {
			line = l
			break
		}
	}
	return Problem{File: file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// parent returns the enclosing path: "routes[2].cost" -> "routes[2]" -> "routes".
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// decode strictly decodes data into v and returns a map from field paths to
// line numbers; decoding problems are recorded with their lines.
func (c *compiler) decode(data []byte, file string, v any) map[string]int {
	lines := map[string]int{}
	if len(bytes.TrimSpace(data)) == 0 {
		c.problems = append(c.problems, Problem{File: file, Msg: "the file is empty"})
		return lines
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		c.yamlProblems(file, err)
		return lines
	}
	walk(&root, "", lines)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		c.yamlProblems(file, err)
	}
	return lines
}

func (c *compiler) yamlProblems(file string, err error) {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	for _, m := range msgs {
		pr := Problem{File: file, Msg: m}
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			pr.Line, _ = strconv.Atoi(g[1])
			pr.Msg = g[2]
		}
		pr.Msg = friendlier(pr.Msg)
		c.problems = append(c.problems, pr)
	}
}

var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// friendlier rewords the YAML decoder's messages for people.
func friendlier(m string) string {
	if g := unknownField.FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("unknown field %q (misspelt?)", g[1])
	}
	if strings.Contains(m, "into time.Duration") {
		return m + " (want a duration such as 500ms, 30s, 1m, 1h)"
	}
	return m
}

// walk records the line of every mapping value and sequence item.
func walk(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walk(c, path, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			lines[p] = k.Line
			walk(v, p, lines)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			walk(c, p, lines)
		}
	}
}

var (
	namePattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	versionPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)
	digestPattern  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	methodPattern  = regexp.MustCompile(`^[A-Z]{1,16}$`)
	headerPattern  = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

func (c *compiler) compile(f *File) *Policy {
	p := &Policy{
		Version:         f.Version,
		Store:           f.Store,
		Plans:           map[string]*Plan{},
		Keys:            map[string]*APIKey{},
		LegacyHeaders:   f.Headers.Legacy,
		UpstreamTimeout: f.Upstream.Timeout,
	}
	c.zone = f.TimeZone
	if f.TimeZone != "" {
		if _, err := time.LoadLocation(f.TimeZone); err != nil {
			c.addf("time_zone", "unknown time zone %q", f.TimeZone)
		}
	}
	if !versionPattern.MatchString(f.Version) {
		c.addf("version", "version must be 1-32 letters, digits, '.', '_' or '-' (got %q)", f.Version)
	}

	// Listeners.
	p.Public, p.Admin = f.Listeners.Public, f.Listeners.Admin
	if p.Admin == "" {
		p.Admin = "127.0.0.1:9090"
	}
	if env := f.Listeners.AdminTokenEnv; env != "" {
		if p.AdminToken = os.Getenv(env); len(p.AdminToken) < 16 {
			c.addf("listeners.admin_token_env", "environment variable %s must hold a token of at least 16 bytes", env)
		}
	}
	if host, _, err := net.SplitHostPort(p.Admin); err == nil && !identity.LoopbackHost(host) && p.AdminToken == "" {
		c.addf("listeners.admin", "the admin listener on %s is not loopback: set admin_token_env so it requires a token", p.Admin)
	}
	for _, l := range []struct{ path, addr string }{{"listeners.public", p.Public}, {"listeners.admin", p.Admin}} {
		if _, port, err := net.SplitHostPort(l.addr); err != nil || port == "" {
			c.addf(l.path, "want host:port, got %q", l.addr)
		}
	}
	if p.Public != "" && p.Public == p.Admin {
		c.addf("listeners.admin", "the admin listener must not share the public address %s", p.Public)
	}
	p.Conns = c.connLimits(f.Listeners)

	// Store.
	switch p.Store.Type {
	case "", "memory":
		p.Store.Type = "memory"
		if p.Store.URL != "" {
			c.addf("store.url", "a url is for the redis store; set type: redis")
		}
	case "redis":
		if p.Store.URL == "" {
			c.addf("store", "the redis store needs a url (redis://host:port/db)")
		} else if err := CheckRedisURL(p.Store.URL); err != nil {
			c.addf("store.url", "%v", err)
		}
	default:
		c.addf("store.type", "unknown store %q (want memory or redis)", p.Store.Type)
	}
	if p.Store.MaxKeys < 0 {
		c.addf("store.max_keys", "must not be negative")
	}
	if b := p.Store.MaxBytes; b != 0 && b < 1<<20 {
		c.addf("store.max_bytes", "want at least 1MiB (or none, for the default 256MiB), got %v", b)
	}
	switch p.Store.Mode {
	case "", "standalone", "cluster":
	case "sentinel":
		if p.Store.Type == "redis" && !strings.Contains(p.Store.URL, "master_set=") {
			c.addf("store.url", "sentinel mode needs ?master_set=<name> in the url")
		}
	default:
		c.addf("store.mode", "unknown mode %q (want standalone, cluster or sentinel)", p.Store.Mode)
	}
	switch {
	case p.Store.Timeout == 0:
		p.Store.Timeout = 20 * time.Millisecond
	case p.Store.Timeout < time.Millisecond:
		c.addf("store.timeout", "must be at least 1ms, got %v", p.Store.Timeout)
	}
	if p.Store.Instances < 0 {
		c.addf("store.instances", "must not be negative")
	}
	switch p.Store.CalendarFallback {
	case "", "closed", "share":
	default:
		c.addf("store.calendar_fallback", "want closed or share, got %q", p.Store.CalendarFallback)
	}
	if p.Store.Breaker.OpenFor < 0 {
		c.addf("store.breaker.open_for", "must not be negative")
	}

	// Identity.
	id := f.Identity
	switch {
	case id.Secret != "" && id.SecretEnv != "":
		c.addf("identity.secret_env", "set secret or secret_env, not both")
	case id.SecretEnv != "":
		if v := os.Getenv(id.SecretEnv); v == "" {
			c.addf("identity.secret_env", "environment variable %s is empty or unset", id.SecretEnv)
		} else {
			p.Secret = []byte(v)
		}
	case id.Secret != "":
		p.Secret = []byte(id.Secret)
	}
	if p.Secret != nil && len(p.Secret) < 16 {
		c.addf("identity", "the secret must be at least 16 bytes")
	}
	if p.Secret == nil {
		if p.Store.Type == "redis" {
			c.addf("identity", "a shared store needs identity.secret or identity.secret_env, so every instance hashes subjects alike")
		}
		p.Secret = make([]byte, 32)
		rand.Read(p.Secret)
		p.SecretGenerated = true
	}
	if id.UserHeader != "" && !headerPattern.MatchString(id.UserHeader) {
		c.addf("identity.user_header", "not a header name: %q", id.UserHeader)
	}
	p.UserHeader = id.UserHeader
	for i, s := range id.TrustedProxies {
		pre, err := parsePrefix(s)
		if err != nil {
			c.addf(fmt.Sprintf("identity.trusted_proxies[%d]", i), "%v", err)
			continue
		}
		p.TrustedProxies = append(p.TrustedProxies, pre)
	}
	if len(p.TrustedProxies) == len(id.TrustedProxies) {
		cidrs := make([]string, len(p.TrustedProxies))
		for i, pre := range p.TrustedProxies {
			cidrs[i] = pre.String()
		}
		var err error
		if p.Trusted, err = identity.ParseTrustedProxies(cidrs); err != nil {
			c.addf("identity.trusted_proxies", "%v", err)
		}
		for _, w := range TrustWarnings(p.Trusted.Prefixes()) {
			c.warnf("identity.trusted_proxies", "%s", w)
		}
	}

	// Plans.
	if len(f.Plans) == 0 {
		c.addf("plans", "define at least one plan")
	}
	names := make([]string, 0, len(f.Plans))
	for n := range f.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := "plans." + n
		if !namePattern.MatchString(n) {
			c.addf(path, "plan names are 1-64 letters, digits, '.', '_' or '-'")
		}
		if pl := c.plan(path, n, f.Plans[n]); pl != nil {
			p.Plans[n] = pl
		}
	}
	planRef := func(path, name string) *Plan {
		if name == "" {
			return nil
		}
		pl, ok := p.Plans[name]
		if !ok {
			if _, defined := f.Plans[name]; !defined {
				c.addf(path, "no plan named %q", name)
			}
		}
		return pl
	}
	if id.AnonymousPlan == "" {
		c.addf("identity.anonymous_plan", "name the plan for requests identified only by client IP")
	}
	p.AnonymousPlan = planRef("identity.anonymous_plan", id.AnonymousPlan)
	p.UserPlan = planRef("identity.user_plan", id.UserPlan)
	if p.UserPlan == nil && id.UserPlan == "" {
		p.UserPlan = p.AnonymousPlan
	}

	// Tenant overrides.
	p.TenantPlans = map[string]*Plan{}
	for t, ts := range f.Tenants {
		if pl := planRef("tenants."+t+".plan", ts.Plan); pl != nil {
			p.TenantPlans[t] = pl
		} else if ts.Plan == "" {
			c.addf("tenants."+t, "name the tenant's plan")
		}
	}

	// Invalid-key limit.
	ik := LimitSpec{Algorithm: "fixed_window", Rate: 10, Period: time.Minute}
	if f.InvalidKeyLimit != nil {
		ik = *f.InvalidKeyLimit
	}
	if l, ok := c.limit("invalid_key_limit", ik); ok {
		p.InvalidKey = newBudget("invalid_key", "invalid_key", l, false)
	}

	// Routes.
	if len(f.Routes) == 0 {
		c.addf("routes", "define at least one route")
	}
	seenName := map[string]bool{}
	seenMatch := map[string]bool{}
	for i, rs := range f.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		r := &Route{Name: rs.Name, Method: rs.Method, Path: rs.Path, Upstream: rs.Upstream, Group: rs.Group, Cost: rs.Cost}
		if !namePattern.MatchString(r.Name) {
			c.addf(path+".name", "route names are 1-64 letters, digits, '.', '_' or '-' (got %q)", r.Name)
		} else if seenName[r.Name] {
			c.addf(path+".name", "a route named %q is already defined", r.Name)
		}
		seenName[r.Name] = true
		if r.Method != "" && !methodPattern.MatchString(r.Method) {
			c.addf(path+".method", "not an HTTP method: %q (use upper case, or leave empty for any)", r.Method)
		}
		if err := checkRoutePath(r.Path); err != nil {
			c.addf(path+".path", "%v", err)
		}
		r.Prefix = strings.HasSuffix(r.Path, "/")
		r.key = MatchKey(r.Path)
		if m := r.Method + " " + r.key; seenMatch[m] {
			c.addf(path+".path", "another route already matches %s", strings.TrimSpace(m))
		} else {
			seenMatch[m] = true
		}
		if err := checkUpstream(r.Upstream); err != nil {
			c.addf(path+".upstream", "%v", err)
		}
		if r.Group == "" {
			r.Group = r.Name
		} else if !namePattern.MatchString(r.Group) {
			c.addf(path+".group", "group names are 1-64 letters, digits, '.', '_' or '-'")
		}
		if r.Cost == 0 {
			r.Cost = 1
		}
		if r.Cost < 1 {
			c.addf(path+".cost", "cost must be at least 1, got %d", r.Cost)
		}
		switch rs.OnStoreFailure {
		case "", "fail_open":
		case "fail_closed":
			r.FailClosed = true
		default:
			c.addf(path+".on_store_failure", "want fail_open or fail_closed, got %q", rs.OnStoreFailure)
		}
		if rs.Limit != nil {
			if l, ok := c.limit(path+".limit", *rs.Limit); ok {
				r.Limit = &Plan{Name: r.Group, Limits: []*Budget{newBudget(r.Group, "route/"+r.Group, l, rs.Limit.Shadow)}}
			}
		}
		if rs.Global != nil {
			if l, ok := c.limit(path+".global", *rs.Global); ok {
				r.Global = newBudget("global."+r.Group, "global/"+r.Group, l, rs.Global.Shadow)
				if r.Cost > l.Capacity() {
					c.addf(path+".cost", "cost %d exceeds the global budget's capacity %d: no request could pass", r.Cost, l.Capacity())
				}
			}
		}
		if rs.ShadowLimit != nil {
			if l, ok := c.limit(path+".shadow_limit", *rs.ShadowLimit); ok {
				r.Candidate = newBudget("candidate."+r.Group, "candidate/"+r.Group, l, true)
			}
		}
		if rs.Login != nil {
			r.Login = c.login(path+".login", rs.Login, r.Group)
		}
		if rs.Concurrency != nil {
			r.Concurrency = c.concurrency(path+".concurrency", rs.Concurrency, "concurrency/"+r.Group, f.Upstream.Timeout)
		}
		// A cost no limit could ever admit is a configuration error.
		if r.Limit != nil {
			c.checkCost(path+".cost", r.Cost, r.Limit, "the route limit")
		} else {
			for _, n := range names {
				if pl := p.Plans[n]; pl != nil {
					c.checkCost(path+".cost", r.Cost, pl, fmt.Sprintf("plan %q", n))
				}
			}
		}
		p.Routes = append(p.Routes, r)
	}

	if f.Region != nil {
		c.region(p, f.Region)
	}
	if f.Shadow {
		for _, pl := range p.Plans {
			for _, b := range pl.Limits {
				b.Shadow = true
			}
			if pl.Tenant != nil {
				pl.Tenant.Shadow = true
			}
		}
		for _, rt := range p.Routes {
			if rt.Limit != nil {
				rt.Limit.Limits[0].Shadow = true
			}
			if rt.Global != nil {
				rt.Global.Shadow = true
			}
		}
	}
	if p.UpstreamTimeout == 0 {
		p.UpstreamTimeout = 30 * time.Second
	} else if p.UpstreamTimeout < 0 {
		c.addf("upstream.timeout", "must be positive")
	}
	return p
}

func (c *compiler) compileKeys(p *Policy, keys []KeySpec, lines map[string]int, file string) {
	ids := map[string]bool{}
	for i, k := range keys {
		path := fmt.Sprintf("api_keys[%d]", i)
		if !namePattern.MatchString(k.ID) {
			c.add(lines, file, path+".id", "key ids are 1-64 letters, digits, '.', '_' or '-' (got %q)", k.ID)
		} else if ids[k.ID] {
			c.add(lines, file, path+".id", "key id %q is already used", k.ID)
		}
		ids[k.ID] = true
		if !digestPattern.MatchString(k.Digest) {
			c.add(lines, file, path+".digest", `want "sha256:" and 64 lower-case hex digits (tollgate hash-key KEY prints it); never the key itself`)
		} else if _, dup := p.Keys[k.Digest]; dup {
			c.add(lines, file, path+".digest", "the same key is listed twice")
		}
		if len(k.Tenant) > 128 || len(k.User) > 128 {
			c.add(lines, file, path, "tenant and user are at most 128 bytes")
		}
		pl, ok := p.Plans[k.Plan]
		if !ok {
			c.add(lines, file, path+".plan", "no plan named %q", k.Plan)
			continue
		}
		inForce := pl
		if tp := p.TenantPlans[k.Tenant]; tp != nil && k.Tenant != "" {
			inForce = tp
		}
		p.Keys[k.Digest] = &APIKey{ID: k.ID, Tenant: k.Tenant, User: k.User, Plan: inForce, OwnPlan: pl}
	}
}

// Overrides are runtime changes laid over a policy file: API keys added or
// replaced (by id) or removed, and tenant plan overrides. They survive
// reloads of the file.
type Overrides struct {
	// Keys maps a key id to its replacement; a nil value removes the key.
	Keys map[string]*KeySpec `json:"keys"`
	// Tenants maps a tenant to the plan its keys get; "" removes the
	// override.
	Tenants map[string]string `json:"tenants"`
}

// Override returns a copy of p with o applied, or an error naming what in
// o does not fit p (an unknown plan, a malformed digest). p is unchanged.
func (p *Policy) Override(o Overrides) (*Policy, error) {
	q := *p
	q.TenantPlans = make(map[string]*Plan, len(p.TenantPlans)+len(o.Tenants))
	for t, pl := range p.TenantPlans {
		q.TenantPlans[t] = pl
	}
	for t, name := range o.Tenants {
		if name == "" {
			delete(q.TenantPlans, t)
			continue
		}
		pl, ok := p.Plans[name]
		if !ok {
			return nil, fmt.Errorf("overriding tenant %q: no plan named %q", t, name)
		}
		q.TenantPlans[t] = pl
	}
	q.Keys = make(map[string]*APIKey, len(p.Keys)+len(o.Keys))
	for d, k := range p.Keys {
		if _, replaced := o.Keys[k.ID]; replaced {
			continue
		}
		q.Keys[d] = k
	}
	for id, ks := range o.Keys {
		if ks == nil {
			continue
		}
		if !namePattern.MatchString(id) || !digestPattern.MatchString(ks.Digest) {
			return nil, fmt.Errorf("overriding key %q: want an id of letters, digits, '.', '_' or '-' and a sha256:<hex> digest", id)
		}
		pl, ok := p.Plans[ks.Plan]
		if !ok {
			return nil, fmt.Errorf("overriding key %q: no plan named %q", id, ks.Plan)
		}
		if _, dup := q.Keys[ks.Digest]; dup {
			return nil, fmt.Errorf("overriding key %q: that key is already listed", id)
		}
		q.Keys[ks.Digest] = &APIKey{ID: id, Tenant: ks.Tenant, User: ks.User, Plan: pl, OwnPlan: pl}
	}
	for d, k := range q.Keys {
		want := k.OwnPlan
		if tp := q.TenantPlans[k.Tenant]; tp != nil && k.Tenant != "" {
			want = tp
		}
		if k.Plan != want {
			c := *k
			c.Plan = want
			q.Keys[d] = &c
		}
	}
	return &q, nil
}

// plan compiles one plan.
func (c *compiler) plan(path, name string, spec PlanSpec) *Plan {
	pl := &Plan{Name: name}
	inline := spec.LimitSpec != (LimitSpec{})
	switch {
	case inline && len(spec.Limits) > 0:
		c.addf(path, "write the plan's limit inline or under limits, not both")
		return nil
	case inline:
		if l, ok := c.limit(path, spec.LimitSpec); ok {
			pl.Limits = []*Budget{newBudget(name, "plan/"+name, l, spec.Shadow)}
		}
	case len(spec.Limits) > 0:
		if len(spec.Limits) > 8 {
			c.addf(path+".limits", "at most 8 limits per plan")
		}
		seen := map[string]bool{}
		for i, ls := range spec.Limits {
			lp := fmt.Sprintf("%s.limits[%d]", path, i)
			ln := ls.Name
			if ln == "" {
				ln = strconv.Itoa(i)
			}
			if !namePattern.MatchString(ln) || seen[ln] {
				c.addf(lp+".name", "limit names are unique in a plan, 1-64 letters, digits, '.', '_' or '-' (got %q)", ls.Name)
			}
			seen[ln] = true
			if l, ok := c.limit(lp, ls.LimitSpec); ok {
				pl.Limits = append(pl.Limits, newBudget(name+"."+ln, "plan/"+name+"/"+ln, l, ls.Shadow))
			}
		}
	default:
		c.addf(path, "a plan needs a limit (rate and period) or limits")
		return nil
	}
	if spec.Tenant != nil {
		if l, ok := c.limit(path+".tenant", *spec.Tenant); ok {
			pl.Tenant = newBudget(name+".tenant", "tenant/"+name, l, spec.Tenant.Shadow)
		}
	}
	if len(pl.Limits) == 0 {
		return nil
	}
	return pl
}

func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// login compiles the login guard of a route group.
func (c *compiler) login(path string, s *LoginSpec, group string) *Login {
	l := &Login{
		AccountField:    orDefault(s.AccountField, "username"),
		MaxBody:         orDefault(s.MaxBody, 64<<10),
		FailureStatuses: map[int]bool{},
		StoreName:       "login/" + group,
		Rule: algo.LockoutRule{
			Threshold: orDefault(s.MaxFailures, 5),
			Lock:      orDefault(s.Lock, time.Minute),
			MaxLock:   orDefault(s.MaxLock, time.Hour),
			Window:    orDefault(s.FailureWindow, 15*time.Minute),
			Memory:    orDefault(s.OffenceMemory, 24*time.Hour),
		},
	}
	if err := l.Rule.Validate(); err != nil {
		c.addf(path, "%v", err)
	}
	if l.MaxBody < 1 || l.MaxBody > 1<<20 {
		c.addf(path+".max_body", "want 1 byte to 1 MiB, got %d", l.MaxBody)
	}
	statuses := s.FailureStatuses
	if len(statuses) == 0 {
		statuses = []int{401, 403}
	}
	for _, st := range statuses {
		if st < 300 || st > 599 {
			c.addf(path+".failure_statuses", "a failure status is 3xx to 5xx, got %d", st)
		}
		l.FailureStatuses[st] = true
	}
	ip := LimitSpec{Algorithm: "fixed_window", Rate: 20, Period: 10 * time.Minute}
	if s.IPFailures != nil {
		ip = *s.IPFailures
	}
	if lim, ok := c.limit(path+".ip_failures", ip); ok {
		l.IPFailures = newBudget("login_ip_failures", "login_ip/"+group, lim, false)
	}
	return l
}

// MaxLeaseTTL bounds a concurrency slot's lease: how long a slot whose
// release was lost stays taken.
const MaxLeaseTTL = time.Hour

// concurrency compiles a concurrency limit.
func (c *compiler) concurrency(path string, s *ConcurrencySpec, store string, upstream time.Duration) *Concurrency {
	k := &Concurrency{Limit: s.Limit, LeaseTTL: s.LeaseTTL, StoreName: store}
	if s.Limit < 1 {
		c.addf(path+".limit", "at least 1 request in flight, got %d", s.Limit)
	}
	switch s.Per {
	case "", "subject":
	case "route":
		k.PerRoute = true
	default:
		c.addf(path+".per", "want subject or route, got %q", s.Per)
	}
	if k.LeaseTTL == 0 {
		k.LeaseTTL = orDefault(upstream, 30*time.Second) + 30*time.Second
		if k.LeaseTTL > MaxLeaseTTL {
			c.addf(path, "the default lease_ttl (upstream.timeout + 30s) is %v, longer than %v: set lease_ttl", k.LeaseTTL, MaxLeaseTTL)
		}
	} else if k.LeaseTTL < time.Second {
		c.addf(path+".lease_ttl", "at least 1s, got %v", k.LeaseTTL)
	} else if k.LeaseTTL > MaxLeaseTTL {
		c.addf(path+".lease_ttl", "at most %v, got %v: a slot whose release is lost (a gateway that stopped, a failed store call) stays taken until its lease expires", MaxLeaseTTL, k.LeaseTTL)
	}
	return k
}

// checkCost reports a route cost larger than some budget of pl can admit.
func (c *compiler) checkCost(path string, cost int64, pl *Plan, what string) {
	all := append([]*Budget(nil), pl.Limits...)
	if pl.Tenant != nil {
		all = append(all, pl.Tenant)
	}
	for _, b := range all {
		if capacity := b.Limit.Capacity(); cost > capacity {
			c.addf(path, "cost %d exceeds %s's capacity %d (%s): no request on it could pass", cost, what, capacity, b.Name)
			return
		}
	}
}

// region scales every budget to this region's share.
func (c *compiler) region(p *Policy, r *RegionSpec) {
	switch {
	case !namePattern.MatchString(r.Name):
		c.addf("region.name", "name the region (1-64 letters, digits, '.', '_' or '-')")
	case r.Count < 1:
		c.addf("region.count", "the number of regions must be at least 1")
	case r.Margin < 0 || r.Margin >= 1:
		c.addf("region.margin", "the safety margin is a fraction in [0, 1), e.g. 0.1")
	}
	if len(c.problems) > 0 {
		return
	}
	p.Region = r.Name
	scale := func(b *Budget) {
		if b == nil {
			return
		}
		b.setLimit(RegionShare(b.Limit, r.Count, r.Margin))
	}
	for _, pl := range p.Plans {
		for _, b := range pl.Limits {
			scale(b)
		}
		scale(pl.Tenant)
	}
	for _, rt := range p.Routes {
		if rt.Limit != nil {
			scale(rt.Limit.Limits[0])
		}
		scale(rt.Global)
	}
}

// RegionShare returns the part of l that one of count regions enforces
// with a safety margin: floor(x × (1 - margin) / count) of the rate and the
// burst, at least 1. The shares of all regions sum to at most l.
func RegionShare(l tollgate.Limit, count int, margin float64) tollgate.Limit {
	f := (1 - margin) / float64(count)
	share := func(x int64) int64 { return max(1, int64(float64(x)*f)) }
	wasRate := l.Burst == l.Rate
	l.Rate = share(l.Rate)
	if l.Burst != 0 {
		if wasRate {
			l.Burst = l.Rate
		} else {
			l.Burst = share(l.Burst)
		}
	}
	return l
}

// limit validates one limit spec.
func (c *compiler) limit(path string, s LimitSpec) (tollgate.Limit, bool) {
	if s.Calendar != "" {
		return c.calendar(path, s)
	}
	if s.TimeZone != "" {
		c.addf(path+".time_zone", "time_zone is for calendar quotas (calendar: day or month)")
		return tollgate.Limit{}, false
	}
	a := algo.GCRA
	if s.Algorithm != "" {
		var err error
		if a, err = algo.ParseAlgorithm(s.Algorithm); err != nil {
			c.addf(path+".algorithm", "%v", err)
			return tollgate.Limit{}, false
		}
	}
	l := tollgate.Limit{Algorithm: a, Rate: s.Rate, Period: s.Period, Burst: s.Burst, MaxDelay: s.MaxDelay}
	if s.Rate == 0 && s.Period == 0 {
		c.addf(path, "a limit needs rate and period (e.g. rate: 100, period: 1m)")
		return l, false
	}
	if err := l.Validate(); err != nil {
		c.addf(path, "%v", err)
		return l, false
	}
	if l.MaxDelay > MaxShapingDelay {
		c.addf(path+".max_delay", "max_delay %v is longer than %v: each delayed request holds its connection while it waits", l.MaxDelay, MaxShapingDelay)
		return l, false
	}
	// Each waiting request holds at least one unit of the delay × rate that
	// the bucket may run ahead.
	if q := l.MaxDelay.Milliseconds() * l.Rate / l.Period.Milliseconds(); q > MaxShapingQueue {
		c.addf(path+".max_delay", "max_delay %v at %d per %v lets %d requests wait at once under one budget (at most %d): shorten max_delay or lower the rate", l.MaxDelay, l.Rate, l.Period, q, MaxShapingQueue)
		return l, false
	}
	return l, true
}

// Shaping bounds. A shaping limit (leaky_bucket with max_delay) admits a
// request on condition that the gateway holds it up to max_delay, and lets
// up to max_delay × rate / period requests of one budget wait at once; each
// holds a connection, a goroutine and its buffers meanwhile.
const (
	// MaxShapingDelay bounds max_delay: as long as the default
	// upstream.timeout, and within the 30-60 s after which clients and load
	// balancers commonly give up on a response.
	MaxShapingDelay = 30 * time.Second
	// MaxShapingQueue bounds the requests one budget can hold waiting
	// (nginx's limit_req burst, which is this queue, is typically 5-100).
	MaxShapingQueue = 1000
)

// calendar validates a calendar quota: fixed windows of local days or
// months.
func (c *compiler) calendar(path string, s LimitSpec) (tollgate.Limit, bool) {
	l := tollgate.Limit{Algorithm: algo.FixedWindow, Rate: s.Rate}
	ok := true
	switch s.Calendar {
	case "day":
		l.Calendar, l.Period = algo.Daily, algo.Day
	case "month":
		l.Calendar, l.Period = algo.Monthly, algo.Month
	default:
		c.addf(path+".calendar", "want day or month, got %q", s.Calendar)
		ok = false
	}
	if s.Algorithm != "" && s.Algorithm != "fixed_window" {
		c.addf(path+".algorithm", "a calendar quota counts fixed windows; leave the algorithm out")
		ok = false
	}
	if s.Period != 0 || s.Burst != 0 || s.MaxDelay != 0 {
		c.addf(path, "a calendar quota takes rate (and time_zone), not period, burst or max_delay")
		ok = false
	}
	zone := s.TimeZone
	if zone == "" {
		zone = c.zone
	}
	if zone != "" {
		z, err := time.LoadLocation(zone)
		if err != nil {
			c.addf(path+".time_zone", "unknown time zone %q", zone)
			ok = false
		}
		l.Zone = z
	}
	if !ok {
		return l, false
	}
	if err := l.Validate(); err != nil {
		c.addf(path, "%v", err)
		return l, false
	}
	return l, true
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, fmt.Errorf("not a CIDR: %q", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an address or CIDR: %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// loopback reports whether host names only this machine.

// CheckRedisURL reports whether u is a Redis URL the store can use.
func CheckRedisURL(u string) error {
	if _, err := rueidis.ParseURL(u); err != nil {
		return fmt.Errorf("parsing redis url: %w", err)
	}
	return nil
}

// BuiltinEcho is the upstream name of the built-in demo service.
const BuiltinEcho = "builtin:echo"

func checkUpstream(s string) error {
	if s == BuiltinEcho {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an http(s) URL or %s, got %q", BuiltinEcho, s)
	}
	return nil
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
func (p *Policy) Match(method, path string) *Route {
	path = MatchKey(path)
	var best *Route
	bestScore := 0
	for _, r := range p.Routes {
		if r.Method != "" && r.Method != method {
			continue
		}
		rp := r.key
		var score int // how much of path the route pins down
		switch {
		case path == rp:
			score = len(path) + 1
		case r.Prefix && strings.HasPrefix(path, rp):
			score = len(rp)
		case r.Prefix && path+"/" == rp:
			score = len(path)
		case !r.Prefix && path == rp+"/":
			score = len(rp)
		default:
			continue
		}
		if best == nil || score > bestScore || (score == bestScore && r.Method != "" && best.Method == "") {
			best, bestScore = r, score
		}
	}
	return best
}
