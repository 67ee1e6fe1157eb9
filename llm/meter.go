package llm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/jsonscan"
)

// Defaults of MeterOptions.
const (
	DefaultMaxJSON  = 64 << 10
	DefaultMaxEvent = 64 << 10
)

// MeterOptions bounds what a Meter holds.
type MeterOptions struct {
	// MaxJSON is the most of a JSON body's usage members (its top
	// object's "usage", or the first keys of Paths) kept to be read at
	// its end, the rest of the body passing unheld; longer members give
	// no usage. 0 means DefaultMaxJSON.
	MaxJSON int
	// MaxEvent is the most data of one server-sent event kept to be
	// read; a longer event is passed over, its lines unheld. 0 means
	// DefaultMaxEvent. The OpenAI responses API's response.completed
	// event carries the whole response, output included, so a route of
	// that API with long outputs wants it larger.
	MaxEvent int
	// Paths, if set, is where the responses report their usage, in place
	// of the OpenAI and Anthropic shapes the Meter reads without it.
	Paths *Paths
}

// Paths names where a response of a shape the Meter does not know
// reports its usage: each a path of object keys from the top of the JSON
// body or event, e.g. usageMetadata, promptTokenCount. A path may be
// nil, and none is a prefix of another. Every report read at them is
// taken as a running count, not final (Usage.Final): it counts once the
// response has been passed on whole.
type Paths struct {
	Input, Output, Total []string
}

// Check returns an error if p's paths cannot be read: none set, an empty
// key, or one path a prefix of another.
func (p *Paths) Check() error {
	all := p.all()
	set := 0
	for i, a := range all {
		if a == nil {
			continue
		}
		set++
		for _, k := range a {
			if k == "" {
				return errors.New("a path holds an empty key")
			}
		}
		for j, b := range all {
			if j != i && b != nil && len(a) <= len(b) && slices.Equal(a, b[:len(a)]) {
				return fmt.Errorf("%s is a prefix of %s", strings.Join(a, "."), strings.Join(b, "."))
			}
		}
	}
	if set == 0 {
		return errors.New("name at least one of input, output and total")
	}
	return nil
}

// firstKeys returns the first key of each path, each once.
func (p *Paths) firstKeys() []string {
	var keys []string
	for _, a := range p.all() {
		if len(a) > 0 && !slices.Contains(keys, a[0]) {
			keys = append(keys, a[0])
		}
	}
	return keys
}

// all returns the paths in the order of their counts.
func (p *Paths) all() [3][]string { return [3][]string{p.Input, p.Output, p.Total} }

// pathCounts are the counts of Paths.all, in order.
var pathCounts = [3]int{cIn, cOut, cTotal}

// Usage is the token usage an upstream reported. Input counts the
// prompt, Anthropic's cache writes and reads included; Output the
// completion; Total is the total the upstream gave, or Input+Output when
// it gave none. Each count is the last the upstream reported for it.
type Usage struct {
	Input, Output, Total int64
	// Final tells that the last report giving a count is one a response
	// gives as it ends (a JSON body's, an OpenAI stream's usage chunk or
	// response.completed, Anthropic's message_delta), not Anthropic's
	// message_start, which gives the output so far.
	Final bool
	// TotalOnly tells that the upstream reported a total and neither
	// input nor output (a usage path of total alone).
	TotalOnly bool
	// Malformed tells that a count was reported as something other than
	// a non-negative integer that fits an int64 (a negative, a fraction,
	// an exponent, a string, a number too large), or that usage was not
	// an object, or that Input or Total overflowed. Such a count is not
	// taken: it stays as reported before, or 0. Usage that is Malformed
	// is impossible usage, not to be trusted as it stands.
	Malformed bool
}

// The ways of a body.
const (
	bodyOther = iota // no usage to read
	bodyJSON         // one JSON object, read at the end
	bodySSE          // server-sent events, read as each ends
)

// Meter reads the usage in a response body written to it. It never
// fails, never blocks and holds at most MaxJSON or MaxEvent bytes and a
// few more. It is not safe for concurrent use.
type Meter struct {
	kind    int
	limit   int     // the most buf may hold
	maxData int     // SSE: the most data an event may have
	buf     []byte  // SSE: the event's data, then the line being read
	pick    *picker // JSON: the usage members of the body so far

	// Server-sent events.
	line     int  // where in buf the unfinished line starts, or -1
	skipLine bool // the rest of the line is passed over
	drop     bool // the event is passed over: its data is too long
	cr       bool // the last byte was a CR, so an LF next ends no line
	bom      int  // bytes of a leading byte order mark read, 3 once past it

	tally tally
	paths *Paths   // where usage is reported (nil: the known shapes)
	keys  [][]byte // SSE: the first keys of paths, quoted
}

