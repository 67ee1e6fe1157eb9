package policy

import (
	"fmt"
	"maps"
	"mime"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// routes compiles the routes.
func (c *compiler) routes(p *Policy, f *File) {
	c.rejectIf(len(f.Routes) == 0 && !c.fromCode, "routes", "define at least one route")
	seenName := map[string]bool{}
	seenMatch := map[string]bool{}
	claims := map[string]bool{} // the claims route limits are counted per
	defer func() {
		if p.JWT != nil {
			p.JWT.KeyClaims = slices.Sorted(maps.Keys(claims))
		}
	}()
	for i, rs := range f.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		r := &Route{Name: rs.Name, Method: rs.Method, Path: rs.Path, Upstream: rs.Upstream, Group: rs.Group, Cost: rs.Cost}
		switch {
		case c.required(c.lines, c.file, path+".name", r.Name):
		case !namePattern.MatchString(r.Name):
			c.addf(path+".name", "route names are 1-64 letters, digits, '.', '_' or '-' (got %q)", r.Name)
		case seenName[r.Name]:
			c.addf(path+".name", "a route named %q is already defined", r.Name)
		}
		seenName[r.Name] = true
		c.routeBasics(path, r, &rs)
		if r.Upstream == "" && !c.fromCode {
			p.GatewayIssues = append(p.GatewayIssues, problemAt(c.lines, c.file, path+".upstream",
				"route %s has no upstream: the gateway needs one (only the middleware serves routes without one)", r.Name))
		}
		c.routeLimits(path, r, &rs)
		c.compileMatch(p, path, r, &f.Routes[i], claims)
		if m := r.Method + " " + r.shape() + " " + condKey(r); seenMatch[m] {
			c.addf(path+".path", "another route already matches %s", strings.TrimSpace(r.Method+" "+r.key))
		} else {
			seenMatch[m] = true
		}
		if rs.Login != nil {
			r.Login = c.login(path+".login", rs.Login, r.Group)
		}
		if rs.Concurrency != nil {
			r.Concurrency = c.concurrency(path+".concurrency", rs.Concurrency, r.Group, f.Upstream.Timeout)
		}
		if rs.Tokens != nil {
			r.Tokens = c.tokens(path+".tokens", rs.Tokens, f.Upstream.Timeout)
		}
		if rs.Adaptive != nil {
			r.Adaptive = c.adaptive(p, path+".adaptive", rs.Adaptive, r)
		}
		p.Routes = append(p.Routes, r)
	}
	c.tokenLimitsUsed(p)
	c.adaptiveShared(p)
}

// tokenLimitsUsed warns of plan limits that count tokens or name models
// when no route has tokens: no call would charge them.
func (c *compiler) tokenLimitsUsed(p *Policy) {
	for _, r := range p.Routes {
		if r.Tokens != nil {
			return
		}
	}
	for _, n := range slices.Sorted(maps.Keys(p.Plans)) {
		for b := range p.Plans[n].All() {
			if !b.Applies(false, "") {
				c.warnf("plans."+n, "limit %s counts %s of calls to token routes, and no route has tokens: nothing charges it", b.Name, b.Unit)
				return
			}
		}
	}
}

