package identity_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/identity"
)

// hdr builds a header from alternating names and values; a name may repeat.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestAPIKey(t *testing.T) {
	long := strings.Repeat("k", identity.MaxKeyLength)
	tests := []struct {
		name    string
		h       http.Header
		want    string
		wantOK  bool
		wantErr bool
	}{
		{name: "none", h: hdr()},
		{name: "nil header", h: nil},
		{name: "bearer", h: hdr("Authorization", "Bearer abc.DEF-123_~+/="), want: "abc.DEF-123_~+/=", wantOK: true},
		{name: "bearer lowercase", h: hdr("Authorization", "bearer abc"), want: "abc", wantOK: true},
		{name: "bearer mixed case", h: hdr("authorization", "BeArEr abc"), want: "abc", wantOK: true},
		{name: "bearer extra spaces", h: hdr("Authorization", "  Bearer \t abc  "), want: "abc", wantOK: true},
		{name: "x-api-key", h: hdr("X-API-Key", "key-1"), want: "key-1", wantOK: true},
		{name: "x-api-key lowercase name", h: hdr("x-api-key", "key-1"), want: "key-1", wantOK: true},
		{name: "bearer and x-api-key agree", h: hdr("X-API-Key", "key-2", "Authorization", "Bearer key-2"), want: "key-2", wantOK: true},
		{name: "bearer and x-api-key differ", h: hdr("X-API-Key", "key-1", "Authorization", "Bearer key-2"), wantErr: true},
		{name: "bad x-api-key beside a bearer", h: hdr("X-API-Key", "bad key", "Authorization", "Bearer key-2"), wantErr: true},
		{name: "basic ignored", h: hdr("Authorization", "Basic dXNlcjpwYXNz")},
		{name: "basic falls back", h: hdr("Authorization", "Basic dXNlcjpwYXNz", "X-API-Key", "key-1"), want: "key-1", wantOK: true},
		{name: "scheme prefix is not bearer", h: hdr("Authorization", "Bearerabc")},
		{name: "max length", h: hdr("X-API-Key", long), want: long, wantOK: true},
		{name: "bearer and basic lines", h: hdr("Authorization", "Basic x", "Authorization", "Bearer abc"), wantErr: true},
		{name: "two basic lines", h: hdr("Authorization", "Basic x", "Authorization", "Basic y"), wantErr: true},

		{name: "bearer empty", h: hdr("Authorization", "Bearer "), wantErr: true},
		{name: "bearer alone", h: hdr("Authorization", "Bearer"), wantErr: true},
		{name: "bearer empty no fallback", h: hdr("Authorization", "Bearer", "X-API-Key", "key-1"), wantErr: true},
		{name: "bearer too long", h: hdr("Authorization", "Bearer "+long+"x"), wantErr: true},
		{name: "bearer inner space", h: hdr("Authorization", "Bearer abc def"), wantErr: true},
		{name: "bearer control char", h: hdr("Authorization", "Bearer abc\x01def"), wantErr: true},
		{name: "bearer NUL", h: hdr("Authorization", "Bearer abc\x00"), wantErr: true},
		{name: "bearer DEL", h: hdr("Authorization", "Bearer abc\x7f"), wantErr: true},
		{name: "bearer invalid UTF-8", h: hdr("Authorization", "Bearer abc\xff"), wantErr: true},
		{name: "bearer non-ASCII", h: hdr("Authorization", "Bearer clé"), wantErr: true},
		{name: "two bearers", h: hdr("Authorization", "Bearer a", "Authorization", "Bearer b"), wantErr: true},
		{name: "x-api-key empty", h: hdr("X-API-Key", ""), wantErr: true},
		{name: "x-api-key spaces", h: hdr("X-API-Key", "   "), wantErr: true},
		{name: "x-api-key too long", h: hdr("X-API-Key", long+"x"), wantErr: true},
		{name: "x-api-key newline", h: hdr("X-API-Key", "abc\ndef"), wantErr: true},
		{name: "x-api-key tab", h: hdr("X-API-Key", "abc\tdef"), wantErr: true},
		{name: "x-api-key invalid UTF-8", h: hdr("X-API-Key", "\xc3\x28"), wantErr: true},
		{name: "x-api-key twice", h: hdr("X-API-Key", "a", "X-API-Key", "b"), wantErr: true},
		// Rails' authenticate_with_http_token and Django REST framework's
		// TokenAuthentication read the Token scheme as Bearer.
		{name: "token scheme", h: hdr("Authorization", "Token abc"), want: "abc", wantOK: true},
		{name: "token scheme any case", h: hdr("Authorization", "token  abc "), want: "abc", wantOK: true},
		{name: "token with options (Rails)", h: hdr("Authorization", `Token token="abc", nonce="n1"`), want: "abc", wantOK: true},
		{name: "token= unquoted (Rails)", h: hdr("Authorization", "Token token=abc;nonce=n1"), want: "abc", wantOK: true},
		{name: "token and x-api-key differ", h: hdr("Authorization", "Token abc", "X-API-Key", "def"), wantErr: true},
		{name: "token empty", h: hdr("Authorization", "Token "), wantErr: true},
		{name: "token= empty", h: hdr("Authorization", `Token token=""`), wantErr: true},
		{name: "another scheme", h: hdr("Authorization", "Tokens abc")},
		// Laravel reads the last "Bearer " anywhere in the header.
		{name: "bearer past another scheme", h: hdr("Authorization", "Basic Zm9v, Bearer abc"), wantErr: true},
		{name: "bearer glued to a scheme", h: hdr("Authorization", "xBearer abc"), wantErr: true},
		{name: "bearer in a token", h: hdr("Authorization", `Token token="abc", Bearer def`), wantErr: true},
		{name: "the letters inside a token", h: hdr("Authorization", "Bearer abcBEARERdef"), want: "abcBEARERdef", wantOK: true},
		{name: "the letters inside a Basic credential", h: hdr("Authorization", "Basic bEaReR0x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, ok, err := identity.APIKey(tt.h)
			if tt.wantErr {
				if !errors.Is(err, identity.ErrMalformedKey) {
					t.Fatalf("APIKey err = %v, want ErrMalformedKey", err)
				}
				if key != "" || ok {
					t.Fatalf("APIKey = %q, %v on error", key, ok)
				}
				return
			}
			if err != nil || key != tt.want || ok != tt.wantOK {
				t.Fatalf("APIKey = %q, %v, %v; want %q, %v, nil", key, ok, err, tt.want, tt.wantOK)
			}
		})
	}
}

