package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/policy"
)

// describe prints what a policy enforces.
func describe(w io.Writer, p *policy.Policy) {
	fmt.Fprintf(w, "policy %s (%s): %s\n", p.Version, p.Source, describeWarnings(len(p.Warnings)))
	fmt.Fprintf(w, "listeners: public %s, admin %s\n", p.Public, p.Admin)
	fmt.Fprintf(w, "store: %s\n", describeStore(p.Store))
	describeConns(w, p.Conns)
	describePlans(w, p)
	describeRoutes(w, p)
	describeIdentity(w, p)
	if p.Region != "" {
		fmt.Fprintf(w, "region: %s (every limit above is this region's share)\n", p.Region)
	}
	if len(p.TrustedProxies) > 0 {
		fmt.Fprintf(w, "trusted proxies: %v\n", p.TrustedProxies)
	}
}

// describeStore says which store counts: its type, and a Redis store's
// URL.
func describeStore(s policy.StoreSpec) string {
	if s.Type == "redis" {
		return s.Type + " " + s.URL
	}
	return s.Type
}

// describeConns prints the connection caps and timeouts.
func describeConns(w io.Writer, c policy.ConnLimits) {
	total := "from the file limit"
	if c.MaxConns > 0 {
		total = strconv.Itoa(c.MaxConns)
	}
	fmt.Fprintf(w, "connections: %d per client address, %s in all, %d admin; timeouts: header %v, body %v, idle %v, send %v\n",
		c.MaxConnsPerClient, total, c.AdminMaxConns, c.HeaderTimeout, c.BodyTimeout, c.IdleTimeout, c.SendTimeout)
}

// describeIdentity prints who is exempt from rate limits, how bearer
// JWTs are checked, and what an invalid API key costs.
func describeIdentity(w io.Writer, p *policy.Policy) {
	if l := p.Allowlist; l != nil {
		fmt.Fprintf(w, "allowlist (counted, never refused by a rate limit): %d key(s), %d user(s), %d tenant(s), addresses %v\n",
			len(l.Keys), len(l.Users), len(l.Tenants), l.Addresses)
	}
	if j := p.JWT; j != nil {
		fmt.Fprintf(w, "bearer JWTs: %s\n", describeJWT(j))
	}
	fmt.Fprintf(w, "invalid API keys: %v per client IP\n", p.InvalidKey.Limit)
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
	for _, n := range slices.Sorted(maps.Keys(p.Plans)) {
		fmt.Fprintf(w, "  %-12s %-22s %s\n", n, describePlan(p.Plans[n]), strings.Join(planMembers(p, n), ", "))
	}
}

// planMembers says who is on the plan named n: clients by IP, users, API
// keys, JWTs naming no plan.
func planMembers(p *policy.Policy, n string) []string {
	var who []string
	if isPlan(p.AnonymousPlan, n) {
		who = append(who, "clients by IP")
	}
	if isPlan(p.UserPlan, n) && p.UserHeader != "" {
		who = append(who, "users from "+p.UserHeader)
	}
	if keys := keysOnPlan(p, n); keys > 0 {
		who = append(who, fmt.Sprintf("%d API key(s)", keys))
	}
	if p.JWT != nil && isPlan(p.JWT.DefaultPlan, n) {
		who = append(who, "JWTs naming no plan")
	}
	return who
}

// isPlan reports whether pl, if any, is the plan named n.
func isPlan(pl *policy.Plan, n string) bool {
	return pl != nil && pl.Name == n
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
		mode := "fail_open"
		if r.FailClosed {
			mode = "fail_closed"
		}
		fmt.Fprintf(w, "  %-7s %-16s -> %-22s group %-8s cost %-3d %s, %s\n", cmp.Or(r.Method, "*"), describeMatch(r), r.Upstream, r.Group, r.Cost, describeLimits(r), mode)
	}
}

// describeLimits says what limits a route: its own limit or the plan's,
// its global budget, concurrency, login guard and refusal.
func describeLimits(r *policy.Route) string {
	limit := describeSubjectLimit(r)
	if r.Global != nil {
		limit += ", global " + r.Global.Limit.String()
	}
	if c := r.Concurrency; c != nil {
		limit += ", " + describeConcurrency(c)
	}
	if a := r.Adaptive; a != nil {
		limit += ", " + describeAdaptive(a)
	}
	if l := r.Login; l != nil {
		limit += fmt.Sprintf(", login guard (field %q: %d failures lock %v..%v; %v failures per IP)",
			l.AccountField, l.Rule.Threshold, l.Rule.Lock, l.Rule.MaxLock, l.IPFailures.Limit)
	}
	if rf := r.Refusal; rf != nil {
		limit += ", " + describeRefusal(rf)
	}
	if t := r.Tokens; t != nil {
		limit += fmt.Sprintf(", tokens (estimate: %s, default %d, at most %d",
			strings.Join(t.Fields, "/"), t.DefaultOutput, t.MaxOutput)
		if t.BytesPerInput > 0 {
			limit += fmt.Sprintf(", + body bytes / %d", t.BytesPerInput)
		}
		limit += ")"
	}
	return limit
}

