package jwtauth

// The JSON of a token's segments, checked before its signature: one
// object each, no member named twice, no crit, numeric dates.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwt"
)

// checkSegments refuses a token that parsers could read differently, or
// that asks for what Tollgate does not do, before its signature is
// checked: a header or claims set that is not one JSON object, or that
// names a member twice (parsers keep the first or the last); a header
// with crit (RFC 7515 section 4.1.11: a recipient must reject a token
// whose crit names an extension it does not understand, and Tollgate
// understands none); and an exp, nbf or iat that is not a JSON number
// (RFC 7519's NumericDate: some libraries read "1799999999" as a time,
// others refuse it).
func checkSegments(token string) error {
	hdr, rest, _ := strings.Cut(token, ".")
	claims, _, _ := strings.Cut(rest, ".")
	h, err := members(hdr)
	if err != nil {
		return fmt.Errorf("the header: %w", err)
	}
	if _, ok := h["crit"]; ok {
		return errors.New("the header names critical extensions (crit), which are not supported")
	}
	c, err := members(claims)
	if err != nil {
		return fmt.Errorf("the claims: %w", err)
	}
	return checkNumericDates(c)
}

// checkNumericDates refuses claims (as members returns them) whose exp,
// nbf or iat is not a JSON number.
func checkNumericDates(claims map[string]any) error {
	for _, name := range []string{jwt.ExpirationKey, jwt.NotBeforeKey, jwt.IssuedAtKey} {
		if v, ok := claims[name]; ok {
			if _, isNum := v.(json.Number); !isNum {
				return fmt.Errorf("claim %q is not a number", name)
			}
		}
	}
	return nil
}

// members decodes a base64url segment holding one JSON object and
// returns its members, each value a json.Number, a string, a bool, nil,
// or (for an object or array) true; a member named twice is an error.
func members(seg string) (map[string]any, error) {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return nil, errors.New("not base64url")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if !nextDelim(dec, '{') {
		return nil, errors.New("not a JSON object")
	}
	m := map[string]any{}
	for dec.More() {
		if err := readMember(dec, m); err != nil {
			return nil, err
		}
	}
	if !nextDelim(dec, '}') {
		return nil, errors.New("not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return m, nil
}

// nextDelim reports whether the next token of dec is the delimiter d.
func nextDelim(dec *json.Decoder, d json.Delim) bool {
	tok, err := dec.Token()
	return err == nil && tok == d
}

// readMember reads the next member of the object dec is in into m, as
// members describes; a name m holds already is an error.
func readMember(dec *json.Decoder, m map[string]any) error {
	tok, err := dec.Token()
	if err != nil {
		return errors.New("not valid JSON")
	}
	name, _ := tok.(string)
	if _, dup := m[name]; dup {
		return fmt.Errorf("member %q given twice", name)
	}
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return errors.New("not valid JSON")
	}
	v, err := memberValue(raw)
	if err != nil {
		return err
	}
	m[name] = v
	return nil
}

// memberValue returns the value members keeps of a member whose JSON
// is raw: true for an object or an array, else the value decoded, a
// number as a json.Number.
func memberValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 || raw[0] == '{' || raw[0] == '[' {
		return true, nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, errors.New("not valid JSON")
	}
	return v, nil
}
