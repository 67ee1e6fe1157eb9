package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
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

var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// friendlier rewords the YAML decoder's messages for people.
func friendlier(m string) string {
	if g := unknownField.FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("unknown field %q (misspelt?)", g[1])
	}
	if strings.Contains(m, "into time.Duration") {
		return m + " (want a duration such as 500ms, 30s, 1m, 1h, 7d)"
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
		UpstreamTimeout: f.Upstream.Timeout,
	}
	c.zone = f.TimeZone
	if f.TimeZone != "" {
		if _, err := time.LoadLocation(f.TimeZone); err != nil {
			c.addf("time_zone", "unknown time zone %q", f.TimeZone)
		}
	}
	c.rejectIf(!versionPattern.MatchString(f.Version), "version", "version must be 1-32 letters, digits, '.', '_' or '-' (got %q)", f.Version)
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
