package policy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Route matching beyond method and path: a route may name a host, path
// parameters ({id}: one whole segment), headers and query parameters that
// the request must carry, and key its own limit by any of them, by a
// bearer JWT's claim, or by the subject (KeyPart).

// RouteRequest is what a route is matched on.
type RouteRequest struct {
	Method string
	// Path is the cleaned request path (CleanPath).
	Path string
	// Host is the request's host, as it came (port and case allowed).
	Host   string
	Header http.Header
	Query  url.Values
}

// Params are a matched route's path parameters by name, as matched
// (MatchKey: lower case).
type Params map[string]string

// Cond is a header or query parameter a route requires: present once
// with Value (compared ignoring case), or with any value when Any.
type Cond struct {
	Name  string
	Value string
	Any   bool
}

// KeyPart is one part of what a route's limit is counted per: Kind is
// "subject", "host", "header", "query", "path" or "claim", and Name the
// header, query parameter, path parameter or claim.
type KeyPart struct{ Kind, Name string }

// String returns the part as written: "subject", "header:X-Org".
func (k KeyPart) String() string {
	if k.Name == "" {
		return k.Kind
	}
	return k.Kind + ":" + k.Name
}

var (
	paramPattern = regexp.MustCompile(`^\{([A-Za-z_][A-Za-z0-9_]{0,31})\}$`)
	hostPattern  = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	// conditionHeaders are headers a route may not match or key on: the
	// credentials and forwarding headers the gateway decides on or
	// rewrites itself, and framing.
	conditionHeaders = []string{"Authorization", "X-Api-Key", "Forwarded", "Host", "Connection",
		"Content-Length", "Transfer-Encoding", "Cookie", "Proxy-Authorization", "Te", "Upgrade", "Trailer",
		"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
		"X-Original-Forwarded-For", "X-Original-Method", "X-Original-Uri", "X-Request-Id", "Traceparent", "Tracestate"}
)

// checkParams reports a path whose braces are not whole-segment
// parameters with unique names.
func checkParams(p string) error {
	if !strings.ContainsAny(p, "{}") {
		return nil
	}
	seen := map[string]bool{}
	for _, seg := range strings.Split(p, "/") {
		if !strings.ContainsAny(seg, "{}") {
			continue
		}
		g := paramPattern.FindStringSubmatch(seg)
		if g == nil {
			return fmt.Errorf("%q: a parameter is a whole segment, {name} with a name of letters, digits and '_' (got %q)", p, seg)
		}
		if seen[strings.ToLower(g[1])] {
			return fmt.Errorf("%q: parameter {%s} is named twice", p, g[1])
		}
		seen[strings.ToLower(g[1])] = true
	}
	return nil
}

// pattern returns the segments of a route path with parameters (their
// names in params, "" in segs), or nil for a literal path.
func pattern(key string) (segs []string, params []string) {
	if !strings.Contains(key, "{") {
		return nil, nil
	}
	segs = strings.Split(strings.TrimPrefix(key, "/"), "/")
	params = make([]string, len(segs))
	for i, s := range segs {
		if g := paramPattern.FindStringSubmatch(s); g != nil {
			segs[i], params[i] = "", g[1]
		}
	}
	return segs, params
}

// matchPattern matches the segments of a match key path against a parameterised
// route; score is how much of path it pins down (its literal bytes), as
// Match scores literal routes.
func (r *Route) matchPattern(req []string) (Params, int, bool) {
	segs, req, ok := r.alignSegments(req)
	if !ok {
		return nil, 0, false
	}
	score, ok := segmentsScore(segs, req)
	if !ok {
		return nil, 0, false
	}
	if !r.Prefix {
		score++ // as a literal exact route's own path
	}
	return r.paramValues(req[:len(segs)]), score, true
}

