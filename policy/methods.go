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
	add := func(v string) {
		for m := range strings.SplitSeq(v, ",") {
			if m = strings.ToUpper(strings.TrimSpace(m)); m != "" && m != method && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	for _, name := range methodOverrideHeaders {
		for _, v := range h[name] {
			add(v)
		}
	}
	if rawQuery == "" {
		return out
	}
	for pair := range strings.FieldsFuncSeq(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		name, value, _ := strings.Cut(pair, "=")
		if len(name) < len(methodParam) {
			continue
		}
		if n, err := url.QueryUnescape(name); err != nil || !strings.EqualFold(n, methodParam) {
			continue
		}
		if v, err := url.QueryUnescape(value); err == nil {
			add(v)
		} else {
			add(value)
		}
	}
	return out
}
