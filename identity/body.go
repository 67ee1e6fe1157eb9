package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strings"
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

// BodyKindOf returns what family the Content-Type values ctype name, as
// broadly as the frameworks that parse bodies match them (case
// ignored, parameters and spaces around the type aside). An error
// (wrapping ErrUnreadableBody) is a Content-Type given twice where either
// names a parsed family: servers read one or the other.
func BodyKindOf(ctype []string) (BodyKind, error) {
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

// BodyTokens returns the values of the fields of a request body that a
// common framework reads as the [QueryToken] credential: in a form, each
// pair whose name [ParamIs] access_token (split at '&' and ';'); in
// multipart/form-data, each part so named, file or not; in JSON, each
// member of the top-level object so named (passport's req.body,
// Laravel's input(), Rails' params read no deeper). ctype is the
// request's one Content-Type.
//
// A JSON member so named whose value is not a string is a credential
// no key could be: the error wraps ErrMalformedKey. A body that does not
// parse as its type says, or whose charset is not ASCII-compatible (so
// that the names could be spelt in other bytes), wraps
// ErrUnreadableBody. Errors never hold a value.
func BodyTokens(ctype string, body []byte) ([]string, error) {
	kind := kindOf(ctype)
	if kind == BodyOpaque || len(body) == 0 {
		return nil, nil
	}
	_, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w: its Content-Type does not parse", ErrUnreadableBody)
	}
	switch cs := strings.ToLower(params["charset"]); cs {
	case "", "utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin1":
	default:
		return nil, fmt.Errorf("reading the body: %w: charset %q: only UTF-8 and ASCII-compatible bodies are read", ErrUnreadableBody, cs)
	}
	switch kind {
	case BodyForm:
		return formTokens(string(body))
	case BodyMultipart:
		return multipartTokens(params["boundary"], body)
	}
	return jsonTokens(body)
}

// formTokens reads a form as a query is read: see queryTokens.
func formTokens(form string) ([]string, error) {
	tokens, err := queryTokens(form)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w: a form pair does not decode", ErrUnreadableBody)
	}
	return tokens, nil
}

// queryTokens returns the values of the pairs of a query or form whose
// name some framework reads as QueryToken, split wherever a server
// could split them ('&' or ';'). A name that does not decode is not
// access_token to a lenient decoder either (it keeps the bad escape); a
// value that does not decode is an error.
func queryTokens(raw string) ([]string, error) {
	var tokens []string
	for pair := range strings.FieldsFuncSeq(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		name, value, _ := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); err != nil || !ParamIs(n, QueryToken) {
			continue
		}
		v, err := url.QueryUnescape(value)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, v)
	}
	return tokens, nil
}

// maxParts bounds the parts of a multipart body read.
const maxParts = 1000

// multipartTokens reads the parts of a multipart body named as the
// credential.
func multipartTokens(boundary string, body []byte) ([]string, error) {
	if boundary == "" {
		return nil, fmt.Errorf("reading the body: %w: multipart without a boundary", ErrUnreadableBody)
	}
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	var tokens []string
	for i := 0; ; i++ {
		p, err := r.NextRawPart()
		switch {
		case err == io.EOF:
			return tokens, nil
		case err != nil:
			return nil, fmt.Errorf("reading the body: %w: a multipart part does not parse", ErrUnreadableBody)
		case i >= maxParts:
			return nil, fmt.Errorf("reading the body: %w: more than %d parts", ErrUnreadableBody, maxParts)
		}
		if len(p.Header.Values("Content-Disposition")) > 1 {
			return nil, fmt.Errorf("reading the body: %w: a part with two Content-Disposition headers", ErrUnreadableBody)
		}
		_, dp, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if err != nil && p.Header.Get("Content-Disposition") != "" {
			return nil, fmt.Errorf("reading the body: %w: a part's Content-Disposition does not parse", ErrUnreadableBody)
		}
		if !ParamIs(dp["name"], QueryToken) {
			continue
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return nil, fmt.Errorf("reading the body: %w: a multipart part does not parse", ErrUnreadableBody)
		}
		tokens = append(tokens, string(v))
	}
}

// jsonTokens reads the members of a JSON body's top-level object named
// as the credential; a body that is not one JSON value is unreadable,
// one that is not an object holds none.
func jsonTokens(body []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v any
	// Decode twice: once to learn it is a single valid value, once for
	// the members in order (a map would keep one of two duplicates).
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("reading the body: %w: not valid JSON", ErrUnreadableBody)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("reading the body: %w: more than one JSON value", ErrUnreadableBody)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, nil
	}
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.Token() // '{'
	var tokens []string
	for dec.More() {
		t, _ := dec.Token()
		name, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("reading the body: %w: not valid JSON", ErrUnreadableBody)
		}
		if !ParamIs(name, QueryToken) {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("reading the body: %w: the %s member is not a string", ErrMalformedKey, QueryToken)
		}
		tokens = append(tokens, s)
	}
	return tokens, nil
}
