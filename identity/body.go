package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/jsonscan"
)

// ErrUnreadableBody is returned, wrapped, by [BodyTokens] for a body
// whose fields cannot be read as every framework would read them.
var ErrUnreadableBody = errors.New("unreadable request body")

// A BodyKind is a family of request bodies that frameworks parse into
// parameters, which may then hold a credential.
type BodyKind int

const (
	// BodyOpaque is a body no framework reads parameters from (or none).
	BodyOpaque BodyKind = iota
	// BodyForm is application/x-www-form-urlencoded (RFC 6750 section
	// 2.2: PHP's $_POST, Go's r.FormValue, Rails, Express).
	BodyForm
	// BodyMultipart is multipart/form-data (PHP, Go, Rails, multer).
	BodyMultipart
	// BodyJSON is any media type naming JSON (application/json,
	// application/vnd.api+json: Rails, Express, Laravel's input()).
	BodyJSON
)

// BodyKindOf returns what family a request's body is, by its method and
// its Content-Type values ctype, as broadly as the frameworks that parse
// bodies match them (case ignored, parameters and spaces around the type
// aside): a POST with no Content-Type, or an empty one, is a form to Rack.
// An error (wrapping ErrUnreadableBody) is a Content-Type given twice
// where either names a parsed family: servers read one or the other.
func BodyKindOf(method string, ctype []string) (BodyKind, error) {
	if method == http.MethodPost && noContentType(ctype) {
		return BodyForm, nil
	}
	kind := BodyOpaque
	for _, v := range ctype {
		k := kindOf(v)
		if k != BodyOpaque && len(ctype) > 1 {
			return 0, fmt.Errorf("reading the body: %w: more than one Content-Type", ErrUnreadableBody)
		}
		kind = max(kind, k)
	}
	return kind, nil
}

// noContentType reports whether the Content-Type values ctype name no
// type: there are none, or one that is empty.
func noContentType(ctype []string) bool {
	return len(ctype) == 0 || len(ctype) == 1 && strings.TrimSpace(ctype[0]) == ""
}

// BodyEncoded reports whether a request's headers h give its body a
// content coding (Content-Encoding) other than identity: any
// Content-Encoding but one line naming identity alone, in any case.
func BodyEncoded(h http.Header) bool {
	ce := h.Values("Content-Encoding")
	return len(ce) > 0 && !(len(ce) == 1 && strings.EqualFold(strings.TrimSpace(ce[0]), "identity"))
}

func kindOf(ctype string) BodyKind {
	t, _, _ := strings.Cut(ctype, ";")
	t = strings.ToLower(strings.TrimSpace(t))
	switch {
	case strings.Contains(t, "x-www-form-urlencoded"):
		return BodyForm
	case strings.HasPrefix(t, "multipart/"):
		return BodyMultipart
	case strings.Contains(t, "json"):
		return BodyJSON
	}
	return BodyOpaque
}

// BodyTokens returns the values of the fields of a body of the given
// kind (BodyKindOf) that name one of f: in a form, each pair so named
// (split at '&' and ';'); in multipart/form-data, each part so named,
// file or not; in JSON, each member of the top-level object so named
// (passport's req.body, Laravel's input(), Rails' params read no deeper).
// ctype is the request's one Content-Type ("" for a form without one).
//
// A JSON member so named whose value is not a string is a credential no
// key could be, and so is a form value that does not decode alike
// everywhere: the error wraps ErrMalformedKey. A body that does not parse
// as its type says, whose charset is not ASCII-compatible (so that the
// names could be spelt in other bytes), or that parsers of multipart
// bodies could split differently (a second "boundary" in the type, a
// backslash or a single quote in a part's Content-Disposition, a
// delimiter outside the parts) wraps ErrUnreadableBody. Errors never hold
// a value.
func (f Fields) BodyTokens(kind BodyKind, ctype string, body []byte) ([]string, error) {
	if kind == BodyOpaque || len(body) == 0 {
		return nil, nil
	}
	if kind == BodyForm && strings.TrimSpace(ctype) == "" {
		return f.QueryTokens(string(body))
	}
	params, err := bodyParams(ctype)
	if err != nil {
		return nil, err
	}
	switch kind {
	case BodyForm:
		return f.QueryTokens(string(body))
	case BodyMultipart:
		boundary, err := multipartBoundary(ctype, params)
		if err != nil {
			return nil, err
		}
		return f.multipartTokens(boundary, body)
	}
	return f.jsonTokens(body)
}

// bodyParams returns the parameters of a body's Content-Type ctype,
// refusing one that does not parse or whose charset is not
// ASCII-compatible.
func bodyParams(ctype string) (map[string]string, error) {
	_, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w: its Content-Type does not parse", ErrUnreadableBody)
	}
	switch cs := strings.ToLower(params["charset"]); cs {
	case "", "utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin1":
		return params, nil
	default:
		return nil, fmt.Errorf("reading the body: %w: charset %q: only UTF-8 and ASCII-compatible bodies are read", ErrUnreadableBody, cs)
	}
}

// maxParts bounds the parts of a multipart body read.
const maxParts = 1000

