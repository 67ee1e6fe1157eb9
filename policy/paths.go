package policy

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CleanPath is the form of a request path that routes are matched
// against: path.Clean of the decoded path (no dot segments, no repeated
// slashes), keeping a trailing slash; "" is "/".
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// checkRoutePath reports why a route path could never be matched as its
// author meant, or nil. Requests are matched on their decoded, cleaned
// path (CleanPath of r.URL.Path), so a route path must be its own clean
// form and must not spell its characters as the raw request line would
// (%2F, %2e%2e): such a route matches no request, and the requests it was
// written for fall silently to another route. The path is literal, so
// pattern syntax ({id}, :id, *), a query or fragment, backslashes and
// characters that cannot be seen are refused too.
func checkRoutePath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("want an absolute path such as /api/ (prefix) or /login (exact), got %q", p)
	}
	if err := checkPathChars(p); err != nil {
		return err
	}
	if strings.Contains(p, "/:") {
		return fmt.Errorf("%q: route paths are literal, a segment starting with ':' is not a parameter (write {id}); a path ending in / matches everything under it", p)
	}
	if err := checkParams(p); err != nil {
		return err
	}
	if c := CleanPath(p); c != p {
		return fmt.Errorf("%q is not a clean path; requests are matched after cleaning, so write %q (no . or .. segments, no repeated slashes)", p, c)
	}
	if strings.HasPrefix(MatchKey(p)+"/", ReservedPrefix) {
		return fmt.Errorf("%q is under %s, which is reserved for Tollgate's own endpoints (forward-auth)", p, ReservedPrefix)
	}
	return nil
}

// pathCharProblems says, for each printable character a route path may
// not hold, why (its %q is the path).
var pathCharProblems = map[rune]string{
	'%':  "%q contains a percent-encoding: routes match the decoded request path (a request for /a%%2Fb is matched as /a/b), so write the characters themselves",
	'\\': "%q contains a backslash: the gateway does not treat it as a separator but some upstreams do, so the route would not cover the requests it names",
	'?':  "%q contains '?': the query is not part of the path",
	'#':  "%q contains '#': the fragment is not part of the path",
	' ':  "%q contains a space",
	';':  "%q contains ';': requests are matched without path parameters (/a;x=1 is matched as /a, as Servlet containers read it)",
}

// checkPathChars reports the first character of the route path p that
// no route path may hold, or invalid UTF-8.
func checkPathChars(p string) error {
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Errorf("%q is not valid UTF-8", p)
		}
		if err := checkPathChar(p, r); err != nil {
			return err
		}
		i += size
	}
	return nil
}

// checkPathChar reports why the route path p may not hold r, or nil.
func checkPathChar(p string, r rune) error {
	if msg, ok := pathCharProblems[r]; ok {
		return fmt.Errorf(msg, p)
	}
	switch {
	case r < 0x20 || r == 0x7f:
		return fmt.Errorf("%q contains a control character (byte %#02x)", p, r)
	case !unicode.IsPrint(r):
		return fmt.Errorf("%q contains an invisible or non-printing character (%U)", p, r)
	case strings.ContainsRune("*<>", r):
		return fmt.Errorf("%q: route paths are literal but for whole-segment parameters ({id}), %q is not a wildcard; a path ending in / matches everything under it", p, r)
	}
	return nil
}

// ReservedPrefix is where the gateway serves its own endpoints on the
// public listener (forward-auth): no route may match under it.
const ReservedPrefix = "/_tollgate/"