// alignSegments returns the segments of the parameterised route that a
// request path's segments req must match, and req as they are matched
// (an exact route's without a trailing slash); ok is false when req has
// too few or, for an exact route, too many.
func (r *Route) alignSegments(req []string) (segs, reqSegs []string, ok bool) {
	if r.Prefix {
		segs = r.segs[:len(r.segs)-1] // the empty segment after the final '/'
		return segs, req, len(req) >= len(segs)
	}
	segs = r.segs
	if len(req) == len(segs)+1 && req[len(req)-1] == "" {
		req = req[:len(req)-1] // a trailing slash
	}
	return segs, req, len(req) == len(segs)
}

// segmentsScore matches a pattern's segments (segs, "" for a parameter)
// against as many of a request path's, req: a literal one must be equal,
// a parameter any but an empty one. score counts the literal bytes.
func segmentsScore(segs, req []string) (score int, ok bool) {
	score = 1
	for i, s := range segs {
		switch {
		case s == "" && req[i] == "":
			return 0, false
		case s != "" && s != req[i]:
			return 0, false
		}
		score += len(s) + 1
	}
	return score, true
}

// paramValues returns the route's parameters as the matched segments
// req give them.
func (r *Route) paramValues(req []string) Params {
	ps := Params{}
	for i, name := range r.params[:len(req)] {
		if name != "" {
			ps[name] = req[i]
		}
	}
	return ps
}

// normalHost returns a request host in lower case without its port or
// IPv6 brackets.
func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
}

// hostMatches reports whether host (normalHost) is the route's.
func (r *Route) hostMatches(host string) bool {
	switch {
	case r.Host == "":
		return true
	case strings.HasPrefix(r.Host, "*."):
		return strings.HasSuffix(host, r.Host[1:]) && len(host) > len(r.Host)-1
	}
	return host == r.Host
}

// one returns the single value of name among vals (compared ignoring
// case); ok is false when it is absent, ambiguous when it is there more
// than once, in any case.
func one(vals map[string][]string, name string) (v string, ok, ambiguous bool) {
	n := 0
	for k, vs := range vals {
		if strings.EqualFold(k, name) {
			n += len(vs)
			if len(vs) > 0 {
				v = vs[0]
			}
		}
	}
	return strings.TrimSpace(v), n == 1, n > 1
}

// condsMatch reports whether vals satisfy every cond.
func condsMatch(conds []Cond, vals map[string][]string) bool {
	for _, c := range conds {
		v, ok, _ := one(vals, c.Name)
		if !ok || !c.Any && !strings.EqualFold(v, c.Value) {
			return false
		}
	}
	return true
}

// Ambiguous returns why req cannot be matched as every upstream would
// read it, or "": a header or query parameter that a route matches or
// keys on is given more than once (or in two cases), or the query does
// not parse. Check it before MatchRequest.
func (p *Policy) Ambiguous(req RouteRequest) string {
	for _, name := range p.condHeaders {
		if _, _, amb := one(req.Header, name); amb {
			return fmt.Sprintf("the header %s is given more than once", name)
		}
	}
	for _, name := range p.condQuery {
		if _, _, amb := one(req.Query, name); amb {
			return fmt.Sprintf("the query parameter %q is given more than once", name)
		}
	}
	return p.formatAmbiguous(req)
}

// formatAmbiguous returns why a path ending in '/' is matched by a route
// under its whole last segment that is not the route Rails reads it as,
// or "": Rails reads /export.json/ as /export, other servers as a segment
// export.json (see requestKeys). Charged as the one, it may be served as
// the other.
func (p *Policy) formatAmbiguous(req RouteRequest) string {
	if !strings.HasSuffix(req.Path, "/") {
		return ""
	}
	path, deep := MatchKey(req.Path), prefixKey(req.Path)
	if deep == path {
		return "" // the usual case
	}
	rails, _ := p.matchKeyed(req, &requestKeys{path: path})
	if chosen, _ := p.MatchRequest(req); chosen == rails {
		return "" // charged as Rails reads it, as a path without '/' is
	}
	return "the request path ends in a segment with a dot and a '/', which servers read as different routes (Rails reads /export.json/ as /export); send it without the slash or the extension"
}

