// Package reference generates the policy file's reference from the code:
// a JSON Schema (policy/schema.json, which `tollgate schema` prints and
// editors check a policy against) and docs/reference/configuration.md.
// Both come from policy.File's types, their yaml tags and the doc comments
// of their fields, so neither can say what the code does not: a test
// fails when the files in the tree are not what Generate makes.
//
// A field's comment is read as a meaning, its first sentence, then lines
// of the form "Default: …", "One of: a, b." and "Range: … to …", which
// become the reference's columns and the schema's default, enum and
// required keys.
package reference

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// The generated files, from the module's root.
const (
	SchemaFile   = "policy/schema.json"
	MarkdownFile = "docs/reference/configuration.md"
)

// SchemaID is the schema's $id.
const SchemaID = "https://github.com/tollgate/tollgate/policy/schema.json"

// A key is one key of the file, as a type's field.
type key struct {
	name    string       // the YAML key
	typ     reflect.Type // the field's type
	meaning string       // the first sentence of its comment
	more    string       // the rest of the comment, but the lines below
	def     string       // Default:, "" for none given
	oneOf   []string     // One of:
	rng     string       // Range:
}

// A section is one struct type: its doc and its keys, inline fields'
// keys included.
type section struct {
	typ  reflect.Type
	doc  string
	keys []key
}

// Generate returns the schema and the Markdown reference of the policy
// file, reading the doc comments in the policy package's source in dir.
func Generate(dir string) (schema, markdown []byte, err error) {
	docs, err := readDocs(dir)
	if err != nil {
		return nil, nil, err
	}
	g := &generator{docs: docs, seen: map[reflect.Type]bool{}}
	g.walk(reflect.TypeFor[policy.File]())
	schema, err = g.schema()
	if err != nil {
		return nil, nil, err
	}
	return schema, g.markdown(), nil
}

// typeDocs are the doc comments of a package's struct types: the type's
// own (under "") and each field's, by type and field name.
type typeDocs map[string]map[string]string

// readDocs reads the doc comments of the struct types in the Go files of
// dir (tests excluded).
func readDocs(dir string) (typeDocs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	docs := typeDocs{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("reading the policy's comments: %w", err)
		}
		addDocs(docs, f)
	}
	return docs, nil
}

// addDocs adds the doc comments of f's struct types to docs.
func addDocs(docs typeDocs, f *ast.File) {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			fields := map[string]string{"": commentText(ts.Doc, gd.Doc)}
			for _, fl := range st.Fields.List {
				for _, n := range fl.Names {
					fields[n.Name] = commentText(fl.Doc, fl.Comment)
				}
			}
			docs[ts.Name.Name] = fields
		}
	}
}

// commentText is the first of groups that holds text, as text.
func commentText(groups ...*ast.CommentGroup) string {
	for _, g := range groups {
		if t := strings.TrimSpace(g.Text()); t != "" {
			return t
		}
	}
	return ""
}

// A generator walks the file's types into sections, each once.
type generator struct {
	docs     typeDocs
	seen     map[reflect.Type]bool
	sections []section
}

// walk adds the section of the struct type t, and of every struct type
// its keys hold, once each, in the order they are first met.
func (g *generator) walk(t reflect.Type) {
	if g.seen[t] {
		return
	}
	g.seen[t] = true
	s := section{typ: t, doc: g.docs[t.Name()][""]}
	s.keys = g.keys(t)
	g.sections = append(g.sections, s)
	for _, k := range s.keys {
		if st, ok := structOf(k.typ); ok {
			g.walk(st)
		}
	}
}

// keys returns the keys of the struct type t, those of its inline fields
// in their place.
func (g *generator) keys(t reflect.Type) []key {
	var keys []key
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case opts == "inline":
			keys = append(keys, g.keys(f.Type)...)
		case name != "":
			keys = append(keys, readKey(name, f.Type, g.docs[t.Name()][f.Name]))
		}
	}
	return keys
}

// readKey reads a key's comment into its parts.
func readKey(name string, t reflect.Type, doc string) key {
	k := key{name: name, typ: t}
	var rest []string
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "Default: "):
			k.def = strings.TrimSuffix(strings.TrimPrefix(line, "Default: "), ".")
		case strings.HasPrefix(line, "One of: "):
			for _, v := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "One of: "), "."), ",") {
				k.oneOf = append(k.oneOf, strings.Trim(strings.TrimSpace(v), "`\""))
			}
		case strings.HasPrefix(line, "Range: "):
			k.rng = strings.TrimSuffix(strings.TrimPrefix(line, "Range: "), ".")
		default:
			rest = append(rest, line)
		}
	}
	text := strings.Join(strings.Fields(strings.Join(rest, " ")), " ")
	k.meaning, k.more = firstSentence(text)
	return k
}

// firstSentence splits text after its first sentence.
func firstSentence(text string) (first, rest string) {
	for i := 0; i+1 < len(text); i++ {
		if text[i] == '.' && text[i+1] == ' ' && !strings.HasSuffix(text[:i], "e.g") && !strings.HasSuffix(text[:i], "i.e") {
			return text[:i+1], strings.TrimSpace(text[i+1:])
		}
	}
	return text, ""
}