// MatchKey returns the form of a cleaned path that routes are matched on:
// the path as every common server reads it, so that a request is charged
// as the route its upstream may serve it as. It is
//
//   - in lower case (for servers that ignore case);
//   - without path parameters (";jsessionid=…", which Servlet containers
//     drop from each segment);
//   - without a segment's trailing dots and spaces ("/export." and
//     "/export%20", which IIS and Windows read as "/export"), and without
//     ASP.NET's cookieless session segments ("/(S(x))/export");
//   - without a first segment that names a PHP front controller when a
//     path follows it ("/index.php/export", which Symfony and Laravel
//     serve as "/export");
//   - without a format extension on its last segment, from its first dot
//     ("/export.json", which Rails, Django REST framework and Spring's
//     suffix patterns serve as "/export"; a leading dot, "/.env", is part
//     of the name);
//
// and the empty segments that leaves merged. The gateway still forwards
// the path as it came. Two routes whose paths have one MatchKey are one
// route ("/export" and "/export.json"). A dot segment is resolved only
// where it had parameters ("/a/..;/b" is "/b" to Servlet containers;
// AmbiguousPath refuses such requests): a cleaned path has no other, and
// a reading of the path that keeps them (PathReadings) must keep them
// here too.
func MatchKey(p string) string { return matchKey(p, false) }

// prefixKey is the MatchKey of a prefix route's path: every segment of it
// comes before the rest of a path it matches, so none is a last segment
// that loses a format extension ("/helloworld.Greeter/" is a gRPC
// service's methods, not "/helloworld/").
func prefixKey(p string) string { return matchKey(p, true) }

// matchKey is MatchKey, and with prefix prefixKey.
func matchKey(p string, prefix bool) string {
	if plainKey(p) {
		return p // the usual case: nothing to do, nothing allocated
	}
	kept, dotParams := keySegments(strings.Split(strings.ToLower(p), "/"))
	// kept[0] is "" (p is absolute); kept[len-1] is "" for a trailing slash.
	if len(kept) > 2 && len(kept[1]) > len(".php") && strings.HasSuffix(kept[1], ".php") {
		kept = append(kept[:1], kept[2:]...) // a front controller
	}
	if !prefix {
		stripFormat(kept)
	}
	if dotParams {
		// "/a/..;/b" is "/b" to the servers that drop parameters.
		return CleanPath(strings.Join(kept, "/"))
	}
	if k := strings.Join(kept, "/"); strings.Trim(k, "/") != "" {
		return k
	}
	return "/"
}

// plainKey reports whether p is its own MatchKey: nothing in it that
// servers read away.
func plainKey(p string) bool {
	for i := 0; i < len(p); i++ {
		if readAway[p[i]] {
			return false
		}
	}
	return true
}

