package identity

import (
	"slices"
	"strings"
	"unicode"
)

// ParamNames returns the names under which common frameworks read a
// query or form parameter (or a JSON member) named name, at the top
// level of what they parse:
//
//   - PHP ($_GET, $_POST; Laravel, Symfony) ends the name at a NUL,
//     drops leading spaces, reads ' ' and '.' as '_' ("access.token",
//     "access token" are "access_token") and a '[' that no ']' follows as
//     '_' ("access[token");
//   - PHP, Rails (Rack) and Express (qs) read "name[]", "name[0]" and
//     "name[key]" as an array or map under name, and Rack "[name]" as
//     name.
//
// The first name is the one read with neither rule of brackets; each is
// compared ignoring case by [ParamIs], as encoding/json and ASP.NET match
// member names.
func ParamNames(name string) []string {
	names := []string{paramReading(name, true)}
	if r := paramReading(name, false); r != names[0] {
		names = append(names, r)
	}
	if i := strings.IndexByte(name, '['); i >= 0 && !strings.Contains(name[i:], "]") {
		if r := paramReading(name[:i]+"_"+name[i+1:], true); !slices.Contains(names, r) {
			names = append(names, r)
		}
	}
	return names
}

// ParamIs reports whether some framework reads the parameter name as
// want: whether one of [ParamNames] of name is want's, ignoring case
// under Unicode folding ("uſername" is "username" to encoding/json). A
// want that is itself compound ("user[email]", "model.email") is
// compared with name whole, brackets kept.
func ParamIs(name, want string) bool {
	if plainParam(name) { // every reading of it is itself
		if plainParam(want) {
			return strings.EqualFold(name, want)
		}
		return strings.EqualFold(name, paramReading(want, strings.ContainsAny(want, "[].")))
	}
	compound := strings.ContainsAny(want, "[].")
	if compound {
		return strings.EqualFold(paramReading(name, true), paramReading(want, true))
	}
	w := paramReading(want, false)
	return slices.ContainsFunc(ParamNames(name), func(n string) bool { return strings.EqualFold(n, w) })
}

// plainParam reports whether name is made of ASCII letters, digits, '_'
// and '-' alone, which no rule of ParamNames changes: its one reading is
// itself.
func plainParam(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// paramReading is a parameter name as PHP reads it: cut at a NUL,
// surrounding spaces dropped, ' ' and '.' taken for '_'; and unless
// whole, cut at the first '[' with leading brackets dropped (the array
// and nested forms of PHP, Rack and qs: "name[]", "name[0]", Rack's
// "[name]").
func paramReading(name string, whole bool) string {
	name, _, _ = strings.Cut(name, "\x00")
	trim := func(c rune) bool { return unicode.IsSpace(c) || !whole && (c == '[' || c == ']') }
	name = strings.TrimLeftFunc(name, trim)
	if i := strings.IndexByte(name, '['); i >= 0 && !whole {
		name = name[:i]
	}
	name = strings.TrimRightFunc(name, trim)
	return strings.Map(func(c rune) rune {
		if c == ' ' || c == '.' {
			return '_'
		}
		return c
	}, name)
}