// NewMeter returns a Meter for a body of the content type given (a
// Content-Type header's value): application/json or any
// application/*+json, text/event-stream; of any other there is no usage.
func NewMeter(contentType string, o MeterOptions) *Meter {
	m := &Meter{line: -1, paths: o.Paths}
	top := []string{"usage"}
	if o.Paths != nil {
		top = o.Paths.firstKeys()
		for _, k := range top {
			m.keys = append(m.keys, []byte(strconv.Quote(k)))
		}
	}
	if i := strings.IndexByte(contentType, ';'); i >= 0 {
		contentType = contentType[:i]
	}
	ct := strings.ToLower(strings.TrimSpace(contentType))
	switch {
	case ct == "text/event-stream":
		m.kind = bodySSE
		m.maxData = cmpOr(o.MaxEvent, DefaultMaxEvent)
		m.limit = m.maxData + len("data: ")
	case ct == "application/json" || strings.HasPrefix(ct, "application/") && strings.HasSuffix(ct, "+json"):
		m.kind = bodyJSON
		m.limit = cmpOr(o.MaxJSON, DefaultMaxJSON)
		m.pick = newPicker(top, m.limit)
	}
	return m
}

func cmpOr(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}

// Write reads p, the next bytes of the body. It always returns len(p),
// nil.
func (m *Meter) Write(p []byte) (int, error) {
	switch m.kind {
	case bodyJSON:
		m.pick.write(p)
	case bodySSE:
		m.writeSSE(p)
	}
	return len(p), nil
}

// Usage returns the usage reported in the body written so far, and
// whether any was: a usage object, or the one usage report of a
// server-sent event, that gave a count (for a JSON body, only once all
// of it was written). An unfinished event is not read, as the SSE
// specification has it.
func (m *Meter) Usage() (Usage, bool) {
	if m.kind == bodyJSON {
		m.tally = tally{}
		if obj, ok := m.pick.object(); ok {
			m.read(obj)
		}
	}
	return m.tally.usage()
}

// appendBounded appends p to b, growing b to at most limit, which
// len(b)+len(p) must not pass.
func appendBounded(b, p []byte, limit int) []byte {
	return append(grow(b, len(p), limit), p...)
}

// grow makes room in b for n more bytes, growing it to at most limit,
// which len(b)+n must not pass.
func grow(b []byte, n, limit int) []byte {
	if n <= cap(b)-len(b) {
		return b
	}
	nb := make([]byte, len(b), min(max(2*cap(b), len(b)+n, 512), limit))
	copy(nb, b)
	return nb
}

var utf8BOM = [3]byte{0xEF, 0xBB, 0xBF}

