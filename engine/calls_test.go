package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/decidetest"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/policy"
)

// This file has what the tests moved down from the gateway's share: the
// quickstart policy, both stores, a clock the tests move, and calls made
// as the gateway's clients made them.

// trustLoopback is the quickstart edit that trusts every address of 127/8
// as a proxy, so that tests choose client addresses (X-Forwarded-For).
var trustLoopback = fixture.Trusting("[127.0.0.0/8]")

// newEngine returns an engine deciding under p over s at now.
func newEngine(t *testing.T, p *policy.Policy, s tollgate.Store, now func() time.Time, with ...func(*engine.Options)) *engine.Engine {
	t.Helper()
	opts := engine.Options{Policy: p, Store: s, Now: now}
	for _, f := range with {
		f(&opts)
	}
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// peer is the gateway's client in the tests moved here: a trusted proxy
// in their policies, which names the client address in X-Forwarded-For.
const peer = "127.0.0.1:1234"

// request is a call from peer: header pairs of name and value, a JSON
// body (none for ""), and from, unless "", as its X-Forwarded-For.
func request(method, path, from, body string, header ...string) engine.Request {
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	if from != "" {
		h["X-Forwarded-For"] = from
	}
	return decidetest.Request(decidetest.Call{Method: method, Path: path, Header: h, RemoteAddr: peer, Body: body})
}

// decide decides req on e and, for an admitted call, answers and ends it
// as the upstream behind the gateway did: a login as the demo service
// answers it (see loginStatus), anything else at once.
func decide(e *engine.Engine, req engine.Request, body string) *engine.Verdict {
	ctx := context.Background()
	v := e.Decide(ctx, req)
	if v.Outcome.Admitted() {
		if body != "" {
			v.Answered(ctx, loginStatus(body))
		}
		v.Done(ctx)
	}
	return v
}

// get decides a GET of path from from (X-Forwarded-For, unless "").
func get(e *engine.Engine, path, from string, header ...string) *engine.Verdict {
	return decide(e, request(http.MethodGet, path, from, "", header...), "")
}

// login decides a POST of a JSON login body to path from from.
func login(e *engine.Engine, path, from, body string) *engine.Verdict {
	return decide(e, request(http.MethodPost, path, from, body), body)
}

// loginStatus is how the demo login service answers a JSON body: 200
// when its password is "demo", 401 otherwise.
func loginStatus(body string) int {
	var b struct{ Password string }
	json.Unmarshal([]byte(body), &b)
	if b.Password != "demo" {
		return http.StatusUnauthorized
	}
	return http.StatusOK
}

// refusedBy reports whether v refused its call for r.
func refusedBy(v *engine.Verdict, r engine.Reason) bool {
	return v.Outcome == engine.Refused && v.Reason == r
}

// invalidKey reports whether v refused its call's key as invalid, which
// the HTTP fronts answer 401.
func invalidKey(v *engine.Verdict) bool {
	return v.Outcome == engine.Invalid && v.Reason == engine.ReasonInvalidKey
}

// rateLimitPolicy is v's RateLimit-Policy field ("" for none).
func rateLimitPolicy(v *engine.Verdict) string {
	f, _ := v.RateLimit()
	return f.Policy
}
