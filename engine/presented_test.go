package engine_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

const presentedPolicy = `version: e2
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"}
identity:
  secret: 0123456789abcdef0123
  anonymous_plan: free
  user_plan: free
  user_header: X-User-ID
  trusted_proxies: [10.0.0.0/8]
plans:
  free: {rate: 100, period: 1m}
  pro: {rate: 1000, period: 1m}
api_keys:
  - {id: k1, digest: "sha256:4a55ea81e1313e68a8feea48e98110bc50e4ca82fed243a92f8de2e9e00e5ecb", plan: pro}  # free-demo-key
routes:
  - {name: api, path: /, upstream: builtin:echo}
`

// TestIdentifyPresented: who a call is charged to, from what it presents,
// whichever front read it: each case a request in, a subject out, and why.
func TestIdentifyPresented(t *testing.T) {
	p, err := policy.Parse([]byte(presentedPolicy), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	defer st.Close()
	e, err := engine.New(engine.Options{Policy: p, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	const key = "free-demo-key"
	for _, c := range []struct {
		why  string
		in   engine.Presented
		kind string // the subject's; "" for an error
		call engine.KeyStatus
		err  error
	}{
		{"no credential: the peer's address", engine.Presented{RemoteAddr: "192.0.2.1:5"}, "ip", engine.KeyNone, nil},
		{"a key in X-API-Key", engine.Presented{RemoteAddr: "192.0.2.1:5", Header: http.Header{"X-Api-Key": {key}}}, "key", engine.KeyValid, nil},
		{"a key in a query field", engine.Presented{RemoteAddr: "192.0.2.1:5", RawQuery: "access.token=" + key}, "key", engine.KeyValid, nil},
		{"a key in a cookie", engine.Presented{RemoteAddr: "192.0.2.1:5", Header: http.Header{"Cookie": {"api_token=" + key}}}, "key", engine.KeyValid, nil},
		{"a key the body held", engine.Presented{RemoteAddr: "192.0.2.1:5", BodyTokens: []string{key}}, "key", engine.KeyValid, nil},
		{"a body field no key could be", engine.Presented{RemoteAddr: "192.0.2.1:5", BodyMalformed: true}, "ip", engine.KeyMalformed, nil},
		{"a header and a query field that differ", engine.Presented{RemoteAddr: "192.0.2.1:5", Header: http.Header{"X-Api-Key": {key}}, RawQuery: "access_token=other"}, "ip", engine.KeyMalformed, nil},
		{"an unknown key", engine.Presented{RemoteAddr: "192.0.2.1:5", Header: http.Header{"X-Api-Key": {"nope"}}}, "ip", engine.KeyUnknown, nil},
		{"a user id from a trusted proxy", engine.Presented{RemoteAddr: "10.1.2.3:5", Header: http.Header{"X-User-Id": {"alice"}}}, "user", engine.KeyNone, nil},
		{"a user id from anyone else is not believed", engine.Presented{RemoteAddr: "192.0.2.1:5", Header: http.Header{"X-User-Id": {"alice"}}}, "ip", engine.KeyNone, nil},
		{"a key beats the user header", engine.Presented{RemoteAddr: "10.1.2.3:5", Header: http.Header{"X-User-Id": {"alice"}, "X-Api-Key": {key}}}, "key", engine.KeyValid, nil},
		{"the front's own subject", engine.Presented{RemoteAddr: "192.0.2.1:5", Header: http.Header{"X-Api-Key": {key}}, Custom: "tenant-7", CustomOK: true}, "custom", engine.KeyNone, nil},
		{"a malformed user id from a trusted proxy", engine.Presented{RemoteAddr: "10.1.2.3:5", Header: http.Header{"X-User-Id": {"a\x00b"}}}, "", 0, identity.ErrMalformedUser},
		{"no TCP peer", engine.Presented{}, "", 0, engine.ErrNoClientAddress},
	} {
		call, id, err := e.IdentifyPresented(context.Background(), c.in)
		switch {
		case c.err != nil:
			if !errors.Is(err, c.err) {
				t.Errorf("%s: %v, want %v", c.why, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.why, err)
		case id.Kind != c.kind || call.Key != c.call:
			t.Errorf("%s: subject %q, key %v; want %q, %v", c.why, id.Kind, call.Key, c.kind, c.call)
		case id.Kind != "ip" && id.Subject != call.Subject:
			t.Errorf("%s: the identity's subject is not the call's", c.why)
		}
	}
}