// describeSubjectLimit says what limits a subject on a route: the plan's
// limit, the route's own, or both.
func describeSubjectLimit(r *policy.Route) string {
	if r.Limit == nil {
		return "plan limit per subject"
	}
	limit := "own limit " + describePlan(r.Limit) + " per " + describeKey(r.LimitKey)
	if r.LimitAdds {
		return "plan limit + " + limit
	}
	return limit
}

// describeConcurrency says how many requests a route lets in flight, per
// subject or for the whole route.
func describeConcurrency(c *policy.Concurrency) string {
	per := "subject"
	if c.PerRoute {
		per = "route"
	}
	return fmt.Sprintf("at most %d in flight per %s", c.Limit, per)
}

// describeAdaptive says how a route's upstream's adaptive limit moves,
// and the plans' shares of it.
func describeAdaptive(a *policy.Adaptive) string {
	c := a.Config
	s := fmt.Sprintf("adaptive limit %d..%d for %s (every %v, min RTT every %v over %d requests, buffer %.0f%%",
		c.MinLimit, c.MaxLimit, a.Upstream, c.Window, c.MinRTTInterval, c.MinRTTSamples, 100*c.Buffer)
	for i, p := range a.Plans {
		s += fmt.Sprintf(", %s %.0f%%", p, 100*c.Shares[i])
	}
	if a.Shadow {
		s += ", in shadow"
	}
	return s + ")"
}

// describeRefusal says how a route answers the requests its limits
// refuse.
func describeRefusal(rf *policy.Refusal) string {
	if len(rf.Body) > 0 {
		return fmt.Sprintf("refused with %d and its own %s body", rf.Status, rf.ContentType)
	}
	return fmt.Sprintf("refused with %d", rf.Status)
}

// describeMatch prints what a route matches besides its method: its
// path ("*" for everything under a prefix, {param} segments as written),
// and the host, headers and query it requires.
func describeMatch(r *policy.Route) string {
	m := r.Path
	if r.Prefix {
		m += "*"
	}
	if conds := routeConds(r); len(conds) > 0 {
		m += " [" + strings.Join(conds, ", ") + "]"
	}
	return m
}

// routeConds lists what a route requires of a request besides its method
// and path: the host, headers and query parameters.
func routeConds(r *policy.Route) []string {
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
	return conds
}

// describeCond says what a header or query condition requires: the
// name present, or with a value.
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
	parts := jwtKeys(j)
	parts = append(parts, "algorithms "+strings.Join(j.Algorithms, ", "), fmt.Sprintf("clock skew %v", j.ClockSkew))
	if j.Issuer != "" {
		parts = append(parts, "issuer "+j.Issuer)
	}
	if len(j.Audience) > 0 {
		parts = append(parts, "audience "+strings.Join(j.Audience, " or "))
	}
	parts = append(parts, jwtClaims(j))
	return strings.Join(parts, "; ") + "; invalid tokens count as invalid API keys"
}

// jwtKeys says where the keys verifying bearer JWTs come from: a JWKS
// URL, an HMAC secret, or both.
func jwtKeys(j *policy.JWT) []string {
	var keys []string
	if j.JWKSURL != "" {
		keys = append(keys, fmt.Sprintf("keys from %s (refreshed every %v, at most every %v)", j.JWKSURL, j.RefreshInterval, j.MinRefreshInterval))
	}
	if j.HMACSecret != nil {
		keys = append(keys, "HMAC secret from the environment")
	}
	return keys
}

// jwtClaims says which claims of a bearer JWT name its subject, tenant
// and plan.
func jwtClaims(j *policy.JWT) string {
	who := "subject from claim " + j.SubjectClaim
	if j.TenantClaim != "" {
		who += ", tenant from " + j.TenantClaim
	}
	if j.PlanClaim != "" {
		who += ", plan from " + j.PlanClaim
	}
	return who
}

// describeBudgets prints limits joined by " + ", each with its unit and
// models.
func describeBudgets(limits []*policy.Budget) string {
	parts := make([]string, len(limits))
	for i, b := range limits {
		parts[i] = b.Limit.String()
		if b.Unit != policy.UnitRequests {
			parts[i] += " " + b.Unit.String()
		}
		if b.Models != nil {
			parts[i] += " for " + strings.Join(slices.Sorted(maps.Keys(b.Models)), ", ")
			if b.PerModel {
				parts[i] += " (each)"
			}
		}
	}
	return strings.Join(parts, " + ")
}

// describePlan prints a plan's limits, e.g. "gcra 10/1s + gcra 1000/1h,
// tenant fixed_window 25/1m0s".
func describePlan(pl *policy.Plan) string {
	if pl.Unlimited {
		return "unlimited (counted)"
	}
	s := describeBudgets(pl.Limits)
	if len(pl.Tenant) > 0 {
		s += ", tenant " + describeBudgets(pl.Tenant)
	}
	return s
}
