package policy

import (
	"bytes"
	"maps"
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
	if g[2] == "" {
		return d, true
	}
	return plusDuration(d, g[2])
}

// plusDuration returns d plus the Go duration s; ok is false when s is
// no such duration, is negative, or the sum overflows.
func plusDuration(d time.Duration, s string) (time.Duration, bool) {
	rest, err := time.ParseDuration(s)
	if err != nil || rest < 0 || d > 1<<63-1-rest {
		return 0, false
	}
	return d + rest, true
}

// edit replaces data[at:at+n] with text.
type edit struct {
	at, n int
	text  string
}

// withDays returns data with every duration written in days, in a field
// of v's type, rewritten in hours (root is data parsed).
func withDays(data []byte, root *yaml.Node, v any) []byte {
	w := &dayWalk{data: data, starts: lineStarts(data)}
	w.walk(root, reflect.TypeOf(v))
	if len(w.edits) == 0 {
		return data
	}
	return applyEdits(data, w.edits)
}

// lineStarts returns the offset in data of every line's first byte.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, b := range data {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// applyEdits returns a copy of data with the edits made; they do not
// overlap.
func applyEdits(data []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool { return edits[i].at > edits[j].at })
	out := append([]byte(nil), data...)
	for _, e := range edits {
		out = append(out[:e.at], append([]byte(e.text), out[e.at+e.n:]...)...)
	}
	return out
}

// dayWalk collects the edits that rewrite a file's durations in days:
// data is the file, starts its lines' offsets (lineStarts).
type dayWalk struct {
	data   []byte
	starts []int
	edits  []edit
}

// walk visits the node n, decoded into a value of type t, and every node
// under it that a duration field is decoded from.
func (w *dayWalk) walk(n *yaml.Node, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.DocumentNode:
		w.walkAll(n.Content, t)
	case t == durationType:
		w.duration(n)
	case n.Kind == yaml.MappingNode:
		w.mapping(n, t)
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		w.walkAll(n.Content, t.Elem())
	}
}

// walkAll visits each of the nodes ns, each decoded into a value of type
// t.
func (w *dayWalk) walkAll(ns []*yaml.Node, t reflect.Type) {
	for _, n := range ns {
		w.walk(n, t)
	}
}

// duration records the edit that rewrites the node of a duration field,
// if it is a scalar written in days.
func (w *dayWalk) duration(n *yaml.Node) {
	if n.Kind != yaml.ScalarNode {
		return
	}
	if e, ok := dayEdit(w.data, w.starts, n); ok {
		w.edits = append(w.edits, e)
	}
}

// mapping visits the values of a mapping decoded into a struct (those of
// its fields) or a map.
func (w *dayWalk) mapping(n *yaml.Node, t reflect.Type) {
	switch t.Kind() {
	case reflect.Struct:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if ft, ok := fields[n.Content[i].Value]; ok {
				w.walk(n.Content[i+1], ft)
			}
		}
	case reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.walk(n.Content[i+1], t.Elem())
		}
	}
}

// dayEdit returns the edit that writes the scalar n, a duration in days,
// in hours; ok is false when n is no such duration or cannot be found
// as written.
func dayEdit(data []byte, starts []int, n *yaml.Node) (edit, bool) {
	d, ok := days(n.Value)
	if !ok || outside(n.Line, 1, len(starts)) || n.Column < 1 {
		return edit{}, false
	}
	line := lineAt(data, starts, n.Line)
	at := columnOffset(string(line), n.Column)
	raw, ok := asWritten(n)
	if at < 0 || !ok || !strings.HasPrefix(string(line[at:]), raw) {
		return edit{}, false
	}
	return edit{at: starts[n.Line-1] + at, n: len(raw), text: d.String()}, true
}

// lineAt returns the line numbered line (from 1) of data, whose lines
// start at starts, without its newline.
func lineAt(data []byte, starts []int, line int) []byte {
	l := data[starts[line-1]:]
	if i := bytes.IndexByte(l, '\n'); i >= 0 {
		return l[:i]
	}
	return l
}

// columnOffset returns the byte offset in line of the column col
// (columns count characters, from 1), or -1 past its end.
func columnOffset(line string, col int) int {
	c := 1
	for i := range line {
		if c == col {
			return i
		}
		c++
	}
	return -1
}

// asWritten returns the scalar n as its text spells it: plain, or in
// quotes; ok is false for the other styles (block, folded).
func asWritten(n *yaml.Node) (string, bool) {
	switch n.Style {
	case 0:
		return n.Value, true
	case yaml.DoubleQuotedStyle:
		return `"` + n.Value + `"`, true
	case yaml.SingleQuotedStyle:
		return `'` + n.Value + `'`, true
	}
	return "", false
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
			maps.Copy(m, yamlFields(f.Type))
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		m[orDefault(name, strings.ToLower(f.Name))] = f.Type
	}
	return m
}