// ReadsHeaders reports whether some route matches or keys on a header.
func (p *Policy) ReadsHeaders() bool { return len(p.condHeaders) > 0 }

// RouteHeaders returns the headers some route matches or keys on
// (canonical names): a front forwards them as it read them.
func (p *Policy) RouteHeaders() []string { return slices.Clone(p.condHeaders) }

// UsesQuery reports whether some route matches or keys on a query
// parameter (its fronts must then parse the query strictly).
func (p *Policy) UsesQuery() bool { return len(p.condQuery) > 0 }

// MatchRequest returns the route for req and its path parameters, or
// nil. Routes are matched as Match describes, and a route naming a host,
// headers or query parameters matches only requests that carry them; at
// equal path specificity a route with more of these conditions wins,
// then one naming the method.
func (p *Policy) MatchRequest(req RouteRequest) (*Route, Params) {
	k := requestKeys{path: MatchKey(req.Path)}
	if strings.HasSuffix(req.Path, "/") {
		k.deep = prefixKey(req.Path)
	}
	return p.matchKeyed(req, &k)
}

// matchKeyed is MatchRequest on the request path's keys k.
func (p *Policy) matchKeyed(req RouteRequest, k *requestKeys) (*Route, Params) {
	host := ""
	if p.hostRoutes {
		host = normalHost(req.Host)
	}
	var best candidate
	for _, r := range p.Routes {
		if r.Method != "" && r.Method != req.Method {
			continue
		}
		ps, score, ok := r.matchKeys(k)
		if !ok || !r.conditionsMet(host, req.Header, req.Query) {
			continue
		}
		if c := (candidate{r, ps, score, r.conditions()}); c.beats(best) {
			best = c
		}
	}
	return best.route, best.params
}

// candidate is a route that matches a request, and how specifically:
// score is how much of the path it pins down, conds how many conditions
// it names besides method and path.
type candidate struct {
	route        *Route
	params       Params
	score, conds int
}

// beats reports whether c is more specific than best (which may be no
// route): its path first, then its conditions, then its method.
func (c candidate) beats(best candidate) bool {
	return best.route == nil || c.score > best.score || c.score == best.score && (c.conds > best.conds ||
		c.conds == best.conds && c.route.Method != "" && best.route.Method == "")
}

// requestKeys are the match keys of a request's path: path, its
// MatchKey, and for a path ending in '/', deep, its prefixKey, which
// keeps the segment before the slash whole ("/helloworld.Greeter/", which
// Rails reads as "/helloworld/"); and their segments, split once by the
// first route with parameters that needs them.
type requestKeys struct {
	path, deep     string
	segs, deepSegs []string
}

// matchKeys matches the route's path against a request's keys: an exact
// route's against its MatchKey, a prefix route's against either (the
// request is under the prefix as either server reads it).
func (r *Route) matchKeys(k *requestKeys) (Params, int, bool) {
	ps, score, ok := r.matchPath(k.path, &k.segs)
	if ok || !r.Prefix || k.deep == "" || k.deep == k.path {
		return ps, score, ok
	}
	return r.matchPath(k.deep, &k.deepSegs)
}

// matchPath matches the route's path against path, a request's
// MatchKey; segs holds path's segments, split by the first route with
// parameters that needs them. score is as literalScore's.
func (r *Route) matchPath(path string, segs *[]string) (ps Params, score int, ok bool) {
	if r.segs == nil {
		score = literalScore(r, path)
		return nil, score, score != 0
	}
	if *segs == nil {
		*segs = strings.Split(strings.TrimPrefix(path, "/"), "/")
	}
	return r.matchPattern(*segs)
}

// conditionsMet reports whether a request for host (normalHost) with the
// header h and the query q carries the route's host, headers and query.
func (r *Route) conditionsMet(host string, h http.Header, q url.Values) bool {
	return r.hostMatches(host) && condsMatch(r.Headers, h) && condsMatch(r.Query, q)
}

