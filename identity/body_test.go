package identity_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/identity"
)

// TestBodyTokens: every field of a form, multipart or JSON body that a
// common framework reads as a credential field is found; bodies that cannot be
// read as every framework reads them are refused.
func TestBodyTokens(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	mp := func(parts ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(parts); i += 2 {
			b.WriteString("--B\r\nContent-Disposition: " + parts[i] + "\r\n\r\n" + parts[i+1] + "\r\n")
		}
		b.WriteString("--B--\r\n")
		return b.String()
	}
	for _, c := range []struct {
		ctype, body string
		want        []string
		err         error
		why         string
	}{
		{form, "a=1&b=2", nil, nil, "a form without a token"},
		{form, "access_token=K&a=1", []string{"K"}, nil, "RFC 6750 section 2.2"},
		{"Application/X-WWW-Form-Urlencoded; charset=UTF-8", "access.token=K", []string{"K"}, nil, "any case, PHP's '.'"},
		{form, "a=1;access_token[]=K", []string{"K"}, nil, "split at ';', an array"},
		{form, "access_token=K&Access_Token=L", []string{"K", "L"}, nil, "two: RequestCredential refuses them"},
		{form, "access_token=%zz", nil, identity.ErrMalformedKey, "a value that does not decode: no key"},
		{form + "; charset=utf-16", "access_token=K", nil, identity.ErrUnreadableBody, "names could be spelt in other bytes"},
		{"text/plain", "access_token=K", nil, nil, "no framework parses text/plain"},
		{"", "access_token=K", nil, nil, "nor a PUT body without a type (a POST is a form to Rack)"},
		{"application/json", `{"access_token":"K","a":{"access_token":"X"}}`, []string{"K"}, nil, "the top level only"},
		{"application/vnd.api+json", `{"ACCESS_TOKEN":"K"}`, []string{"K"}, nil, "encoding/json matches names ignoring case"},
		{"application/json", `{"\u0061ccess_token":"K"}`, []string{"K"}, nil, "an escaped name"},
		{"application/json", `{"access_token":"K","access_token":"L"}`, []string{"K", "L"}, nil, "duplicates: parsers keep one or the other"},
		{"application/json", `{"access_token":["K"]}`, nil, identity.ErrMalformedKey, "JavaScript reads [\"K\"] as \"K\""},
		{"application/json", `{"access_token":1}`, nil, identity.ErrMalformedKey, "not a string"},
		{"application/json", `[{"access_token":"K"}]`, nil, nil, "not an object"},
		{"application/json", `{"access_token":"K"`, nil, identity.ErrUnreadableBody, "truncated"},
		{"application/json", `{"a":1} {"access_token":"K"}`, nil, identity.ErrUnreadableBody, "two values"},
		{"multipart/form-data; boundary=B", mp(`form-data; name="a"`, "1", `form-data; name="access_token"`, "K"), []string{"K"}, nil, "a multipart field"},
		{"multipart/form-data; boundary=B", mp(`form-data; name="access.token"; filename="t.txt"`, "K"), []string{"K"}, nil, "a file so named counts too"},
		{"multipart/form-data; boundary=B", mp(`form-data; name="file"; filename="access_token"`, "K"), nil, nil, "a file name is not a field name"},
		{"multipart/form-data", mp(`form-data; name="access_token"`, "K"), nil, identity.ErrUnreadableBody, "no boundary"},
		{"multipart/form-data; boundary=B", "--B\r\nContent-Disposition: form-data; name=\"access_token\"\r\n\r\nK", nil, identity.ErrUnreadableBody, "truncated"},
		{"multipart/form-data; boundary=B", "--B\r\nContent-Disposition: form-data; name=\"a\"\r\nContent-Disposition: form-data; name=\"access_token\"\r\n\r\nK\r\n--B--\r\n", nil, identity.ErrUnreadableBody, "two dispositions"},
		// PHP's multipart parser: the first "boundary" in the type, '\\'
		// and '\'' in Content-Disposition read otherwise than Go does.
		{"multipart/form-data; xboundary=A; boundary=B", mp(`form-data; name="x"`, "1"), nil, identity.ErrUnreadableBody, "two boundaries"},
		{"multipart/form-data; boundary=B", mp(`form-data; name="x"; a="\\"; b="; name=access_token; c="`, "K"), nil, identity.ErrUnreadableBody, "a backslash"},
		{"multipart/form-data; boundary=B", mp(`form-data; name='access_token'`, "K"), nil, identity.ErrUnreadableBody, "a single quote"},
		{"multipart/form-data; boundary=B", mp(`form-data; name="x"`, "1") + "--B\r\nContent-Disposition: form-data; name=\"access_token\"\r\n\r\nK\r\n--B--\r\n", nil, identity.ErrUnreadableBody, "a part after the end"},
		{"application/x-www-form-urlencoded", "api_token=K", []string{"K"}, nil, "Laravel's field"},
	} {
		kind, _ := identity.BodyKindOf("PUT", []string{c.ctype})
		got, err := identity.DefaultFields.BodyTokens(kind, c.ctype, []byte(c.body))
		if c.err != nil {
			if !errors.Is(err, c.err) || got != nil {
				t.Errorf("%s: BodyTokens(%q, %q) = %q, %v; want %v", c.why, c.ctype, c.body, got, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "K") {
				t.Errorf("%s: the error holds the value: %v", c.why, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: BodyTokens(%q, %q) = %q, %v; want %q", c.why, c.ctype, c.body, got, err, c.want)
		}
	}
}

// TestParamNames: the names frameworks read a parameter as.
func TestParamNames(t *testing.T) {
	for _, c := range []struct {
		name, want string
		is         bool
		why        string
	}{
		{"access_token", "access_token", true, "itself"},
		{"access.token", "access_token", true, "PHP reads '.' as '_'"},
		{"access token", "access_token", true, "PHP reads ' ' as '_'"},
		{"access[token", "access_token", true, "PHP reads an unclosed '[' as '_'"},
		{"access_token[", "access_token", true, "Rack and qs cut at '['"},
		{"access_token[x]", "access_token", true, "a map under the name"},
		{"[access_token]", "access_token", true, "Rack drops leading brackets"},
		{"access_token\x00junk", "access_token", true, "PHP ends a name at NUL"},
		{"  access_token", "access_token", true, "PHP drops leading spaces"},
		{"ACCESS_TOKEN", "access_token", true, "case"},
		{"user[access_token]", "access_token", false, "nested: read under user"},
		{"access_tokens", "access_token", false, "another name"},
		{"user[email]", "user[email]", true, "a compound name, whole"},
		{"user[email]x", "user[email]", false, "a compound name, whole"},
	} {
		if got := identity.ParamIs(c.name, c.want); got != c.is {
			t.Errorf("%s: ParamIs(%q, %q) = %v, want %v (names %q)", c.why, c.name, c.want, got, c.is, identity.ParamNames(c.name))
		}
	}
}

// TestBodyKindOf: which bodies are read for credentials.
func TestBodyKindOf(t *testing.T) {
	for _, c := range []struct {
		method string
		ctype  []string
		want   identity.BodyKind
		why    string
	}{
		{"POST", nil, identity.BodyForm, "Rack reads a POST without a type as a form"},
		{"POST", []string{" "}, identity.BodyForm, "nor with an empty one"},
		{"PUT", nil, identity.BodyOpaque, "only a POST"},
		{"PUT", []string{"Application/JSON; charset=utf-8"}, identity.BodyJSON, "any case"},
		{"PATCH", []string{"text/json"}, identity.BodyJSON, "any type naming json"},
		{"POST", []string{"multipart/mixed; boundary=x"}, identity.BodyMultipart, "any multipart"},
		{"POST", []string{"image/png"}, identity.BodyOpaque, "an upload"},
	} {
		if got, err := identity.BodyKindOf(c.method, c.ctype); err != nil || got != c.want {
			t.Errorf("%s: BodyKindOf(%s, %q) = %v, %v; want %v", c.why, c.method, c.ctype, got, err, c.want)
		}
	}
	if _, err := identity.BodyKindOf("POST", []string{"application/json", "text/plain"}); !errors.Is(err, identity.ErrUnreadableBody) {
		t.Errorf("two Content-Types: %v, want unreadable", err)
	}
}

// TestCookieTokens: cookies named as a credential field, as PHP's
// $_REQUEST and classic ASP.NET's Request[] read them.
func TestCookieTokens(t *testing.T) {
	for _, c := range []struct {
		cookies []string
		want    []string
		why     string
	}{
		{[]string{"a=1; access_token=K"}, []string{"K"}, "one"},
		{[]string{"a=1", "Access.Token=\"K\""}, []string{"K"}, "HTTP/2's several lines, PHP's '.', quoted"},
		{[]string{"a=1, api_token=K"}, []string{"K"}, "',' splits to ASP.NET"},
		{[]string{"access_token=K%2B1"}, []string{"K%2B1", "K+1"}, "decoded by some: two readings"},
		{[]string{"session=abc"}, nil, "another cookie"},
	} {
		if got := identity.DefaultFields.CookieTokens(http.Header{"Cookie": c.cookies}); !slices.Equal(got, c.want) {
			t.Errorf("%s: CookieTokens(%q) = %q, want %q", c.why, c.cookies, got, c.want)
		}
	}
}
