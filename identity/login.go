package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/collate"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// A Login is a login request as the login guard read it: the account it
// names, and its body re-encoded in the canonical form that is forwarded
// in place of the client's, so the service behind reads the very account
// the guard charged.
type Login struct {
	Account string // as the body spells it
	Body    []byte // canonical
}

// ErrBadLogin is wrapped by every reason [ReadLogin] refuses a login
// request; any other error it returns is the body's reader's.
var ErrBadLogin = errors.New("unreadable login request")

func badLogin(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadLogin, fmt.Sprintf(format, args...))
}

// maxAccountBytes bounds an account name.
const maxAccountBytes = 256

// A LoginRequest is what [ReadLogin] reads of a login request: its
// headers, query, body and the body's declared length (-1 unknown).
type LoginRequest struct {
	Header   http.Header
	RawQuery string
	Body     io.Reader // nil: none
	Length   int64
}

// ReadLogin reads a login request whole and returns the account it
// names in field, or an error wrapping ErrBadLogin for any request whose
// account another parser could read differently:
//
//   - a body over maxBody bytes, or compressed (Content-Encoding);
//   - a content type other than application/json or
//     application/x-www-form-urlencoded, a charset other than UTF-8, or
//     two Content-Type lines;
//   - JSON that is not one object with nothing after it, or not valid
//     UTF-8, or whose account is not a string;
//   - a form with a ';' (a separator to some parsers) or a malformed
//     escape;
//   - an account field given twice, or a field that some parser reads as
//     it (isAccountField): one that equals it but for case (encoding/json
//     matches field names case-insensitively, with Unicode folding:
//     "uſername" is "username" to it), an array form of it ("username[]"),
//     a spelling PHP reads as it (" username", "username\x00x"), or a
//     nested or prefixed form of it ("user[username]", "model.username",
//     or the field in a nested JSON object);
//   - the account field in the query string (which r.FormValue merges
//     into the form), Basic credentials (an account outside the body), or
//     no account at all.
//
// The body returned is the one to forward: JSON re-encoded token by token
// (numbers as written, strings as decoded, so an invalid escape reaches
// the service as the replacement character the guard read), a form
// re-encoded pair by pair, in order.
func ReadLogin(r LoginRequest, field string, maxBody int64) (*Login, error) {
	mt, err := loginHeaders(r.Header, r.RawQuery, field)
	if err != nil {
		return nil, err
	}
	raw, err := readLoginBody(r, field, maxBody)
	if err != nil {
		return nil, err
	}
	var lb *Login
	if mt == "application/json" {
		lb, err = readJSONLogin(raw, field)
	} else {
		lb, err = readFormLogin(raw, field)
	}
	if err != nil {
		return nil, err
	}
	if err := checkAccount(lb.Account); err != nil {
		return nil, err
	}
	return lb, nil
}

// readLoginBody reads a login request's body whole, refusing one over
// maxBody bytes, by its declared length or as read, and a request
// without one, which cannot name the account in field.
func readLoginBody(r LoginRequest, field string, maxBody int64) ([]byte, error) {
	if r.Length > maxBody {
		return nil, badLogin("the body is larger than %d bytes", maxBody)
	}
	if r.Body == nil {
		return nil, badLogin("the body must name the account in %q", field)
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the login body: %w", err)
	}
	if int64(len(raw)) > maxBody {
		return nil, badLogin("the body is larger than %d bytes", maxBody)
	}
	return raw, nil
}

// loginHeaders returns the media type of a login request's body, or
// refuses a request whose headers or query let another parser read
// another account (see ReadLogin).
func loginHeaders(h http.Header, rawQuery, field string) (string, error) {
	if BodyEncoded(h) {
		return "", badLogin("a compressed login body is not accepted")
	}
	if v := h.Get("Authorization"); len(v) >= 6 && strings.EqualFold(v[:6], "basic ") {
		return "", badLogin("the account must be in the body, not in Basic credentials")
	}
	if err := CheckLoginQuery(rawQuery, field); err != nil {
		return "", err
	}
	return loginMediaType(h)
}