// TestAPIKeyErrorHidesKey checks that a rejected key, which may still be a
// real credential, does not leak into the error message.
func TestAPIKeyErrorHidesKey(t *testing.T) {
	secret := "sk_live_0123456789abcdef"
	for _, h := range []http.Header{
		hdr("Authorization", "Bearer "+secret+" "+secret),
		hdr("Authorization", "Bearer "+secret+"\x01"),
		hdr("X-API-Key", secret+strings.Repeat("x", identity.MaxKeyLength)),
		hdr("X-API-Key", secret, "X-API-Key", secret),
	} {
		_, _, err := identity.APIKey(h)
		if err == nil {
			t.Fatalf("APIKey(%v) accepted", h)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains the key", err)
		}
	}
}

func TestUserID(t *testing.T) {
	const name = "X-Auth-User"
	tests := []struct {
		name    string
		h       http.Header
		want    string
		wantOK  bool
		wantErr bool
	}{
		{name: "absent", h: hdr("X-Other", "x")},
		{name: "nil header", h: nil},
		{name: "plain", h: hdr(name, "alice@example.com"), want: "alice@example.com", wantOK: true},
		{name: "name case", h: hdr("x-auth-user", "alice"), want: "alice", wantOK: true},
		{name: "unicode and spaces", h: hdr(name, "Zoë O'Brien 日本"), want: "Zoë O'Brien 日本", wantOK: true},
		{name: "max length", h: hdr(name, strings.Repeat("u", 256)), want: strings.Repeat("u", 256), wantOK: true},

		{name: "empty", h: hdr(name, ""), wantErr: true},
		{name: "too long", h: hdr(name, strings.Repeat("u", 257)), wantErr: true},
		{name: "too long multibyte", h: hdr(name, strings.Repeat("é", 129)), wantErr: true},
		{name: "control", h: hdr(name, "alice\x00"), wantErr: true},
		{name: "newline", h: hdr(name, "alice\r\nX-Admin: 1"), wantErr: true},
		{name: "DEL", h: hdr(name, "alice\x7f"), wantErr: true},
		{name: "C1 control", h: hdr(name, "alice\u0085"), wantErr: true},
		{name: "invalid UTF-8", h: hdr(name, "alice\xff"), wantErr: true},
		{name: "truncated UTF-8", h: hdr(name, "alic\xc3"), wantErr: true},
		{name: "twice", h: hdr(name, "alice", name, "bob"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok, err := identity.UserID(tt.h, name)
			if tt.wantErr {
				if !errors.Is(err, identity.ErrMalformedUser) {
					t.Fatalf("UserID err = %v, want ErrMalformedUser", err)
				}
				if id != "" || ok {
					t.Fatalf("UserID = %q, %v on error", id, ok)
				}
				return
			}
			if err != nil || id != tt.want || ok != tt.wantOK {
				t.Fatalf("UserID = %q, %v, %v; want %q, %v, nil", id, ok, err, tt.want, tt.wantOK)
			}
		})
	}
}

