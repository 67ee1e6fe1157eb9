package engine_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
)

// matchingConfig is the quickstart verifying JWTs from idp, with routes
// that match on a path parameter, a header and a host and count their
// limits per path parameter, per subject and header, and per claim
// (fixture.Matching).
func matchingConfig(t *testing.T, idp *jwttest.IdP) *policy.Policy {
	t.Helper()
	return fixture.Quickstart(t, fixture.Matching(idp.JWKSURL(), policy.BuiltinEcho)...)
}

// TestRouteMatchingAndKeys: routes match path parameters, headers and
// hosts, and their limits are counted per what limit_key names (a path
// parameter shared by every subject, a header value per subject beside
// the plan, a JWT claim), each value hashed: no value reaches a store key
// or the logs.
func TestRouteMatchingAndKeys(t *testing.T) {
	c := fixture.StillClock() // fixed windows of a minute
	fixture.OnStores(t, c.Now, func(t *testing.T, s tollgate.Store, srv *redistest.Server) {
		ec := jwttest.NewKey(t, "ES256", "ec-1")
		idp := jwttest.NewIdP(t, ec)
		logs := &fixture.SyncBuffer{}
		e := newEngine(t, matchingConfig(t, idp), s, c.Now, func(o *engine.Options) {
			o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})

		// Per path parameter: 3 exports of user-xyzzy a minute, whoever
		// asks and however the path is spelt.
		for i := 0; i < 3; i++ {
			if v := get(e, "/api/users/user-xyzzy/export", "", "X-API-Key", fixture.FreeKey); !v.Outcome.Admitted() {
				t.Fatalf("export %d: %v %v", i, v.Outcome, v.Reason)
			}
		}
		for _, c := range []struct {
			path, key string
			admitted  bool
		}{
			{"/api/users/user-xyzzy/export", fixture.FreeKey, false},
			{"/api/users/user-xyzzy/export", fixture.ProKey, false},
			{"/API/Users/USER-XYZZY/Export/", fixture.ProKey, false},
			{"/api/users/user-other/export", fixture.FreeKey, true},
		} {
			if v := get(e, c.path, "", "X-API-Key", c.key); v.Outcome.Admitted() != c.admitted || !c.admitted && !refusedBy(v, engine.ReasonRate) {
				t.Errorf("%s: %v %v, want admitted %v (else refused for the rate)", c.path, v.Outcome, v.Reason, c.admitted)
			}
		}

		// Per subject and X-Org, beside the plan: 5 for org-plugh, then
		// another org or another subject has its own 5.
		for i := 0; i < 5; i++ {
			if v := get(e, "/api/org/items", "", "X-API-Key", fixture.ProKey, "X-Org", "org-plugh"); !v.Outcome.Admitted() {
				t.Fatalf("org %d: %v %v", i, v.Outcome, v.Reason)
			}
		}
		if v := get(e, "/api/org/items", "", "X-API-Key", fixture.ProKey, "X-Org", "ORG-PLUGH"); !refusedBy(v, engine.ReasonRate) {
			t.Errorf("the 6th for org-plugh (in other case): %v %v, want refused (429)", v.Outcome, v.Reason)
		}
		if v := get(e, "/api/org/items", "", "X-API-Key", fixture.ProKey, "X-Org", "org-other"); !v.Outcome.Admitted() {
			t.Errorf("another org: %v %v", v.Outcome, v.Reason)
		}
		if v := get(e, "/api/org/items", "", "X-API-Key", fixture.FreeKey, "X-Org", "org-plugh"); !v.Outcome.Admitted() {
			t.Errorf("another subject: %v %v", v.Outcome, v.Reason)
		}
		if v := get(e, "/api/org/items", "", "X-API-Key", fixture.ProKey); !v.Outcome.Admitted() || v.Call.Route.Name != "api" {
			t.Errorf("without X-Org (the api route): %v %v", v.Outcome, v.Reason)
		}
		req := request(http.MethodGet, "/api/org/items", "", "", "X-API-Key", fixture.ProKey)
		req.Header["X-Org"] = []string{"org-other", "org-plugh"}
		if v := decide(e, req, ""); v.Outcome != engine.Invalid || v.Reason != engine.ReasonBadRequest {
			t.Errorf("X-Org twice: %v %v, want a bad request (400)", v.Outcome, v.Reason)
		}

		// Per claim: two subjects of org acme-plugh share 2 a minute.
		tok := func(sub, org string) string {
			return "Bearer " + jwttest.Sign(t, ec, jwttest.Valid(sub, c.Now()).With("org", org))
		}
		for _, c := range []struct {
			auth     string
			admitted bool
		}{
			{tok("alice", "acme-plugh"), true}, {tok("bob", "acme-plugh"), true}, {tok("carol", "acme-plugh"), false},
			{tok("alice", "other-org"), true},
		} {
			if v := get(e, "/api/claims/x", "", "Authorization", c.auth); v.Outcome.Admitted() != c.admitted || !c.admitted && !refusedBy(v, engine.ReasonRate) {
				t.Errorf("claims: %v %v, want admitted %v (else refused for the rate)", v.Outcome, v.Reason, c.admitted)
			}
		}

		// By host: 1 a minute on admin.example.com, the api route else.
		for i, want := range []bool{true, false} {
			req := request(http.MethodGet, "/api/items", "", "", "X-API-Key", fixture.ProKey)
			req.Host = "admin.example.com"
			if v := decide(e, req, ""); v.Outcome.Admitted() != want || !want && !refusedBy(v, engine.ReasonRate) {
				t.Errorf("admin host %d: %v %v, want admitted %v (else refused for the rate)", i, v.Outcome, v.Reason, want)
			}
		}
		if v := get(e, "/api/items", "", "X-API-Key", fixture.ProKey); !v.Outcome.Admitted() {
			t.Errorf("another host: %v %v", v.Outcome, v.Reason)
		}

		if srv != nil {
			c, err := srv.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			keys, err := c.Do(context.Background(), c.B().Keys().Pattern("rl:*").Build()).AsStrSlice()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys: %v %v", keys, err)
			}
			for _, k := range keys {
				if strings.Contains(strings.ToLower(k), "xyzzy") || strings.Contains(strings.ToLower(k), "plugh") {
					t.Errorf("a store key holds a raw value: %s", k)
				}
			}
		}
		if l := strings.ToLower(logs.String()); strings.Contains(l, "plugh") {
			t.Errorf("the logs hold a raw header or claim value")
		}
	})
}