// structOf returns the struct type a key's values are, or hold (its
// elements, its map's values, through pointers), and false for none.
func structOf(t reflect.Type) (reflect.Type, bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	return t, t.Kind() == reflect.Struct && t != durationType
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	byteSizeType = reflect.TypeFor[policy.ByteSize]()
)

// durationPattern is what a duration written as a string looks like: Go's
// (500ms, 1h30m), optionally after a number of days (7d, 1d12h), or 0.
const durationPattern = `^(0|([0-9]+d)?([0-9]*\.?[0-9]+(ns|us|µs|ms|s|m|h))*)$`

// sectionName is the name of a type's section: its name without Spec, in
// lower case; the file's own is "file".
func sectionName(t reflect.Type) string {
	return strings.ToLower(strings.TrimSuffix(t.Name(), "Spec"))
}

// typeText is a key's type as the reference says it.
func typeText(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == byteSizeType:
		return "size"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeText(t.Elem())
	case reflect.Slice:
		return "list of " + typeText(t.Elem())
	case reflect.Map:
		return "map of " + typeText(t.Elem())
	case reflect.Struct:
		return "[" + sectionName(t) + "](#" + sectionName(t) + ")"
	case reflect.Bool:
		return "boolean"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	}
	return "integer"
}

// schema returns the JSON Schema: the file's section at the top, every
// other one under $defs.
func (g *generator) schema() ([]byte, error) {
	defs := map[string]any{}
	for _, s := range g.sections[1:] {
		defs[sectionName(s.typ)] = g.object(s)
	}
	root := g.object(g.sections[0])
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "Tollgate policy"
	root["$defs"] = defs
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encoding the schema: %w", err)
	}
	return b.Bytes(), nil
}

// object is a section's schema: an object of its keys and no others.
func (g *generator) object(s section) map[string]any {
	props := map[string]any{}
	var required []string
	for _, k := range s.keys {
		p := valueSchema(k.typ)
		if d := description(k); d != "" {
			p["description"] = d
		}
		if len(k.oneOf) > 0 && k.typ.Kind() == reflect.String {
			p["enum"] = k.oneOf
		}
		props[k.name] = p
		if k.def == "required" {
			required = append(required, k.name)
		}
	}
	o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if s.doc != "" {
		o["description"] = oneLine(s.doc)
	}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// description is a key's description in the schema: its meaning, then
// its default and range.
func description(k key) string {
	d := k.meaning
	if k.def != "" {
		d += " Default: " + k.def + "."
	}
	if k.rng != "" {
		d += " Range: " + k.rng + "."
	}
	return strings.TrimSpace(d)
}

// valueSchema is the schema of a value of type t.
func valueSchema(t reflect.Type) map[string]any {
	switch {
	case t == durationType:
		return map[string]any{"type": "string", "pattern": durationPattern}
	case t == byteSizeType:
		return map[string]any{"type": []string{"string", "integer"}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return valueSchema(t.Elem())
	case reflect.Slice:
		return map[string]any{"type": "array", "items": valueSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": valueSchema(t.Elem())}
	case reflect.Struct:
		return map[string]any{"$ref": "#/$defs/" + sectionName(t)}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	}
	return map[string]any{"type": "integer"}
}

// oneLine is text on one line.
func oneLine(text string) string { return strings.Join(strings.Fields(text), " ") }

// markdown returns the reference: a table of keys per section.
func (g *generator) markdown() []byte {
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated by internal/reference from policy's types and comments (`go generate ./policy`); do not edit. -->\n\n")
	b.WriteString("Every key of a policy file, by the section it belongs to. Durations are Go durations (`500ms`, `1m`, `1h30m`) or days (`7d`, `1d12h`); sizes are bytes or `KiB`, `MiB`. The same is a JSON Schema at `policy/schema.json` (`tollgate schema` prints it); put `# yaml-language-server: $schema=<path to it>` at the top of a file for an editor to check and complete it.\n\n")
	names := make([]string, 0, len(g.sections))
	for _, s := range g.sections {
		names = append(names, "["+sectionName(s.typ)+"](#"+sectionName(s.typ)+")")
	}
	b.WriteString("Sections: " + strings.Join(names, ", ") + ".\n")
	for _, s := range g.sections {
		fmt.Fprintf(&b, "\n## %s\n\n", sectionName(s.typ))
		if s.doc != "" {
			b.WriteString(oneLine(s.doc) + "\n\n")
		}
		b.WriteString("| key | type | default | values | meaning |\n|---|---|---|---|---|\n")
		for _, k := range s.keys {
			values := k.rng
			if len(k.oneOf) > 0 {
				values = "`" + strings.Join(k.oneOf, "`, `") + "`"
			}
			meaning := strings.TrimSpace(k.meaning + " " + k.more)
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.name, typeText(k.typ), cell(k.def), cell(values), cell(meaning))
		}
	}
	return b.Bytes()
}

// cell is text made safe for a table cell.
func cell(text string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(text)
}