func TestHasher(t *testing.T) {
	h := identity.NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	inputs := []struct{ kind, value string }{
		{"k", "sk_live_0123456789abcdef"},
		{"u", "alice@example.com"},
		{"ip", "203.0.113.7"},
		{"ip", "2001:db8:1:2::/64"},
		{"k", ""},
		{"u", strings.Repeat("long-user-name", 100)},
	}
	seen := map[string]string{}
	for _, in := range inputs {
		got := h.Hash(in.kind, in.value)
		if again := h.Hash(in.kind, in.value); again != got {
			t.Errorf("Hash(%q, %q) unstable: %q then %q", in.kind, in.value, got, again)
		}
		if !strings.HasPrefix(got, in.kind+"_") || len(got) != len(in.kind)+1+22 {
			t.Errorf("Hash(%q, %q) = %q: want %q + 22 characters", in.kind, in.value, got, in.kind+"_")
		}
		for _, c := range got[len(in.kind)+1:] {
			if !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", c) {
				t.Errorf("Hash(%q, %q) = %q: %q is not base64url", in.kind, in.value, got, c)
			}
		}
		if in.value != "" && strings.Contains(got, in.value) {
			t.Errorf("Hash(%q, %q) = %q contains the input", in.kind, in.value, got)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("Hash collision between %s and %q", prev, in.value)
		}
		seen[got] = in.kind + ":" + in.value
	}

	// The kind is part of the MAC, not only of the prefix.
	a, b := h.Hash("u", "203.0.113.7"), h.Hash("ip", "203.0.113.7")
	if a[len("u_"):] == b[len("ip_"):] {
		t.Errorf("kinds u and ip give the same MAC %q", a[len("u_"):])
	}
	// The separator keeps kind and value apart.
	if h.Hash("k", "ab")[2:] == h.Hash("ka", "b")[3:] {
		t.Error("Hash(k, ab) and Hash(ka, b) share a MAC")
	}
	// A different secret gives a different pseudonym; the same secret the same.
	if other := identity.NewHasher([]byte("another secret")); other.Hash("k", "x") == h.Hash("k", "x") {
		t.Error("different secrets give the same pseudonym")
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	same := identity.NewHasher(secret)
	secret[0] = 'X' // NewHasher must have copied it
	if same.Hash("k", "x") != h.Hash("k", "x") {
		t.Error("equal secrets give different pseudonyms, or NewHasher kept the caller's slice")
	}
	// An empty secret works (for tests).
	if got := identity.NewHasher(nil).Hash("ip", "203.0.113.7"); len(got) != len("ip_")+22 {
		t.Errorf("empty-secret Hash = %q", got)
	}
}

// TestHasherKnownAnswer pins the construction, so pseudonyms in existing
// stores stay valid: HMAC-SHA256(secret, kind NUL value), 16 bytes,
// base64url.
func TestHasherKnownAnswer(t *testing.T) {
	// Computed independently, minus the "==" padding:
	//   printf 'k\0abc' | openssl dgst -sha256 -hmac secret -binary | head -c 16 | basenc --base64url
	h := identity.NewHasher([]byte("secret"))
	if got, want := h.Hash("k", "abc"), "k_LAdlsHEGKRUTIAvc2nPGhg"; got != want {
		t.Errorf("Hash(k, abc) = %q, want %q", got, want)
	}
}

