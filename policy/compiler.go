package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

type compiler struct {
	file     string
	lines    map[string]int
	problems []Issue
	warnings []Issue
	zone     string // the file's default time zone
	// fromCode: the File was built in Go (Compile), for a front that may
	// limit every request by plan alone, so routes are optional.
	fromCode bool
	// unreadable: the file is no YAML the decoder could map onto File at
	// all (a syntax error), so nothing in it can be compiled; a value of
	// the wrong type leaves the rest decoded, and compiled.
	unreadable bool
}

// withoutEchoes drops the problems after the first n (the decoder's)
// that stand on a line one of those does: what the compiler says of a
// value the decoder could not read is no news.
func (c *compiler) withoutEchoes(n int) {
	decoded := map[string]bool{}
	for _, pr := range c.problems[:n] {
		decoded[pr.File+":"+strconv.Itoa(pr.Line)] = true
	}
	kept := c.problems[:n]
	for _, pr := range c.problems[n:] {
		if !decoded[pr.File+":"+strconv.Itoa(pr.Line)] {
			kept = append(kept, pr)
		}
	}
	c.problems = kept
}

func (c *compiler) err() error {
	sort.SliceStable(c.problems, func(i, j int) bool {
		a, b := c.problems[i], c.problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
	return &ValidationError{Issues: c.problems}
}

// add records a problem at a path of the file whose line map is lines.
func (c *compiler) add(lines map[string]int, file, path, format string, args ...any) {
	c.problems = append(c.problems, problemAt(lines, file, path, format, args...))
}

// required records "KEY is required" at path (in lines, of file) when
// the file leaves the key out, and reports whether it did; a key written
// empty is its rule's to refuse. A policy built in code (no lines) leaves
// nothing out.
func (c *compiler) required(lines map[string]int, file, path, value string) bool {
	if _, written := lines[path]; value != "" || written || lines == nil {
		return false
	}
	c.add(lines, file, path, "%s is required", path[strings.LastIndex(path, ".")+1:])
	return true
}

// addf records a problem at a path of the policy file.
func (c *compiler) addf(path, format string, args ...any) {
	c.add(c.lines, c.file, path, format, args...)
}

// rejectIf records a problem at path when bad: one rule of a check, its
// message's arguments read whether or not it is broken.
func (c *compiler) rejectIf(bad bool, path, format string, args ...any) {
	if bad {
		c.addf(path, format, args...)
	}
}

// addErr records err, if not nil, as a problem at path.
func (c *compiler) addErr(path string, err error) {
	if err != nil {
		c.addf(path, "%v", err)
	}
}

// warnf records a warning: the policy loads, but check and serve say it.
func (c *compiler) warnf(path, format string, args ...any) {
	c.warnings = append(c.warnings, problemAt(c.lines, c.file, path, format, args...))
}

// problemAt places a message at a path of the file whose line map is lines.
func problemAt(lines map[string]int, file, path, format string, args ...any) Issue {
	line := 0
	for p := path; p != ""; p = parent(p) {
		if l, ok := lines[p]; ok {
			line = l
			break
		}
	}
	return Issue{File: file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
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
		c.problems = append(c.problems, Issue{File: file, Msg: "the file is empty"})
		return lines
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		c.yamlProblems(file, err)
		return lines
	}
	walk(&root, "", lines)
	data = withDays(data, &root, v)
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
		c.unreadable = true
	}
	for _, m := range msgs {
		pr := Issue{File: file, Msg: m}
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			pr.Line, _ = strconv.Atoi(g[1])
			pr.Msg = g[2]
		}
		pr.Msg = friendlier(pr.Msg)
		c.problems = append(c.problems, pr)
	}
}

var (
	unknownField = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	cannotDecode = regexp.MustCompile(`^cannot unmarshal (!!\w+)( .*)? into (\S+)$`)
)

// friendlier rewords the YAML decoder's messages for people: no Go type
// is named, and an unknown key is told the key it may have meant.
func friendlier(m string) string {
	if g := unknownField.FindStringSubmatch(m); g != nil {
		return unknownKey(g[1], fileKeys[g[2]])
	}
	if g := cannotDecode.FindStringSubmatch(m); g != nil {
		m = fmt.Sprintf("want %s, got %s%s", goTypeText(g[3]), yamlKinds[g[1]], g[2])
		if g[3] == "time.Duration" {
			m += " (a duration such as 500ms, 30s, 1m, 1h, 7d)"
		}
	}
	return m
}