// multipartTokens reads the parts of a multipart body named as a
// credential field.
func (f Fields) multipartTokens(boundary string, body []byte) ([]string, error) {
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	var tokens []string
	for i := 0; ; i++ {
		p, err := r.NextRawPart()
		switch {
		case err == io.EOF:
			// Every delimiter is one Go read: none before, between or
			// after the parts that another parser could start a part at.
			if strings.Count(string(body), "--"+boundary) != i+1 {
				return nil, fmt.Errorf("reading the body: %w: a multipart delimiter outside the parts", ErrUnreadableBody)
			}
			return tokens, nil
		case err != nil:
			return nil, fmt.Errorf("reading the body: %w: a multipart part does not parse", ErrUnreadableBody)
		case i >= maxParts:
			return nil, fmt.Errorf("reading the body: %w: more than %d parts", ErrUnreadableBody, maxParts)
		}
		token, ok, err := f.partToken(p)
		if err != nil {
			return nil, err
		}
		if ok {
			tokens = append(tokens, token)
		}
	}
}

// multipartBoundary returns the boundary of a multipart body, from its
// Content-Type ctype and that type's params, refusing none, or
// "boundary" twice (PHP takes the first).
func multipartBoundary(ctype string, params map[string]string) (string, error) {
	if strings.Count(strings.ToLower(ctype), "boundary") > 1 {
		return "", fmt.Errorf("reading the body: %w: \"boundary\" twice in its Content-Type (PHP takes the first)", ErrUnreadableBody)
	}
	if params["boundary"] == "" {
		return "", fmt.Errorf("reading the body: %w: multipart without a boundary", ErrUnreadableBody)
	}
	return params["boundary"], nil
}

// partToken returns the content of a multipart part p, and whether its
// name is one of f.
func (f Fields) partToken(p *multipart.Part) (string, bool, error) {
	name, err := partName(p.Header)
	if err != nil || !f.isName(name) {
		return "", false, err
	}
	v, err := io.ReadAll(p)
	if err != nil {
		return "", false, fmt.Errorf("reading the body: %w: a multipart part does not parse", ErrUnreadableBody)
	}
	return string(v), true, nil
}

// partName returns the name in a multipart part's header h (its
// Content-Disposition's name parameter, "" for none), refusing a
// disposition that parsers could read differently: given twice, with a
// backslash or a single quote, or not parsing.
func partName(h textproto.MIMEHeader) (string, error) {
	cd := h.Values("Content-Disposition")
	switch {
	case len(cd) > 1:
		return "", fmt.Errorf("reading the body: %w: a part with two Content-Disposition headers", ErrUnreadableBody)
	case len(cd) == 1 && strings.ContainsAny(cd[0], `\'`):
		return "", fmt.Errorf("reading the body: %w: a backslash or a single quote in a part's Content-Disposition (PHP reads them otherwise)", ErrUnreadableBody)
	}
	_, dp, err := mime.ParseMediaType(h.Get("Content-Disposition"))
	if err != nil && h.Get("Content-Disposition") != "" {
		return "", fmt.Errorf("reading the body: %w: a part's Content-Disposition does not parse", ErrUnreadableBody)
	}
	return dp["name"], nil
}

// jsonTokens reads the members of a JSON body's top-level object named
// as a credential field; a body that is not one JSON value (as
// encoding/json has it) is unreadable, one that is not an object holds
// none. It reads the body once, in place: only the names and the
// credentials are copied.
func (f Fields) jsonTokens(body []byte) ([]string, error) {
	s := jsonscan.Scanner{B: body}
	if s.Peek() != '{' {
		if s.Skip(0) != nil {
			return nil, errNotJSON
		}
		return nil, f.jsonEnd(&s)
	}
	s.I++
	var tokens []string
	malformed := false
	var buf [64]byte
	for first := true; ; first = false {
		name, more, err := s.NextKey(first, buf[:])
		if err != nil {
			return nil, errNotJSON
		}
		if !more {
			break
		}
		if !f.isName(string(name)) {
			if s.Skip(1) != nil {
				return nil, errNotJSON
			}
			continue
		}
		if s.Peek() == 'n' && s.Literal() == nil {
			tokens = append(tokens, "") // null: encoding/json's empty string
			continue
		}
		if s.Peek() != '"' {
			// Not a string: no key, once the body is known to be JSON.
			malformed = true
			if s.Skip(1) != nil {
				return nil, errNotJSON
			}
			continue
		}
		raw, esc, err := s.Str()
		if err != nil {
			return nil, errNotJSON
		}
		if esc || !utf8.Valid(raw) {
			raw = jsonscan.Unescape(nil, raw)
		}
		tokens = append(tokens, string(raw))
	}
	if err := f.jsonEnd(&s); err != nil {
		return nil, err
	}
	if malformed {
		return nil, fmt.Errorf("reading the body: %w: a credential member that is not a string", ErrMalformedKey)
	}
	return tokens, nil
}

// errNotJSON is jsonTokens' error for a body that is not JSON.
var errNotJSON = fmt.Errorf("reading the body: %w: not valid JSON", ErrUnreadableBody)

// jsonEnd returns an error unless s is at the end of its text, but for
// whitespace.
func (Fields) jsonEnd(s *jsonscan.Scanner) error {
	if s.WS(); s.I != len(s.B) {
		return fmt.Errorf("reading the body: %w: more than one JSON value", ErrUnreadableBody)
	}
	return nil
}

// isName reports whether a decoded name (a multipart part's, a JSON
// member's) is one of f.
func (f Fields) isName(name string) bool {
	return slices.ContainsFunc(f, func(want string) bool { return ParamIs(name, want) })
}
