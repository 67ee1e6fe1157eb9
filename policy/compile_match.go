package policy

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Compiling what a route matches on beyond its method and path (see
// match.go), and what its limit is counted per.

// compileMatch compiles a route's host, match, headers, query and
// limit_key.
func (c *compiler) compileMatch(p *Policy, path string, r *Route, rs *RouteSpec, claims map[string]bool) {
	if rs.Host != "" {
		r.Host = c.routeHost(path, rs.Host)
		p.hostRoutes = true
	}
	c.matchMode(path, r, rs.Match)
	r.key = MatchKey(r.Path)
	if r.Prefix {
		r.key = prefixKey(r.Path)
	}
	r.segs, r.params = pattern(r.key)
	for _, n := range r.params {
		if n != "" {
			r.Params = append(r.Params, n)
		}
	}
	r.Headers = c.conds(path+".headers", rs.Headers, true, p.UserHeader)
	r.Query = c.conds(path+".query", rs.Query, false, "")
	for _, cd := range r.Headers {
		p.readHeader(cd.Name)
	}
	for _, cd := range r.Query {
		p.readQuery(cd.Name)
	}
	c.limitKey(p, path, r, rs, claims)
}

// routeHost compiles a route's host: a host name, or *. and one for any
// host under it, in lower case.
func (c *compiler) routeHost(path, host string) string {
	h := strings.ToLower(host)
	c.rejectIf(!hostPattern.MatchString(h), path+".host", "want a host name such as api.example.com or *.example.com (no port, no scheme), got %q", host)
	return h
}

// matchMode compiles a route's match: whether its path is a prefix
// (default: when it ends in '/').
func (c *compiler) matchMode(path string, r *Route, match string) {
	switch match {
	case "":
	case "prefix":
		if !strings.HasSuffix(r.Path, "/") {
			r.Path += "/"
		}
		r.Prefix = true
	case "exact":
		c.rejectIf(r.Path != "/" && strings.HasSuffix(r.Path, "/"), path+".match", "match: exact conflicts with a path ending in '/' (which spells a prefix): drop the slash or say prefix")
		r.Prefix = false
	default:
		c.addf(path+".match", "want exact or prefix, got %q", match)
	}
}

// readHeader records that some route matches or keys on the header name
// (canonical).
func (p *Policy) readHeader(name string) {
	if !slices.Contains(p.condHeaders, name) {
		p.condHeaders = append(p.condHeaders, name)
	}
}

// readQuery records that some route matches or keys on the query
// parameter name.
func (p *Policy) readQuery(name string) {
	if !slices.Contains(p.condQuery, name) {
		p.condQuery = append(p.condQuery, name)
	}
}

// limitKey compiles a route's limit_key: what its own limit is counted
// per.
func (c *compiler) limitKey(p *Policy, path string, r *Route, rs *RouteSpec, claims map[string]bool) {
	c.rejectIf(len(rs.LimitKey) > 0 && rs.Limit == nil, path+".limit_key", "limit_key says what the route's limit counts per: set limit too")
	seen := map[string]bool{}
	for i, s := range rs.LimitKey {
		kp := fmt.Sprintf("%s.limit_key[%d]", path, i)
		k := c.keyPart(p, kp, s, r, claims)
		c.rejectIf(seen[k.String()], kp, "%s is listed twice", k)
		seen[k.String()] = true
		r.LimitKey = append(r.LimitKey, k)
	}
	c.limitKeyWarnings(path, r, seen)
}

// keyPart compiles one part of a limit_key, s, at kp.
func (c *compiler) keyPart(p *Policy, kp, s string, r *Route, claims map[string]bool) KeyPart {
	kind, name, _ := strings.Cut(s, ":")
	k := KeyPart{Kind: kind, Name: name}
	switch kind {
	case "subject", "host":
		c.rejectIf(name != "", kp, "%s takes no name", kind)
	case "header":
		c.rejectIf(!headerPattern.MatchString(name) || forbiddenHeader(name, p.UserHeader), kp, "header:<Name>, not a credential, forwarding or framing header (got %q)", name)
		k.Name = http.CanonicalHeaderKey(name)
		p.readHeader(k.Name)
	case "query":
		c.rejectIf(name == "" || len(name) > 64, kp, "query:<name>, got %q", s)
		p.readQuery(name)
	case "path":
		k.Name = strings.ToLower(name) // as MatchKey writes the path
		c.rejectIf(!slices.Contains(r.Params, k.Name), kp, "the route's path has no parameter {%s}", name)
	case "claim":
		if p.JWT == nil {
			c.addf(kp, "claims come from bearer JWTs: configure identity.jwt")
		} else if !claimPattern.MatchString(name) {
			c.addf(kp, "claim:<name>, got %q", s)
		}
		claims[name] = true
	default:
		c.addf(kp, "want subject, host, header:<Name>, query:<name>, path:<param> or claim:<name>, got %q", s)
	}
	return k
}

// limitKeyWarnings warns of a route's limit counted per what a client
// chooses alone, and refuses one that adds to the plan's without being
// counted per subject.
func (c *compiler) limitKeyWarnings(path string, r *Route, seen map[string]bool) {
	c.rejectIf(r.LimitAdds && len(r.LimitKey) > 0 && !seen["subject"], path+".limit_key", "a limit not counted per subject is shared by subjects and decided on its own: it can only replace the plan's (limit_mode: replace), or add subject to limit_key")
	if !r.LimitAdds && len(r.LimitKey) > 0 && !seen["subject"] {
		for _, k := range r.LimitKey {
			if k.Kind != "claim" {
				c.warnf(path+".limit_key", "the route's limit replaces the plan and is counted per %s, which the client chooses: "+
					"a client that sends a new value each time is limited by neither (add subject to limit_key to count it per caller too)", k)
				break
			}
		}
	}
}

// forbiddenHeader reports whether a route may not match or key on the
// header name.
func forbiddenHeader(name, userHeader string) bool {
	cn := http.CanonicalHeaderKey(name)
	if strings.HasPrefix(cn, "X-Forwarded-") || userHeader != "" && cn == http.CanonicalHeaderKey(userHeader) {
		return true
	}
	return slices.Contains(conditionHeaders, cn)
}

// conds compiles a route's header (or query) conditions.
func (c *compiler) conds(path string, m map[string]string, header bool, userHeader string) []Cond {
	var out []Cond
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v := m[name]
		np := path + "." + name
		if header {
			c.rejectIf(!headerPattern.MatchString(name) || forbiddenHeader(name, userHeader), np, "not a header a route may match: %q (credentials, forwarding and framing headers are the gateway's)", name)
			name = http.CanonicalHeaderKey(name)
		} else if name == "" || len(name) > 64 {
			c.addf(np, "a query parameter name is 1-64 bytes")
		}
		c.rejectIf(v == "" || len(v) > 256 || strings.ContainsAny(v, "\r\n\x00"), np, `want a value of 1-256 bytes, or "*" for any value`)
		out = append(out, Cond{Name: name, Value: v, Any: v == "*"})
	}
	return out
}

// condKey is what two routes matching alike share: their conditions.
func condKey(r *Route) string {
	var b strings.Builder
	b.WriteString(r.Host)
	for _, cs := range [][]Cond{r.Headers, r.Query} {
		b.WriteByte('|')
		for _, c := range cs {
			fmt.Fprintf(&b, "%s=%s;", strings.ToLower(c.Name), strings.ToLower(c.Value))
		}
	}
	return b.String()
}