func (m *Meter) writeSSE(p []byte) {
	// A byte order mark may start the stream, and is dropped.
	for m.bom < 3 && len(p) > 0 {
		if p[0] != utf8BOM[m.bom] {
			if m.bom > 0 {
				// Part of a mark starts the first line, whose field
				// name is then none that is read.
				m.skipLine = true
			}
			m.bom = 3
			break
		}
		m.bom++
		p = p[1:]
	}
	for len(p) > 0 {
		if m.cr {
			m.cr = false
			if p[0] == '\n' { // the LF of a CRLF
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			i = bytes.IndexByte(p, '\r')
		} else if j := bytes.IndexByte(p[:i], '\r'); j >= 0 {
			i = j
		}
		if i < 0 {
			m.hold(p)
			return
		}
		m.endLine(p[:i])
		m.cr = p[i] == '\r'
		p = p[i+1:]
	}
}

// hold keeps p, the start of a line or more of it, if it may be a data
// line of an event not passed over.
func (m *Meter) hold(p []byte) {
	if m.skipLine {
		return
	}
	if m.line < 0 {
		m.line = len(m.buf)
	}
	if m.drop || !maybeData(m.buf[m.line:], p) {
		m.skipLine = true
		m.buf = m.buf[:m.line]
		m.line = -1
		return
	}
	if len(p) > m.limit-len(m.buf) {
		m.passOver(false)
		return
	}
	m.buf = appendBounded(m.buf, p, m.limit)
}

// maybeData tells whether a line starting with held and then p may be a
// data line: whether it starts with "data:", or with a part of it.
func maybeData(held, p []byte) bool {
	const data = "data:"
	n := len(held)
	if n >= len(data) {
		return true
	}
	k := min(len(data)-n, len(p))
	return string(held) == data[:n] && string(p[:k]) == data[n:n+k]
}

// passOver drops the event being read, whose data is too long, and the
// rest of the line unless it ended.
func (m *Meter) passOver(ended bool) {
	m.drop, m.skipLine = true, !ended
	m.buf, m.line = m.buf[:0], -1
}

// endLine reads a line whose end is rest (all of it when none is held).
func (m *Meter) endLine(rest []byte) {
	if m.skipLine {
		m.skipLine = false
		return
	}
	line := rest
	if m.line >= 0 {
		if len(rest) > m.limit-len(m.buf) {
			m.passOver(true)
			return
		}
		m.buf = appendBounded(m.buf, rest, m.limit)
		line = m.buf[m.line:]
	}
	held := m.line
	m.line = -1
	if len(line) == 0 {
		m.dispatch()
		return
	}
	name, value := line, line[:0]
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	if m.drop || string(name) != "data" {
		if held >= 0 {
			m.buf = m.buf[:held]
		}
		return
	}
	data := len(m.buf)
	if held >= 0 {
		data = held
	}
	if len(value) > m.maxData-data { // data holds an LF for each line; the last is no data
		m.passOver(true)
		return
	}
	if held >= 0 {
		// The line is in buf, after the data so far: its value goes in
		// its place, and fits, being shorter than the line by "data:".
		n := copy(m.buf[held:], value)
		m.buf = append(m.buf[:held+n], '\n')
		return
	}
	m.buf = append(append(grow(m.buf, len(value)+1, m.limit), value...), '\n')
}

// dispatch reads the event that a blank line ended.
func (m *Meter) dispatch() {
	data, drop := m.buf, m.drop
	m.buf, m.drop = m.buf[:0], false
	if drop || len(data) == 0 {
		return
	}
	data = data[:len(data)-1] // the last line's LF
	if m.paths == nil && !mayReport(data) || m.paths != nil && !mayHold(data, m.keys) {
		return
	}
	m.read(data)
}

// read reads the usage b, one JSON text, reports, into the tally.
func (m *Meter) read(b []byte) {
	r := report{paths: m.paths}
	if r.read(b) {
		m.tally.add(&r)
	}
}

// mayHold reports whether an event's data may hold one of keys (each
// quoted), the first keys of paths.
func mayHold(data []byte, keys [][]byte) bool {
	for _, k := range keys {
		if bytes.Contains(data, k) {
			return true
		}
	}
	return false
}

// mayReport reports whether an event's data may report usage: a
// "usage" key whose value is not null. An OpenAI stream's every chunk
// has "usage":null but its last; this keeps them from being parsed.
func mayReport(data []byte) bool {
	key := []byte(`"usage"`)
	for {
		i := bytes.Index(data, key)
		if i < 0 {
			return false
		}
		data = data[i+len(key):]
		j := 0
		for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r' || data[j] == ':') {
			j++
		}
		if !bytes.HasPrefix(data[j:], []byte("null")) {
			return true
		}
	}
}

// The counts a usage object may give.
const (
	cIn = iota
	cCacheWrite
	cCacheRead
	cOut
	cTotal
	nCounts
)

// countOf is the count a usage key gives, or -1.
func countOf(key []byte) int {
	switch string(key) {
	case "input_tokens", "prompt_tokens":
		return cIn
	case "cache_creation_input_tokens":
		return cCacheWrite
	case "cache_read_input_tokens":
		return cCacheRead
	case "output_tokens", "completion_tokens":
		return cOut
	case "total_tokens":
		return cTotal
	}
	return -1
}

// report is what one JSON text (a body, an event's data) reported.
type report struct {
	n         [nCounts]int64
	set       [nCounts]bool
	malformed bool
	// partial says a count came from a "message" (Anthropic's
	// message_start), which a stream reports before its answer: its
	// output so far, not the call's.
	partial, inMessage bool
	paths              *Paths // read at these, if set
}

// read reads the usage objects of the JSON object b: its "usage", and
// the "usage" of its "response" (OpenAI responses API events) and of its
// "message" (Anthropic's message_start). It reports whether b is one
// JSON object.
func (r *report) read(b []byte) bool {
	s := jsonscan.Scanner{B: b}
	if s.Peek() != '{' {
		return false
	}
	s.I++
	ok := false
	if r.paths != nil {
		ok = r.atPaths(&s, r.paths.all(), 0, 0b111)
	} else {
		ok = r.object(&s, true)
	}
	if !ok {
		return false
	}
	s.WS()
	return s.I == len(s.B)
}

