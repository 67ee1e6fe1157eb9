package policy

import (
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Durations in the file are Go durations (500ms, 30s, 1m, 1h), and also
// days: "1d", "7d", "1d12h" (a day is 24 hours here; calendar quotas,
// calendar: day, follow the time zone instead). YAML decodes a
// time.Duration with time.ParseDuration, which knows no days, so before
// decoding, every duration written with days is rewritten in hours in
// the file's text, in place: lines stay where they were, so problems are
// still reported at their lines.

var durationType = reflect.TypeFor[time.Duration]()

var daysPattern = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// ParseDuration parses a policy duration: time.ParseDuration's syntax,
// or a number of days ("7d") followed by one ("1d12h").
func ParseDuration(s string) (time.Duration, error) {
	if d, ok := days(s); ok {
		return d, nil
	}
	return time.ParseDuration(s)
}

// days parses "<n>d" and "<n>d<go duration>"; ok is false for anything
// else, including counts of days a Duration cannot hold.
func days(s string) (time.Duration, bool) {
	g := daysPattern.FindStringSubmatch(s)
	if g == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(g[1], 10, 64)
	const maxDays = int64(1<<63-1) / int64(24*time.Hour)
	if err != nil || n > maxDays {
		return 0, false
	}
	d := time.Duration(n) * 24 * time.Hour
	if g[2] != "" {
		rest, err := time.ParseDuration(g[2])
		if err != nil || rest < 0 || d > 1<<63-1-rest {
			return 0, false
		}
		d += rest
	}
	return d, true
}

// edit replaces data[at:at+n] with text.
type edit struct {
	at, n int
	text  string
}

// withDays returns data with every duration written in days, in a field
// of v's type, rewritten in hours (root is data parsed).
func withDays(data []byte, root *yaml.Node, v any) []byte {
	var edits []edit
	starts := []int{0}
	for i, b := range data {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	var walk func(n *yaml.Node, t reflect.Type)
	walk = func(n *yaml.Node, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				walk(c, t)
			}
			return
		}
		switch {
		case t == durationType:
			if n.Kind == yaml.ScalarNode {
				if e, ok := dayEdit(data, starts, n); ok {
					edits = append(edits, e)
				}
			}
		case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
			fields := yamlFields(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				if ft, ok := fields[n.Content[i].Value]; ok {
					walk(n.Content[i+1], ft)
				}
			}
		case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], t.Elem())
			}
		case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, t.Elem())
			}
		}
	}
	walk(root, reflect.TypeOf(v))
	if len(edits) == 0 {
		return data
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].at > edits[j].at })
	out := append([]byte(nil), data...)
	for _, e := range edits {
		out = append(out[:e.at], append([]byte(e.text), out[e.at+e.n:]...)...)
	}
	return out
}

// dayEdit returns the edit that writes the scalar n, a duration in days,
// in hours; ok is false when n is no such duration or cannot be found
// as written.
func dayEdit(data []byte, starts []int, n *yaml.Node) (edit, bool) {
	d, ok := days(n.Value)
	if !ok || n.Line < 1 || n.Line > len(starts) || n.Column < 1 {
		return edit{}, false
	}
	line := data[starts[n.Line-1]:]
	if i := strings.IndexByte(string(line), '\n'); i >= 0 {
		line = line[:i]
	}
	// Columns count characters.
	at := -1
	col := 1
	for i := range string(line) {
		if col == n.Column {
			at = i
			break
		}
		col++
	}
	if at < 0 {
		return edit{}, false
	}
	raw := n.Value
	switch n.Style {
	case yaml.DoubleQuotedStyle:
		raw = `"` + raw + `"`
	case yaml.SingleQuotedStyle:
		raw = `'` + raw + `'`
	case 0:
	default:
		return edit{}, false
	}
	if !strings.HasPrefix(string(line[at:]), raw) {
		return edit{}, false
	}
	return edit{at: starts[n.Line-1] + at, n: len(raw), text: d.String()}, true
}

// yamlFields maps the YAML names of a struct's fields, those of inline
// structs included, to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}