// loginMediaTypes are the media types of the login bodies ReadLogin
// reads.
var loginMediaTypes = []string{"application/json", "application/x-www-form-urlencoded"}

// loginMediaType returns the media type of a login request's body: JSON
// or a form, in UTF-8, named by one Content-Type line.
func loginMediaType(h http.Header) (string, error) {
	if len(h.Values("Content-Type")) > 1 {
		return "", badLogin("more than one Content-Type: servers read one or the other")
	}
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return "", badLogin("want Content-Type application/json or application/x-www-form-urlencoded")
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return "", badLogin("the only Content-Type parameter accepted is charset=utf-8")
		}
	}
	if !slices.Contains(loginMediaTypes, mt) {
		return "", badLogin("want Content-Type application/json or application/x-www-form-urlencoded, not %s", mt)
	}
	return mt, nil
}

// CheckLoginQuery refuses a query string that names the account field,
// however it is spelt or escaped: with r.FormValue a service reads the
// account from there when the body has none.
func CheckLoginQuery(raw, field string) error {
	for _, part := range strings.FieldsFunc(raw, isQuerySeparator) {
		k, _, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return badLogin("the query string of a login request has a malformed escape")
		}
		if isAccountField(name, field) {
			return badLogin("the account must be in the body, not in the query string")
		}
	}
	return nil
}

// isAccountField reports whether a field name could be read as the
// account field by some parser: whether some framework reads it as that
// field at the top level (ParamIs: PHP's, Rack's and qs's
// readings of names, Unicode case folding as encoding/json and ASP.NET
// match names), or, for an account field that is a plain name, whether
// any segment of the name between '.', '[' and ']' is it
// ("model.username", which ASP.NET Core binds under a parameter's name;
// "user[username]", which Rails and PHP nest). An account field that is
// itself compound ("user[email]") is compared whole.
func isAccountField(name, field string) bool {
	if ParamIs(name, field) {
		return true
	}
	if strings.ContainsAny(field, "[].") {
		return false
	}
	name, _, _ = strings.Cut(name, "\x00")
	for _, seg := range strings.FieldsFunc(name, func(c rune) bool { return c == '.' || c == '[' || c == ']' }) {
		if ParamIs(seg, field) {
			return true
		}
	}
	return false
}

// readJSONLogin reads a JSON login body: one object, its account field a
// string given once, nothing after it.
func readJSONLogin(raw []byte, field string) (*Login, error) {
	dec, err := openJSONLogin(raw)
	if err != nil {
		return nil, err
	}
	w := &jsonWriter{dec: dec, field: field}
	w.out.WriteByte('{')
	lb := &Login{}
	found := false
	for i := 0; dec.More(); i++ {
		if i > 0 {
			w.out.WriteByte(',')
		}
		acct, isAccount, err := w.topMember(found)
		if err != nil {
			return nil, err
		}
		if isAccount {
			lb.Account, found = acct, true
		}
	}
	if err := closeJSONLogin(dec); err != nil {
		return nil, err
	}
	w.out.WriteByte('}')
	if !found {
		return nil, badLogin("the body must name the account in %q", field)
	}
	lb.Body = w.out.Bytes()
	return lb, nil
}