// atPaths reads the rest of an object whose '{' was read, at depth
// objects from the top, whose keys on the way matched the first depth
// keys of the paths in mask (a bit for each of paths).
func (r *report) atPaths(s *jsonscan.Scanner, paths [3][]string, depth int, mask uint8) bool {
	var keyBuf [32]byte
	for first := true; ; first = false {
		key, more, err := s.NextKey(first, keyBuf[:])
		if err != nil {
			return false
		}
		if !more {
			return true
		}
		next, end := uint8(0), -1
		for i, p := range paths {
			if mask&(1<<i) != 0 && len(p) > depth && p[depth] == string(key) {
				next |= 1 << i
				if len(p) == depth+1 {
					end = i
				}
			}
		}
		switch {
		case end >= 0: // no path is a prefix of another: it ends alone
			r.partial = true
			if !r.count(s, pathCounts[end], depth+1) {
				return false
			}
		case next != 0 && s.Peek() == '{':
			s.I++
			if !r.atPaths(s, paths, depth+1, next) {
				return false
			}
		default:
			if s.Skip(depth+1) != nil {
				return false
			}
		}
	}
}

// object reads the rest of an object whose '{' was read: a top one, or
// the response or message in a top one.
func (r *report) object(s *jsonscan.Scanner, top bool) bool {
	depth := 2
	if top {
		depth = 1
	}
	var keyBuf [32]byte
	for first := true; ; first = false {
		key, more, err := s.NextKey(first, keyBuf[:])
		if err != nil {
			return false
		}
		if !more {
			return true
		}
		switch {
		case string(key) == "usage":
			if !r.usage(s, depth) {
				return false
			}
		case top && (string(key) == "response" || string(key) == "message") && s.Peek() == '{':
			s.I++
			r.inMessage = string(key) == "message"
			ok := r.object(s, false)
			r.inMessage = false
			if !ok {
				return false
			}
		default:
			if s.Skip(depth) != nil {
				return false
			}
		}
	}
}

// usage reads the value of a usage key inside depth objects.
func (r *report) usage(s *jsonscan.Scanner, depth int) bool {
	switch s.Peek() {
	case 'n':
		return s.Literal() == nil
	case '{':
		s.I++
	default:
		r.malformed = true
		return s.Skip(depth) == nil
	}
	var keyBuf [32]byte
	for first := true; ; first = false {
		key, more, err := s.NextKey(first, keyBuf[:])
		if err != nil {
			return false
		}
		if !more {
			return true
		}
		k := countOf(key)
		if k < 0 {
			if s.Skip(depth+1) != nil {
				return false
			}
			continue
		}
		if !r.count(s, k, depth+1) {
			return false
		}
	}
}

// count reads the value of count k, inside depth arrays and objects: a
// whole number of at least 0, or null (no count); any other is
// malformed.
func (r *report) count(s *jsonscan.Scanner, k, depth int) bool {
	switch c := s.Peek(); {
	case c == 'n':
		return s.Literal() == nil
	case c == '-' || c >= '0' && c <= '9':
		num, err := s.Number()
		if err != nil {
			return false
		}
		if n, ok := jsonscan.Count(num); ok {
			r.n[k], r.set[k] = n, true
			r.partial = r.partial || r.inMessage
		} else {
			r.malformed = true
		}
		return true
	}
	r.malformed = true
	return s.Skip(depth) == nil
}

// tally is the usage reported so far.
type tally struct {
	n         [nCounts]int64
	set       [nCounts]bool
	malformed bool
	seen      bool
	final     bool // the last report that gave a count was not partial
}

func (t *tally) add(r *report) {
	for k := range r.n {
		if r.set[k] {
			t.n[k], t.set[k], t.seen = r.n[k], true, true
			t.final = !r.partial
		}
	}
	if r.malformed {
		t.malformed, t.seen = true, true
	}
}

func (t *tally) usage() (Usage, bool) {
	if !t.seen {
		return Usage{}, false
	}
	u := Usage{Malformed: t.malformed, Output: t.n[cOut], Final: t.final}
	var over bool
	u.Input, over = sum(t.n[cIn], t.n[cCacheWrite], t.n[cCacheRead])
	u.Malformed = u.Malformed || over
	if t.set[cTotal] {
		u.Total = t.n[cTotal]
		u.TotalOnly = !t.set[cIn] && !t.set[cOut] && !t.set[cCacheWrite] && !t.set[cCacheRead]
	} else {
		u.Total, over = sum(u.Input, u.Output)
		u.Malformed = u.Malformed || over
	}
	return u, true
}

// sum adds non-negative counts, stopping at math.MaxInt64, and tells
// whether it had to.
func sum(counts ...int64) (int64, bool) {
	var s int64
	for _, c := range counts {
		if c > math.MaxInt64-s {
			return math.MaxInt64, true
		}
		s += c
	}
	return s, false
}
