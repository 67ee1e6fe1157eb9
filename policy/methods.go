package policy

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

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