// readAway holds the bytes of a path some server reads away or
// otherwise in a match key (see MatchKey): ';', '.', ' ', '(', upper
// case and every byte of a multi-byte character.
var readAway = func() (t [256]bool) {
	for c := range t {
		t[c] = c == ';' || c == '.' || c == ' ' || c == '(' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	return t
}()

// dotSegment reports whether a path segment is "." or "..".
func dotSegment(s string) bool { return s == "." || s == ".." }

// keySegments returns a lower-case path's segments without their path
// parameters and trailing dots and spaces, the empty ones that leaves
// dropped (but the first and last), and whether a dot segment had
// parameters.
func keySegments(segs []string) (kept []string, dotParams bool) {
	kept = segs[:0]
	for i, s := range segs {
		s, _, params := strings.Cut(s, ";")
		switch {
		case dotSegment(s):
			dotParams = dotParams || params
		case cookieless(s):
			s = ""
		default:
			s = strings.TrimRight(s, ". ")
		}
		if s != "" || i == 0 || i == len(segs)-1 {
			kept = append(kept, s)
		}
	}
	return kept, dotParams
}

// cookieless reports whether a (lower-case) segment is an ASP.NET
// cookieless session segment, "(s(...))" or several as "(a(...)s(...))",
// which IIS removes from the path wherever it stands.
func cookieless(seg string) bool {
	if len(seg) < 5 || seg[0] != '(' || seg[len(seg)-1] != ')' {
		return false
	}
	for rest := seg[1 : len(seg)-1]; rest != ""; {
		if len(rest) < 3 || rest[0] < 'a' || rest[0] > 'z' || rest[1] != '(' {
			return false
		}
		end := strings.IndexByte(rest, ')')
		if end < 0 || strings.ContainsAny(rest[2:end], "(") {
			return false
		}
		rest = rest[end+1:]
	}
	return true
}

// stripFormat removes the format extension of the last of a path's
// segments, kept, or of the one before a trailing slash ("/export.json/"
// is "/export/" to Rails).
func stripFormat(kept []string) {
	last := len(kept) - 1
	if kept[last] == "" && last > 1 {
		last--
	}
	kept[last] = withoutFormat(kept[last])
}

// withoutFormat returns a last segment without its format extension, from
// its first dot ("export.json.gz" is "export"); a leading dot is part of
// the name (".env"), and a dot segment stays one.
func withoutFormat(s string) string {
	if dotSegment(s) {
		return s
	}
	if dot := strings.IndexByte(s, '.'); dot > 0 {
		return strings.TrimRight(s[:dot], ". ")
	}
	return s
}

// AmbiguousPath returns why servers may read the decoded request path p
// as different resources, or "": a backslash (a separator to some), a
// control byte (where some stop reading), a dot segment with path
// parameters ("/a/..;/b" is "/b" to a Servlet container and under /a/ to
// most others), or a segment of only dots and spaces beside "." and ".."
// ("/a/.. /b" is "/b" to IIS, which reads trailing dots and spaces
// away). No route could say which resource such a request names.
func AmbiguousPath(p string) string {
	if strings.IndexFunc(p, backslashOrControl) >= 0 {
		return "the request path holds a backslash or a control character (perhaps escaped, as %5C or %00)"
	}
	if !strings.Contains(p, "/.") && !strings.Contains(p, "/ ") {
		return "" // the usual case
	}
	for seg := range strings.SplitSeq(p, "/") {
		if why := ambiguousSegment(seg); why != "" {
			return why
		}
	}
	return ""
}

// backslashOrControl reports whether c is a backslash or a control
// character, where servers' readings of a path part.
func backslashOrControl(c rune) bool { return c == '\\' || c < 0x20 || c == 0x7f }

// ambiguousSegment returns why servers may read the path segment seg
// differently (see AmbiguousPath), or "".
func ambiguousSegment(seg string) string {
	name, _, params := strings.Cut(seg, ";")
	switch {
	case params && dotSegment(name):
		return "the request path holds a dot segment with parameters (such as ..;), which servers read differently"
	case name != "" && !dotSegment(name) && strings.Trim(name, ". ") == "":
		return "the request path holds a segment of only dots and spaces (such as '.. ' or '...'), which IIS reads as a dot segment or away"
	}
	return ""
}

// PathReadings returns the other paths that servers may read the escaped
// request path as, besides the CleanPath of its decoded form that routes
// are matched on, or nil when there is no other: servers differ on dot
// segments ("..", and "%2e%2e", which some resolve, some resolve only
// when written literally, and some, such as Express, chi and Werkzeug,
// keep as names) and on an encoded slash ("%2F", a separator to some, a
// byte within one segment to most). Each reading merges empty segments
// (as CleanPath does) and keeps a trailing slash; in the readings that
// keep an encoded slash within its segment it is written "%2f", which
// no route path holds.
//
// A front that hands the request on as it came (forward-auth, the
// middleware in front of a handler) should refuse a request whose
// readings match different routes: which of them the server behind
// serves, no route can say.
func PathReadings(escaped string) []string {
	if !readsDifferently(escaped) {
		return nil
	}
	raw := strings.Split(escaped, "/")
	decoded := make([]string, len(raw))
	for i, s := range raw {
		d, err := url.PathUnescape(s)
		if err != nil {
			d = s // net/http refuses such a path before this
		}
		decoded[i] = d
	}
	trailing := strings.HasSuffix(escaped, "/")
	var out []string
	for _, splitSlash := range []bool{true, false} {
		for _, literalDots := range []bool{true, false} {
			if p := pathReading(raw, decoded, splitSlash, literalDots, trailing); !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// pathReading returns the path whose escaped segments are raw (decoded,
// decoded) as one server reads it: one that splits segments at an encoded
// slash (splitSlash; else it is written "%2f" within its segment), and
// resolves the dot segments written literally (literalDots) or none.
// Empty segments are merged, and a trailing slash kept if trailing.
func pathReading(raw, decoded []string, splitSlash, literalDots, trailing bool) string {
	var segs []string
	for i, d := range decoded {
		dots := literalDots && dotSegment(raw[i])
		var parts []string
		if splitSlash {
			parts = strings.Split(d, "/")
		} else {
			parts = []string{strings.ReplaceAll(d, "/", "%2f")}
		}
		for _, s := range parts {
			switch {
			case s == "":
			case dots && s == ".":
			case dots && s == "..":
				if len(segs) > 0 {
					segs = segs[:len(segs)-1]
				}
			default:
				segs = append(segs, s)
			}
		}
	}
	p := "/" + strings.Join(segs, "/")
	if trailing && p != "/" {
		p += "/"
	}
	return p
}

// QueryPaths returns the paths that PHP front controllers serve a request
// for the cleaned path with the raw query as, when the path is the site's
// root or a front controller alone ("/", "/index.php"): a query that
// starts with '/' up to a second '?' (CodeIgniter: "/index.php?/api/x"
// is "/api/x"), the q parameter (Drupal 7), the r parameter (Yii) and the
// rest_route parameter under /wp-json (WordPress); each decoded and
// cleaned. A request whose readings match different routes names no one
// route: fronts refuse it.
func QueryPaths(path, rawQuery string) []string {
	if rawQuery == "" {
		return nil
	}
	if p := strings.Trim(path, "/"); p != "" && (strings.Contains(p, "/") || !strings.HasSuffix(strings.ToLower(p), ".php")) {
		return nil
	}
	var out []string
	if strings.HasPrefix(rawQuery, "/") {
		q, _, _ := strings.Cut(rawQuery, "?")
		out = appendQueryPath(out, "", q)
	}
	for pair := range strings.FieldsFuncSeq(rawQuery, querySeparator) {
		name, value, _ := strings.Cut(pair, "=")
		v, err := url.QueryUnescape(value)
		if err != nil {
			continue
		}
		switch name {
		case "q", "r":
			out = appendQueryPath(out, "", v)
		case "rest_route":
			out = appendQueryPath(out, "/wp-json", v)
		}
	}
	return out
}

// appendQueryPath appends to out the path p that a query names, under
// prefix: decoded (if it decodes) and cleaned.
func appendQueryPath(out []string, prefix, p string) []string {
	if d, err := url.PathUnescape(p); err == nil {
		p = d
	}
	return append(out, CleanPath(prefix+"/"+strings.TrimPrefix(p, "/")))
}

// pathHeaders are the headers that Symfony (before 2018: CVE-2018-14773)
// and Zend read as the request's path, as IIS's URL rewriting set them.
var pathHeaders = []string{"X-Original-Url", "X-Rewrite-Url"}

// HeaderPaths returns the paths that the request's headers name as its
// own to the frameworks that read them (pathHeaders), cleaned.
func HeaderPaths(h http.Header) []string {
	var out []string
	for _, name := range pathHeaders {
		for _, v := range h[name] {
			p, _, _ := strings.Cut(v, "?")
			if d, err := url.PathUnescape(p); err == nil {
				p = d
			}
			out = append(out, CleanPath("/"+strings.TrimPrefix(p, "/")))
		}
	}
	return out
}

// readsDifferently reports whether an escaped path may hold a dot
// segment or an encoded slash: whether PathReadings has work to do.
func readsDifferently(escaped string) bool {
	for i := 0; i < len(escaped); i++ {
		switch escaped[i] {
		case '.':
			if i == 0 || escaped[i-1] == '/' {
				return true
			}
		case '%':
			if i+2 < len(escaped) && escaped[i+1] == '2' && (escaped[i+2]|0x20 == 'e' || escaped[i+2]|0x20 == 'f') {
				return true
			}
		}
	}
	return false
}