// routeBasics compiles a route's method, path, upstream, group, cost and
// failure mode.
func (c *compiler) routeBasics(path string, r *Route, rs *RouteSpec) {
	c.rejectIf(r.Method != "" && !methodPattern.MatchString(r.Method), path+".method", "not an HTTP method: %q (use upper case, or leave empty for any)", r.Method)
	if !c.required(c.lines, c.file, path+".path", r.Path) {
		c.addErr(path+".path", checkRoutePath(r.Path))
	}
	r.Prefix = strings.HasSuffix(r.Path, "/")
	if err := checkUpstream(r.Upstream); r.Upstream != "" && err != nil {
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
	c.rejectIf(r.Cost < 1, path+".cost", "cost must be at least 1, got %d", r.Cost)
	r.FailClosed = c.either(path+".on_store_failure", rs.OnStoreFailure, "fail_open", "fail_closed", "fail_open or fail_closed")
}

// routeLimits compiles a route's own limit and how it meets the plan's,
// its refusal, its global budget and its candidate (shadow) limit.
func (c *compiler) routeLimits(path string, r *Route, rs *RouteSpec) {
	if b := c.budgetOf(path+".limit", rs.Limit, r.Group, routeID(r.Group)); b != nil {
		r.Limit = &Plan{Name: r.Group, Limits: []*Budget{b}}
	}
	r.LimitAdds = c.either(path+".limit_mode", rs.LimitMode, "replace", "add", "replace (the route's limit instead of the plan's) or add (both)")
	c.rejectIf(rs.LimitMode != "" && rs.Limit == nil, path+".limit_mode", "limit_mode says how the route's limit meets the plan's: set limit too")
	if rs.Refusal != nil {
		r.Refusal = c.refusal(path+".refusal", rs.Refusal)
	}
	r.Global = c.budgetOf(path+".global", rs.Global, "global."+r.Group, globalID(r.Group))
	if r.Candidate = c.budgetOf(path+".shadow_limit", rs.ShadowLimit, "candidate."+r.Group, candidateID(r.Group)); r.Candidate != nil {
		r.Candidate.Shadow = true // a candidate is never enforced
	}
}

// shape is the route's match key with its parameters unnamed: two routes
// of one shape (and method and conditions) match the same requests.
func (r *Route) shape() string {
	shape := r.key
	for _, n := range r.params {
		if n != "" {
			shape = strings.Replace(shape, "{"+n+"}", "{}", 1)
		}
	}
	return shape
}

// either reads a setting of two values: false for off (the default, also
// ""), true for on; anything else is reported as not one of want.
func (c *compiler) either(path, got, off, on, want string) bool {
	switch got {
	case "", off:
		return false
	case on:
		return true
	}
	c.addf(path, "want %s, got %q", want, got)
	return false
}

// maxRefusalBody bounds a route's own refusal body.
const maxRefusalBody = 4 << 10

// refusal compiles a route's answer to refused requests.
func (c *compiler) refusal(path string, s *RefusalSpec) *Refusal {
	r := &Refusal{Status: orDefault(s.Status, 429), Body: []byte(s.Body)}
	if *s == (RefusalSpec{}) {
		c.addf(path, "set status, body or both")
	}
	c.rejectIf(r.Status < 400 || r.Status > 599, path+".status", "a refusal is 400 to 599, got %d", r.Status)
	c.rejectIf(len(r.Body) > maxRefusalBody, path+".body", "at most %d bytes, got %d", maxRefusalBody, len(r.Body))
	r.ContentType = c.refusalType(path, s)
	return r
}

// refusalType compiles the media type of a refusal's body: the one given
// (which needs a body: reported otherwise), else text/plain for a body,
// else "".
func (c *compiler) refusalType(path string, s *RefusalSpec) string {
	switch {
	case s.ContentType != "" && s.Body == "":
		c.addf(path+".content_type", "content_type is the body's: set body too")
	case s.ContentType != "":
		if _, _, err := mime.ParseMediaType(s.ContentType); err != nil || strings.ContainsAny(s.ContentType, "\r\n") {
			c.addf(path+".content_type", "not a media type: %q", s.ContentType)
		}
	case s.Body != "":
		return "text/plain; charset=utf-8"
	}
	return s.ContentType
}

// login compiles the login guard of a route group.
func (c *compiler) login(path string, s *LoginSpec, group string) *Login {
	l := &Login{
		AccountField: orDefault(s.AccountField, "username"),
		MaxBody:      orDefault(s.MaxBody, 64<<10),
		StoreName:    loginStoreName(group),
		Rule: algo.LockoutRule{
			Threshold: orDefault(s.MaxFailures, 5),
			Lock:      orDefault(s.Lock, time.Minute),
			MaxLock:   orDefault(s.MaxLock, time.Hour),
			Window:    orDefault(s.FailureWindow, 15*time.Minute),
			Memory:    orDefault(s.OffenceMemory, 24*time.Hour),
		},
	}
	c.addErr(path, l.Rule.Validate())
	c.rejectIf(l.MaxBody < 1 || l.MaxBody > 1<<20, path+".max_body", "want 1 byte to 1 MiB, got %d", l.MaxBody)
	l.FailureStatuses = c.failureStatuses(path+".failure_statuses", s.FailureStatuses)
	l.IPFailures = c.loginIPFailures(path+".ip_failures", s.IPFailures, group)
	return l
}

// failureStatuses compiles the upstream statuses that count as a failed
// login (default 401 and 403).
func (c *compiler) failureStatuses(path string, list []int) map[int]bool {
	if len(list) == 0 {
		list = []int{401, 403}
	}
	statuses := map[int]bool{}
	for _, st := range list {
		c.rejectIf(st < 300 || st > 599, path, "a failure status is 3xx to 5xx, got %d", st)
		statuses[st] = true
	}
	return statuses
}

// loginIPFailures compiles the limit on a login route group's failures
// per client address (default fixed_window 20 per 10m): a guard, never in
// shadow.
func (c *compiler) loginIPFailures(path string, s *LimitSpec, group string) *Budget {
	ip := LimitSpec{Algorithm: "fixed_window", Rate: 20, Period: 10 * time.Minute}
	if s != nil {
		ip = *s
		c.rejectIf(ip.Shadow, path+".shadow", "the failed logins per address are a guard, always enforced: they cannot be in shadow")
	}
	if lim, ok := c.limit(path, ip); ok {
		return newBudget("login_ip_failures", loginIPID(group), lim, false)
	}
	return nil
}

// MaxLeaseTTL bounds a concurrency slot's lease: how long a slot whose
// release was lost stays taken.
const MaxLeaseTTL = time.Hour

// concurrency compiles the concurrency limit of a route group.
func (c *compiler) concurrency(path string, s *ConcurrencySpec, group string, upstream time.Duration) *Concurrency {
	k := &Concurrency{Limit: s.Limit, LeaseTTL: s.LeaseTTL, StoreName: concurrencyStoreName(group)}
	c.rejectIf(s.Limit < 1, path+".limit", "at least 1 request in flight, got %d", s.Limit)
	k.PerRoute = c.either(path+".per", s.Per, "subject", "route", "subject or route")
	if k.LeaseTTL == 0 {
		k.LeaseTTL = orDefault(upstream, 30*time.Second) + 30*time.Second
		c.rejectIf(k.LeaseTTL > MaxLeaseTTL, path, "the default lease_ttl (upstream.timeout + 30s) is %v, longer than %v: set lease_ttl", k.LeaseTTL, MaxLeaseTTL)
	} else if k.LeaseTTL < time.Second {
		c.addf(path+".lease_ttl", "at least 1s, got %v", k.LeaseTTL)
	} else if k.LeaseTTL > MaxLeaseTTL {
		c.addf(path+".lease_ttl", "at most %v, got %v: a slot whose release is lost (a gateway that stopped, a failed store call) stays taken until its lease expires", MaxLeaseTTL, k.LeaseTTL)
	}
	return k
}

// costs reports every route cost that some budget it is charged to could
// never admit: a configuration error. It runs once the budgets hold this
// region's share, which is all they admit.
func (c *compiler) costs(p *Policy) {
	where := ""
	if p.Region != "" {
		where = " in region " + p.Region
	}
	for i, r := range p.Routes {
		path := fmt.Sprintf("routes[%d].cost", i)
		if r.Limit != nil {
			c.checkCost(path, r.Cost, r.Limit, "the route limit", where)
		}
		if r.Limit == nil || r.LimitAdds {
			for _, n := range slices.Sorted(maps.Keys(p.Plans)) {
				c.checkCost(path, r.Cost, p.Plans[n], fmt.Sprintf("plan %q", n), where)
			}
		}
		if r.Tokens != nil {
			c.checkTokens(fmt.Sprintf("routes[%d].tokens.default_output", i), r.Tokens, p, where)
		}
		if g := r.Global; g != nil && r.Cost > g.Limit.Capacity() {
			c.addf(path, "cost %d exceeds the global budget's capacity %d%s: no request could pass", r.Cost, g.Limit.Capacity(), where)
		}
	}
}

// checkCost reports a route cost larger than some budget of pl can admit.
func (c *compiler) checkCost(path string, cost int64, pl *Plan, what, where string) {
	for b := range pl.All() {
		if b.Unit != UnitRequests {
			continue // charged tokens, not the route's cost
		}
		if capacity := b.Limit.Capacity(); cost > capacity {
			c.addf(path, "cost %d exceeds %s's capacity %d (%s)%s: no request on it could pass", cost, what, capacity, b.Name, where)
			return
		}
	}
}

// checkTokens reports a token route whose default estimate some token
// budget (of tokens or output_tokens) of a plan or tenant could not admit.
func (c *compiler) checkTokens(path string, t *Tokens, p *Policy, where string) {
	for _, n := range slices.Sorted(maps.Keys(p.Plans)) {
		for b := range p.Plans[n].All() {
			if (b.Unit == UnitTokens || b.Unit == UnitOutputTokens) && t.DefaultOutput > b.Limit.Capacity() {
				c.addf(path, "%d exceeds the capacity %d of %s%s: no call without a bound could pass", t.DefaultOutput, b.Limit.Capacity(), b.Name, where)
				return
			}
		}
	}
}

// BuiltinEcho is the upstream name of the built-in demo service.
const BuiltinEcho = "builtin:echo"

// An empty upstream is a route for the middleware alone (package
// httplimit), which passes requests to its own handler; the gateway
// refuses a policy with one (see gateway.New).
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