func TestHasherConcurrent(t *testing.T) {
	h := identity.NewHasher([]byte("secret"))
	want := h.Hash("u", "alice")
	done := make(chan string)
	for range 8 {
		go func() {
			var got string
			for range 200 {
				got = h.Hash("u", "alice")
				if got != want {
					break
				}
			}
			done <- got
		}()
	}
	for range 8 {
		if got := <-done; got != want {
			t.Errorf("concurrent Hash = %q, want %q", got, want)
		}
	}
}

func TestKeyDigest(t *testing.T) {
	tests := []struct{ key, want string }{
		{"", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	}
	for _, tt := range tests {
		if got := identity.KeyDigest(tt.key); got != tt.want {
			t.Errorf("KeyDigest(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	key := "sk_live_0123456789abcdef"
	got := identity.KeyDigest(key)
	sum := sha256.Sum256([]byte(key))
	if got != "sha256:"+hex.EncodeToString(sum[:]) || strings.Contains(got, key) {
		t.Errorf("KeyDigest(%q) = %q", key, got)
	}
}

// TestCredential: under a policy that verifies JWTs, a bearer JWT may be
// up to MaxTokenLength long and is told apart from an API key; anything
// else is read as APIKey reads it, and two differing credentials stay
// malformed.
func TestCredential(t *testing.T) {
	jwt := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0." + strings.Repeat("s", 2000)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		name      string
		h         http.Header
		jwt       bool
		isJWT, ok bool
		malformed bool
	}{
		{"a long JWT", h("Authorization", "Bearer "+jwt), true, true, true, false},
		{"a long JWT without JWT verification", h("Authorization", "Bearer "+jwt), false, false, false, true},
		{"an unsigned JWT is a JWT", h("Authorization", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0."), true, true, true, false},
		{"an API key", h("X-API-Key", "free-demo-key"), true, false, true, false},
		{"a dotted API key", h("X-API-Key", "abc.def.ghi"), true, false, true, false},
		{"a long API key", h("X-API-Key", strings.Repeat("k", 300)), true, false, false, true},
		{"a JWT and a key that differ", h("Authorization", "Bearer "+jwt, "X-API-Key", "free-demo-key"), true, false, false, true},
		{"the same JWT twice", h("Authorization", "Bearer "+jwt, "X-API-Key", jwt), true, true, true, false},
		{"a JWT too long", h("Authorization", "Bearer "+jwt+strings.Repeat("s", identity.MaxTokenLength)), true, false, false, true},
	} {
		cred, isJWT, ok, err := identity.Credential(c.h, c.jwt)
		if isJWT != c.isJWT || ok != c.ok || (err != nil) != c.malformed || (err != nil && !errors.Is(err, identity.ErrMalformedKey)) {
			t.Errorf("%s: isJWT %v ok %v err %v", c.name, isJWT, ok, err)
		}
		if ok && cred == "" {
			t.Errorf("%s: no credential", c.name)
		}
	}
}

func TestRequestCredential(t *testing.T) {
	const key = "k-123"
	for _, c := range []struct {
		name     string
		header   http.Header
		query    string
		body     []string
		want     string // "" with !malformed: no credential
		malformd bool
	}{
		{name: "none", query: "a=1&b=2"},
		{name: "header only", header: http.Header{"X-Api-Key": {key}}, query: "a=1", want: key},
		{name: "query only", query: "access_token=" + key, want: key},
		{name: "query name in any case", query: "ACCESS_TOKEN=" + key, want: key},
		{name: "query name escaped", query: "%61ccess%5Ftoken=" + key, want: key},
		{name: "after a semicolon", query: "a=1;access_token=" + key, want: key},
		{name: "same in both", header: http.Header{"Authorization": {"Bearer " + key}}, query: "access_token=" + key, want: key},
		{name: "differ", header: http.Header{"X-Api-Key": {"other"}}, query: "access_token=" + key, malformd: true},
		{name: "twice", query: "access_token=" + key + "&access_token=" + key, malformd: true},
		{name: "twice in two cases", query: "access_token=a&Access_Token=b", malformd: true},
		{name: "empty", query: "access_token=", malformd: true},
		{name: "no value", query: "access_token", malformd: true},
		{name: "spaces", query: "access_token=%20" + key, malformd: true},
		{name: "bad escape", query: "access_token=%zz", malformd: true},
		{name: "too long", query: "access_token=" + strings.Repeat("a", identity.MaxKeyLength+1), malformd: true},
		{name: "another name", query: "access_tokens=" + key + "&my_access_token=" + key + "&user[access_token]=" + key},
		// Other frameworks' fields, and classic ASP.NET's %u escapes.
		{name: "Laravel's api_token", query: "api_token=" + key, want: key},
		{name: "Doorkeeper's bearer_token", query: "bearer_token=" + key, want: key},
		{name: "ASP.NET %u in the name", query: "%u0061ccess_token=" + key, want: key},
		{name: "ASP.NET %u in the value", query: "access_token=%u006b-123", malformd: true},
		{name: "two fields", query: "access_token=" + key + "&api_token=" + key, malformd: true},
		// PHP's, Rack's and qs's readings of the name.
		{name: "PHP reads . as _", query: "access.token=" + key, want: key},
		{name: "PHP reads a space as _", query: "access+token=" + key, want: key},
		{name: "PHP reads %20 as _", query: "access%20token=" + key, want: key},
		{name: "PHP reads an unclosed [ as _", query: "access[token=" + key, want: key},
		{name: "PHP drops leading spaces", query: "+access_token=" + key, want: key},
		{name: "PHP ends the name at NUL", query: "access_token%00x=" + key, want: key},
		{name: "an array (PHP, Rack, qs)", query: "access_token[]=" + key, want: key},
		{name: "an indexed array", query: "access_token[0]=" + key, want: key},
		{name: "Rack's leading bracket", query: "[access_token]=" + key, want: key},
		{name: "Unicode case folding", query: "acceſſ_token=" + key, want: key},
		{name: "two spellings", query: "access_token=" + key + "&access.token=" + key, malformd: true},
		{name: "an array of two", query: "access_token[]=a&access_token[]=b", malformd: true},
		// Tokens from the body (BodyTokens) count beside the query's.
		{name: "body only", body: []string{key}, want: key},
		{name: "body and header alike", header: http.Header{"X-Api-Key": {key}}, body: []string{key}, want: key},
		{name: "body and header differ", header: http.Header{"X-Api-Key": {key}}, body: []string{"other"}, malformd: true},
		{name: "body and query", query: "access_token=" + key, body: []string{key}, malformd: true},
		{name: "empty in the body", body: []string{""}, malformd: true},
	} {
		tokens, err := identity.DefaultFields.QueryTokens(c.query)
		got, ok := "", false
		if err == nil {
			got, _, ok, err = identity.RequestCredential(c.header, append(tokens, c.body...), false)
		}
		switch {
		case c.malformd:
			if err == nil || !errors.Is(err, identity.ErrMalformedKey) || ok || got != "" {
				t.Errorf("%s: %q, %v, %v; want malformed", c.name, got, ok, err)
			}
			if err != nil && strings.Contains(err.Error(), key) {
				t.Errorf("%s: the error holds the key: %v", c.name, err)
			}
		case err != nil || ok != (c.want != "") || got != c.want:
			t.Errorf("%s: %q, %v, %v; want %q", c.name, got, ok, err, c.want)
		}
	}
}

func TestBasicParts(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, c := range []struct {
		auth []string
		want []string
	}{
		{nil, nil},
		{[]string{"Bearer k"}, nil},
		{[]string{"Basic " + b64("sk_live_1:")}, []string{"sk_live_1"}},
		{[]string{"basic  " + b64("api:key-2") + " "}, []string{"api", "key-2"}},
		{[]string{"BASIC " + strings.TrimRight(b64("u:p"), "=")}, []string{"u", "p"}},
		{[]string{"Basic " + b64("a b:c\x01")}, nil},
		{[]string{"Basic " + b64(":"+strings.Repeat("k", identity.MaxKeyLength+1))}, nil},
		{[]string{"Basic !!!"}, nil},
		{[]string{"Basicx " + b64("u:p")}, nil},
		{[]string{"Basic " + b64("u:p"), "Basic " + b64("v:q")}, nil},
	} {
		h := http.Header{}
		for _, a := range c.auth {
			h.Add("Authorization", a)
		}
		if got := identity.BasicParts(h); !slices.Equal(got, c.want) {
			t.Errorf("BasicParts(%q) = %q, want %q", c.auth, got, c.want)
		}
	}
}