// conditions is how many conditions the route names besides its method
// and path: its host, headers and query parameters.
func (r *Route) conditions() int {
	n := len(r.Headers) + len(r.Query)
	if r.Host != "" {
		n++
	}
	return n
}

// literalScore is how much of path the literal route r pins down, 0 if
// it does not match.
func literalScore(r *Route, path string) int {
	rp := r.key
	switch {
	case path == rp:
		return len(path) + 1
	case r.Prefix && strings.HasPrefix(path, rp):
		return len(rp)
	case r.Prefix && path+"/" == rp:
		return len(path)
	case !r.Prefix && path == rp+"/":
		return len(rp)
	}
	return 0
}

// KeyValues returns the values the route's limit is counted per for a
// request (LimitKey, in order): subject is the subject's pseudonym,
// claims a bearer JWT's (nil for none). A part the request lacks is
// "\x00" (all such requests share it; no value a request carries is
// that), header, query and host values are compared ignoring case.
func (r *Route) KeyValues(req RouteRequest, params Params, subject string, claims map[string]string) []string {
	vals := make([]string, len(r.LimitKey))
	for i, k := range r.LimitKey {
		v, ok := k.value(req, params, subject, claims)
		if !ok {
			v = "\x00"
		}
		vals[i] = v
	}
	return vals
}

// value returns the value of the part k for a request (see
// Route.KeyValues); ok is false when the request lacks it.
func (k KeyPart) value(req RouteRequest, params Params, subject string, claims map[string]string) (v string, ok bool) {
	switch k.Kind {
	case "subject":
		return subject, true
	case "host":
		v = normalHost(req.Host)
		return v, v != ""
	case "header":
		v, ok, _ = one(req.Header, k.Name)
		return strings.ToLower(v), ok
	case "query":
		v, ok, _ = one(req.Query, k.Name)
		return strings.ToLower(v), ok
	case "path":
		v, ok = params[k.Name]
	case "claim":
		v, ok = claims[k.Name]
	}
	return v, ok
}

// methodOverrideHeaders are the headers in which frameworks take the
// method a POST stands for (Rails, Laravel, Symfony, Express's
// method-override, ASP.NET Core's UseHttpMethodOverride).
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// methodParam is the query parameter (and form field) frameworks take the
// method from.
const methodParam = "_method"

// MethodReadings returns the other methods that servers may serve a
// request as, besides method itself, or nil: those its method-override
// headers or _method query parameters name (in upper case, as frameworks
// read them), wherever the query could be split ('&' or ';') and in any
// case of the name. A front should refuse a request whose readings match
// different routes: which of them the server behind serves, no route can
// say. (A _method form field in a body is not read.)
func MethodReadings(method string, h http.Header, rawQuery string) []string {
	var out []string
	for _, name := range methodOverrideHeaders {
		for _, v := range h[name] {
			out = appendMethods(out, method, v)
		}
	}
	if rawQuery == "" {
		return out
	}
	for pair := range strings.FieldsFuncSeq(rawQuery, querySeparator) {
		if v, ok := methodParamValue(pair); ok {
			out = appendMethods(out, method, v)
		}
	}
	return out
}

// appendMethods appends to out the methods the comma-separated list v
// names, in upper case, but method and those out holds already.
func appendMethods(out []string, method, v string) []string {
	for m := range strings.SplitSeq(v, ",") {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" && m != method && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// methodParamValue returns the value of the query pair name=value when
// name is methodParam in any case, perhaps escaped: unescaped, or as it
// is when it does not unescape.
func methodParamValue(pair string) (string, bool) {
	name, value, _ := strings.Cut(pair, "=")
	if len(name) < len(methodParam) {
		return "", false
	}
	if n, err := url.QueryUnescape(name); err != nil || !strings.EqualFold(n, methodParam) {
		return "", false
	}
	if v, err := url.QueryUnescape(value); err == nil {
		return v, true
	}
	return value, true
}

// querySeparator reports whether r separates the pairs of a query, as
// servers differ on: '&', or ';'.
func querySeparator(r rune) bool { return r == '&' || r == ';' }