// unknownKey is the message of a key that is none of keys: the key meant,
// if one is near, else the keys there are.
func unknownKey(name string, keys []string) string {
	best, dist := "", 3 // at most two edits away
	for _, k := range keys {
		if d := editDistance(name, k); d < dist {
			best, dist = k, d
		}
	}
	switch {
	case best != "":
		return fmt.Sprintf("unknown field %q: did you mean %q?", name, best)
	case len(keys) > 0:
		return fmt.Sprintf("unknown field %q (the keys here are %s)", name, strings.Join(keys, ", "))
	}
	return fmt.Sprintf("unknown field %q", name)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// yamlKinds names the YAML decoder's tags.
var yamlKinds = map[string]string{"!!str": "a string", "!!int": "a number", "!!float": "a number", "!!bool": "a boolean",
	"!!seq": "a list", "!!map": "a mapping", "!!null": "nothing", "!!timestamp": "a date"}

// goTypeText names a Go type of the file's as its reference does.
func goTypeText(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case t == "time.Duration":
		return "a duration"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "a whole number"
	}
	name := strings.TrimPrefix(strings.TrimPrefix(t, "*"), "policy.")
	return "a mapping (" + strings.ToLower(strings.TrimSuffix(name, "Spec")) + ")"
}

// fileKeys maps the Go name of each struct type of the file
// (policy.LimitSpec) to its keys, those of inline fields included.
var fileKeys = func() map[string][]string {
	m := map[string][]string{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == durationType || m[t.String()] != nil {
			return
		}
		m[t.String()] = structKeys(t, add)
	}
	add(reflect.TypeFor[File]())
	return m
}()

// structKeys lists the YAML keys of the struct type t, those of inline
// fields in their place, calling visit on each field's type.
func structKeys(t reflect.Type, visit func(reflect.Type)) []string {
	keys := []string{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			keys = append(keys, structKeys(f.Type, visit)...)
		case name != "" && name != "-":
			keys = append(keys, name)
			visit(f.Type)
		}
	}
	return keys
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
	claimPattern   = regexp.MustCompile(`^[\x21-\x7e]{1,128}$`)
)

// compile compiles the file's every section but the API keys (compileKeys),
// in the order they depend on each other. It reads nothing but f and env.
func (c *compiler) compile(f *File, env Env) *Policy {
	p := &Policy{
		Version:         f.Version,
		Store:           f.Store,
		Plans:           map[string]*Plan{},
		Keys:            map[string]*APIKey{},
		LegacyHeaders:   f.Headers.Legacy,
		LLMHeaders:      f.Headers.LLM,
		UpstreamTimeout: f.Upstream.Timeout,
	}
	c.zone = f.TimeZone
	if f.TimeZone != "" {
		if _, err := time.LoadLocation(f.TimeZone); err != nil {
			c.addf("time_zone", "unknown time zone %q", f.TimeZone)
		}
	}
	c.rejectIf(!c.required(c.lines, c.file, "version", f.Version) && !versionPattern.MatchString(f.Version), "version", "version must be 1-32 letters, digits, '.', '_' or '-' (got %q)", f.Version)
	c.listeners(p, f.Listeners, env)
	c.logging(p, f.Logging)
	c.tracing(p, f.Tracing, env)
	c.store(p)
	c.identity(p, f.Identity, env)
	c.plans(p, f)
	c.jwt(p, f, env)
	c.tenants(p, f)
	c.invalidKey(p, f.InvalidKeyLimit)
	c.routes(p, f)
	if f.Region != nil {
		c.region(p, f.Region)
	}
	c.costs(p)
	if f.Shadow {
		c.shadow(p)
	}
	c.steps(p)
	if len(c.problems) == 0 {
		c.handles(p)
	}
	if p.UpstreamTimeout == 0 {
		p.UpstreamTimeout = 30 * time.Second
	} else if p.UpstreamTimeout < 0 {
		c.addf("upstream.timeout", "must be positive")
	}
	return p
}

// outside reports whether v is outside the range from lo to hi.
func outside[T cmp.Ordered](v, lo, hi T) bool { return v < lo || v > hi }

func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// share reads the share at path, from 0 to 1: 1 when unset, or when it
// is out of range (a problem).
func (c *compiler) share(path string, v *float64) float64 {
	if v == nil {
		return 1
	}
	if *v < 0 || *v > 1 || *v != *v {
		c.addf(path, "want a share from 0 to 1, got %v", *v)
		return 1
	}
	return *v
}