// openJSONLogin returns a decoder of raw that has read the '{' the body
// must open with, refusing a body that is not valid UTF-8.
func openJSONLogin(raw []byte) (*json.Decoder, error) {
	if !utf8.Valid(raw) {
		return nil, badLogin("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if !nextDelim(dec, '{') {
		return nil, badLogin("the body must be a JSON object")
	}
	return dec, nil
}

// nextDelim reports whether the next token of dec is the delimiter d.
func nextDelim(dec *json.Decoder, d json.Delim) bool {
	tok, err := dec.Token()
	return err == nil && tok == d
}

// closeJSONLogin reads the '}' that ends a login body's object, and
// refuses anything after it.
func closeJSONLogin(dec *json.Decoder) error {
	if !nextDelim(dec, '}') {
		return badLogin("the body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badLogin("the body holds more than one JSON value")
	}
	return nil
}

// accountMember reports whether name, a top-level field of a login body, is
// the account field, which found says was already given; it refuses the
// account field given twice and any other name a parser reads as it.
func accountMember(name, field string, found bool) (bool, error) {
	switch {
	case name == field && found:
		return false, badLogin("the account field %q is given twice", field)
	case name == field:
		return true, nil
	case isAccountField(name, field):
		return false, badLogin("a field other than %q names the account", field)
	}
	return false, nil
}

// A jsonWriter re-encodes the values a decoder reads: no spaces, numbers
// as written, strings as decoded. It refuses an object nested at any
// depth that names the account field (Rails' wrap_parameters reads a
// client's "session" object in place of the top level).
type jsonWriter struct {
	dec   *json.Decoder
	field string // the account field, which no nested object may name
	out   bytes.Buffer
}

// topMember reads and writes one member of a login body's object, and
// returns its value as the account if its name is the account field
// (found: given already).
func (w *jsonWriter) topMember(found bool) (acct string, isAccount bool, err error) {
	tok, err := w.dec.Token()
	if err != nil {
		return "", false, badLogin("the body is not valid JSON")
	}
	k, _ := tok.(string)
	if isAccount, err = accountMember(k, w.field, found); err != nil {
		return "", false, err
	}
	w.str(k)
	w.out.WriteByte(':')
	v, err := w.dec.Token()
	if err != nil {
		return "", false, badLogin("the body is not valid JSON")
	}
	if isAccount {
		var ok bool
		if acct, ok = v.(string); !ok {
			return "", false, badLogin("the account must be a JSON string")
		}
	}
	return acct, isAccount, w.value(v)
}

// value writes the value that starts with tok, reading the rest of it.
// The decoder bounds the nesting.
func (w *jsonWriter) value(tok json.Token) error {
	switch t := tok.(type) {
	case json.Delim:
		return w.container(t)
	case string:
		w.str(t)
	case json.Number:
		w.out.WriteString(string(t))
	case bool:
		w.out.WriteString(strconv.FormatBool(t))
	case nil:
		w.out.WriteString("null")
	}
	return nil
}

// container writes the object or array that open starts, reading its
// members or elements and its end.
func (w *jsonWriter) container(open json.Delim) error {
	end := json.Delim('}')
	if open == '[' {
		end = ']'
	}
	w.out.WriteByte(byte(open))
	for i := 0; w.dec.More(); i++ {
		if i > 0 {
			w.out.WriteByte(',')
		}
		if err := w.element(open == '{'); err != nil {
			return err
		}
	}
	if !nextDelim(w.dec, end) {
		return badLogin("the body is not valid JSON")
	}
	w.out.WriteByte(byte(end))
	return nil
}

// element reads and writes the next element of an array, or the next
// member of an object (member).
func (w *jsonWriter) element(member bool) error {
	tok, err := w.dec.Token()
	if err != nil {
		return badLogin("the body is not valid JSON")
	}
	if member {
		if tok, err = w.nestedKey(tok.(string)); err != nil {
			return err
		}
	}
	return w.value(tok)
}

// nestedKey writes the name of a member of a nested object, refusing the
// account field, and returns the first token of the member's value.
func (w *jsonWriter) nestedKey(name string) (json.Token, error) {
	if isAccountField(name, w.field) {
		return nil, badLogin("the account field %q is nested in the body", w.field)
	}
	w.str(name)
	w.out.WriteByte(':')
	tok, err := w.dec.Token()
	if err != nil {
		return nil, badLogin("the body is not valid JSON")
	}
	return tok, nil
}

// str writes s as a JSON string.
func (w *jsonWriter) str(s string) {
	b, _ := json.Marshal(s) // a string always encodes
	w.out.Write(b)
}

// readFormLogin reads a form login body: pairs separated by '&' only,
// escapes well formed, the account field given once.
func readFormLogin(raw []byte, field string) (*Login, error) {
	if bytes.IndexByte(raw, ';') >= 0 {
		return nil, badLogin("a ';' in a form body is a separator to some parsers; escape it as %%3B")
	}
	lb := &Login{}
	found := false
	var out strings.Builder
	for _, pair := range strings.Split(string(raw), "&") {
		if pair == "" {
			continue
		}
		name, value, err := formPair(pair)
		if err != nil {
			return nil, err
		}
		isAccount, err := accountMember(name, field, found)
		if err != nil {
			return nil, err
		}
		if isAccount {
			lb.Account, found = value, true
		}
		writeFormPair(&out, name, value)
	}
	if !found {
		return nil, badLogin("the body must name the account in %q", field)
	}
	lb.Body = []byte(out.String())
	return lb, nil
}

// formPair returns the name and the value of a pair of a form body,
// unescaped, refusing a malformed escape in either.
func formPair(pair string) (name, value string, err error) {
	k, v, _ := strings.Cut(pair, "=")
	name, err1 := url.QueryUnescape(k)
	value, err2 := url.QueryUnescape(v)
	if err1 != nil || err2 != nil {
		return "", "", badLogin("the form body has a malformed escape")
	}
	return name, value, nil
}

// writeFormPair writes the pair name=value to out, escaped, after the
// pairs out holds and an '&'.
func writeFormPair(out *strings.Builder, name, value string) {
	if out.Len() > 0 {
		out.WriteByte('&')
	}
	out.WriteString(url.QueryEscape(name))
	out.WriteByte('=')
	out.WriteString(url.QueryEscape(value))
}

// checkAccount refuses an account name no service would take: empty,
// too long, not UTF-8, or with control characters.
func checkAccount(acct string) error {
	switch {
	case strings.TrimSpace(acct) == "":
		return badLogin("the account is empty")
	case len(acct) > maxAccountBytes:
		return badLogin("the account is longer than %d bytes", maxAccountBytes)
	case !utf8.ValidString(acct):
		return badLogin("the account is not valid UTF-8")
	}
	if strings.ContainsFunc(acct, unicode.IsControl) {
		return badLogin("the account holds a control character")
	}
	return nil
}

// AccountKey is the form of an account the guard counts failures under:
// its collation key at the primary level of the Unicode Collation
// Algorithm (CLDR root), after NFKC and with surrounding spaces trimmed.
// It ignores case, accents and other diacritics (é, å, ł, ø), width and
// compatibility forms (ａｌｉｃｅ), and ignorable characters (soft hyphen,
// zero-width space), and equates ß with ss and æ with ae: so every
// spelling that a service's lookup may take as one account ("Alice",
// "alice ", "alicé", "ali\u00adce") shares one count, as broad as the
// accent- and case-insensitive collations databases look accounts up
// with by default (MySQL's utf8mb4_0900_ai_ci, SQL Server's CI_AI).
// Accounts that differ only in such ways share a lock; none escapes one.
func AccountKey(acct string) string {
	c := collators.Get().(*collator)
	defer collators.Put(c)
	k := c.c.KeyFromString(&c.buf, norm.NFKC.String(strings.TrimSpace(acct)))
	s := string(k)
	c.buf.Reset()
	return s
}

// A collator computes primary collation keys; it is not safe for
// concurrent use, so AccountKey takes one from a pool.
type collator struct {
	c   *collate.Collator
	buf collate.Buffer
}

var collators = sync.Pool{New: func() any {
	return &collator{c: collate.New(language.Und, collate.IgnoreCase, collate.IgnoreDiacritics, collate.IgnoreWidth)}
}}
