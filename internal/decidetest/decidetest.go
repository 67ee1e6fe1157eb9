// Package decidetest is the decision engine's behaviour as one table:
// calls in, answers out, each case with the rule it pins. The engine's
// tests run it on engine.Decide over the memory store and Redis; each
// front's tests (the HTTP middleware, forward-auth, gRPC) run it through
// their own transport, so that the answer is shown to be the same
// whichever front a call arrives at. RLSCases are the same for Envoy's
// descriptors, which only the rate-limit service (package envoyrls) can
// carry: its tests run them in process and over gRPC, on the memory
// store and Redis.
package decidetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/llm"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// The policy's API keys: Key has plan pro; TenantKey and OtherTenantKey
// have plan team, and tenant acme; UnlimitedKey has plan internal, which
// is unlimited.
const (
	Key            = "decide-test-key-1"
	TenantKey      = "decide-test-key-2"
	OtherTenantKey = "decide-test-key-3"
	UnlimitedKey   = "decide-test-key-4"
)

// policyText is the table's policy; SECRET is replaced by a fresh secret
// per case, so cases sharing a Redis server never share a budget.
const policyText = `version: d1
identity:
  {secret: SECRET, anonymous_plan: free, user_plan: users, user_header: X-User-ID, trusted_proxies: [10.0.0.0/8],
   jwt: {jwks_url: JWKS, algorithms: [ES256], plan_claim: plan, tenant_claim: org}}
allowlist: {addresses: [192.0.2.99/32], users: [ops-bot]}
plans:
  free: {algorithm: fixed_window, rate: 3, period: 1m}
  users: {algorithm: fixed_window, rate: 5, period: 1m}
  internal: {unlimited: true}
  team:
    limits: [{name: key, algorithm: fixed_window, rate: 10, period: 1m}]
    tenant: {algorithm: fixed_window, rate: 3, period: 1m}
  pro:
    limits:
      - {name: pro, algorithm: fixed_window, rate: 100, period: 1m}
      - {name: trial, algorithm: fixed_window, rate: 2, period: 1m, shadow: true}
invalid_key_limit: {algorithm: fixed_window, rate: 2, period: 1m}
api_keys:
  - {id: k1, digest: "DIGEST", plan: pro}
  - {id: k2, digest: "DIGEST2", plan: team, tenant: acme}
  - {id: k3, digest: "DIGEST3", plan: team, tenant: acme}
  - {id: k4, digest: "DIGEST4", plan: internal}
routes:
  - {name: search, path: /t.V/Search, global: {algorithm: fixed_window, rate: 2, period: 1m}}
  - {name: slow, path: /t.V/Slow, concurrency: {limit: 1, per: route}, limit: {algorithm: fixed_window, rate: 1000, period: 1m}}
  - {name: export, path: /t.V/Export, cost: 2}
  - {name: pay, path: /t.V/Pay, on_store_failure: fail_closed}
  - {name: try, path: /t.V/Try, shadow_limit: {algorithm: fixed_window, rate: 1, period: 1m}}
  - {name: item, path: "/t.V/Item/{id}", limit: {algorithm: fixed_window, rate: 1, period: 1m}, limit_key: [path:id]}
  - name: login
    method: POST
    path: /login
    limit: {algorithm: fixed_window, rate: 100, period: 1m}
    login: {account_field: user, failure_statuses: [401], max_failures: 2, lock: 1m, max_lock: 1h,
            ip_failures: {algorithm: fixed_window, rate: 50, period: 1m}}
  - {name: api, path: /t.V/}
`

// Policy returns the table's policy under a fresh secret, trusting the
// JWTs the IdP at jwksURL signs.
func Policy(tb testing.TB, jwksURL string) *policy.Policy {
	tb.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	text := strings.NewReplacer("SECRET", hex.EncodeToString(b), "JWKS", jwksURL, "DIGEST2", identity.KeyDigest(TenantKey),
		"DIGEST3", identity.KeyDigest(OtherTenantKey), "DIGEST4", identity.KeyDigest(UnlimitedKey), "DIGEST", identity.KeyDigest(Key)).Replace(policyText)
	p, err := policy.Parse([]byte(text), "decide.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Refusal is why a call was not admitted, as every front can tell it.
type Refusal string

// The refusals.
const (
	None            Refusal = ""
	Rate            Refusal = "rate"             // engine.ReasonRate
	Concurrency     Refusal = "concurrency"      // engine.ReasonConcurrency
	InvalidKey      Refusal = "invalid_key"      // engine.ReasonInvalidKey
	InvalidKeys     Refusal = "invalid_keys"     // engine.ReasonInvalidKeys
	LoginLocked     Refusal = "login_locked"     // engine.ReasonLoginLocked
	BadRequest      Refusal = "bad_request"      // engine.ReasonBadRequest
	LoginElsewhere  Refusal = "login_elsewhere"  // engine.ReasonLoginElsewhere
	BadLogin        Refusal = "bad_login"        // engine.ReasonBadLogin
	Unavailable     Refusal = "unavailable"      // engine.ReasonUnavailable
	KeysUnavailable Refusal = "keys_unavailable" // engine.ReasonKeysUnavailable
	NoRoute         Refusal = "no_route"         // engine.ReasonNoRoute
	Other           Refusal = "other"
)

// Of returns the refusal a verdict's reason is.
func Of(r engine.Reason) Refusal {
	switch r {
	case engine.ReasonNone:
		return None
	case engine.ReasonRate:
		return Rate
	case engine.ReasonConcurrency:
		return Concurrency
	case engine.ReasonInvalidKey:
		return InvalidKey
	case engine.ReasonInvalidKeys:
		return InvalidKeys
	case engine.ReasonLoginLocked:
		return LoginLocked
	case engine.ReasonBadRequest:
		return BadRequest
	case engine.ReasonLoginElsewhere:
		return LoginElsewhere
	case engine.ReasonBadLogin:
		return BadLogin
	case engine.ReasonUnavailable:
		return Unavailable
	case engine.ReasonKeysUnavailable:
		return KeysUnavailable
	case engine.ReasonNoRoute:
		return NoRoute
	}
	return Other
}

// Answer is what a front answered a call, in terms every front shares.
type Answer struct {
	Admitted bool
	Refusal  Refusal
	// Budget is the budget reported (RateLimit), "" for none; Remaining
	// is what is left of it.
	Budget    string
	Remaining int64
	// Kind is the subject's kind, for an admitted call ("" otherwise).
	Kind string
	// RetryAfter is the seconds a refused caller is told to wait
	// (Retry-After, a gRPC pushback rounded up), 0 for none. The table
	// is decided 10 s into a minute: a minute's fixed window refuses
	// for 50 s.
	RetryAfter int64
}

// A Call is one call of a case and the answer it must get.
type Call struct {
	Method, Path string // Method "" is GET
	RawQuery     string
	Header       map[string]string
	RemoteAddr   string // host:port
	Body         string // a JSON body (Content-Type application/json)
	// Token, if set, is presented as a bearer JWT (Authorization).
	Token *Token
	// Hold keeps the call in flight until the case ends (Done is not
	// called before); Status is the service's answer (zero: 200).
	Hold   bool
	Status int
	Want   Answer
}

// A Token is a bearer JWT, issued at Now for an hour and signed by the
// table's identity provider, or, if Forged, by a key it never published.
type Token struct {
	Subject, Plan, Tenant string
	Forged                bool
}

// A Case is a sequence of calls on fresh budgets, and why each answer is
// the rule.
type Case struct {
	Name, Why string
	// HTTP says the case needs what only HTTP has (a query, a body, a
	// path read by HTTP servers): gRPC does not run it.
	HTTP bool
	// SeesEnd says the case needs a front that sees a call's body and
	// end (a concurrency slot, a login's answer): forward-auth does not
	// run it.
	SeesEnd bool
	// Direct says the case depends on the immediate peer being the
	// caller: forward-auth, whose peer is always its proxy, does not run
	// it.
	Direct bool
	// StoreDown says the store is down throughout the case: Run gives
	// the front a store whose Redis is gone (DownStore).
	StoreDown bool
	// JWKSDown says the identity provider's JWKS cannot be fetched
	// throughout the case: Run gives the policy a JWKS URL nothing
	// listens at.
	JWKSDown bool
	// RequireRoute says the front refuses calls no route matches, as the
	// gateway does (Front.RequireRoute).
	RequireRoute bool
	Calls        []Call
}

func ip(n string) string { return "192.0.2." + n + ":1234" }

func ok(budget string, remaining int64, kind string) Answer {
	return Answer{Admitted: true, Budget: budget, Remaining: remaining, Kind: kind}
}

func refused(r Refusal, budget string, remaining, retryAfter int64) Answer {
	return Answer{Refusal: r, Budget: budget, Remaining: remaining, RetryAfter: retryAfter}
}

func bearer(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }

// Cases are the table.
var Cases = []Case{
	{Name: "plan", Why: "an anonymous caller is charged to its address under the anonymous plan, and refused once it is used up, naming the budget",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Want: ok("free", 2, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Want: ok("free", 1, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Want: ok("free", 0, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Want: refused(Rate, "free", 0, 50)},
			{Path: "/t.V/Read", RemoteAddr: ip("2"), Want: ok("free", 2, "ip")},
		}},
	{Name: "api key", Why: "a configured key is charged under its plan (a budget of a plan of several limits is named plan.limit); its shadow budget (trial, 2 a minute) never refuses",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Header: bearer(Key), Want: ok("pro.pro", 99, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Header: bearer(Key), Want: ok("pro.pro", 98, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Header: bearer(Key), Want: ok("pro.pro", 97, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("1"), Want: ok("free", 2, "ip")},
		}},
	{Name: "invalid keys", Why: "an unknown key is refused as invalid and charged to its address; past the invalid-key limit every keyed call of the address is refused, a valid key too, and unkeyed calls are not",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("3"), Header: bearer("no-such-key-000"), Want: refused(InvalidKey, "", 0, 0)},
			{Path: "/t.V/Read", RemoteAddr: ip("3"), Header: bearer("no-such-key-001"), Want: refused(InvalidKey, "", 0, 0)},
			{Path: "/t.V/Read", RemoteAddr: ip("3"), Header: bearer("no-such-key-002"), Want: refused(InvalidKeys, "", 0, 50)},
			{Path: "/t.V/Read", RemoteAddr: ip("3"), Header: bearer(Key), Want: refused(InvalidKeys, "", 0, 50)},
			{Path: "/t.V/Read", RemoteAddr: ip("3"), Want: ok("free", 2, "ip")},
		}},
	{Name: "trusted proxy", Direct: true, Why: "a user id and a forwarded address are believed only from a trusted proxy; the address a proxy vouches for is the same subject as that address calling directly",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: "10.0.0.1:1", Header: map[string]string{"X-User-ID": "u1"}, Want: ok("users", 4, "user")},
			{Path: "/t.V/Read", RemoteAddr: ip("4"), Header: map[string]string{"X-User-ID": "u1"}, Want: ok("free", 2, "ip")},
			{Path: "/t.V/Read", RemoteAddr: "10.0.0.1:1", Header: map[string]string{"X-Forwarded-For": "192.0.2.4"}, Want: ok("free", 1, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("5"), Header: map[string]string{"X-Forwarded-For": "192.0.2.4"}, Want: ok("free", 2, "ip")},
		}},
	{Name: "global", Why: "a route's global budget is shared by every subject and reported when it is the most restrictive, and a call it refuses is charged nothing of its own limits",
		Calls: []Call{
			{Path: "/t.V/Search", RemoteAddr: ip("6"), Want: ok("global.search", 1, "ip")},
			{Path: "/t.V/Search", RemoteAddr: ip("7"), Want: ok("global.search", 0, "ip")},
			{Path: "/t.V/Search", RemoteAddr: ip("8"), Want: refused(Rate, "global.search", 0, 50)},
			{Path: "/t.V/Read", RemoteAddr: ip("8"), Want: ok("free", 2, "ip")},
		}},
	{Name: "global given back", Why: "a place held in the global budget is given back when the caller's own limits refuse the call: the next caller finds it free",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("20"), Want: ok("free", 2, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("20"), Want: ok("free", 1, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("20"), Want: ok("free", 0, "ip")},
			{Path: "/t.V/Search", RemoteAddr: ip("20"), Want: refused(Rate, "free", 0, 50)},
			{Path: "/t.V/Search", RemoteAddr: ip("21"), Want: ok("global.search", 1, "ip")},
			{Path: "/t.V/Search", RemoteAddr: ip("22"), Want: ok("global.search", 0, "ip")},
		}},
	{Name: "concurrency", SeesEnd: true, Why: "a route's concurrency slot is held while a call is in flight; a call refused for it is charged nothing, and the slot is free again once the call ends",
		Calls: []Call{
			{Path: "/t.V/Slow", RemoteAddr: ip("9"), Hold: true, Want: ok("slow", 999, "ip")},
			{Path: "/t.V/Slow", RemoteAddr: ip("9"), Want: refused(Concurrency, "", 0, 1)},
			{Path: "/t.V/Read", RemoteAddr: ip("9"), Want: ok("free", 2, "ip")},
		}},
	{Name: "cost", Why: "a route's cost is charged per call, and a call costing more than is left is refused with what is left",
		Calls: []Call{
			{Path: "/t.V/Export", RemoteAddr: ip("10"), Want: ok("free", 1, "ip")},
			{Path: "/t.V/Export", RemoteAddr: ip("10"), Want: refused(Rate, "free", 1, 50)},
			{Path: "/t.V/Read", RemoteAddr: ip("10"), Want: ok("free", 0, "ip")},
		}},
	{Name: "limit key", Why: "a route limit keyed by a path parameter is one budget per value, whoever calls",
		Calls: []Call{
			{Path: "/t.V/Item/a", RemoteAddr: ip("11"), Want: ok("item", 0, "ip")},
			{Path: "/t.V/Item/a", RemoteAddr: ip("12"), Want: refused(Rate, "item", 0, 50)},
			{Path: "/t.V/Item/b", RemoteAddr: ip("12"), Want: ok("item", 0, "ip")},
		}},
	{Name: "jwt", Why: "a verified bearer JWT is charged to its subject, from any address, under the plan its claim names or else the user plan; one that does not verify is refused as an invalid key",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("40"), Token: &Token{Subject: "carol", Plan: "pro"}, Want: ok("pro.pro", 99, "jwt")},
			{Path: "/t.V/Read", RemoteAddr: ip("41"), Token: &Token{Subject: "carol", Plan: "pro"}, Want: ok("pro.pro", 98, "jwt")},
			{Path: "/t.V/Read", RemoteAddr: ip("40"), Token: &Token{Subject: "dave"}, Want: ok("users", 4, "jwt")},
			{Path: "/t.V/Read", RemoteAddr: ip("40"), Token: &Token{Subject: "carol", Plan: "pro", Forged: true}, Want: refused(InvalidKey, "", 0, 0)},
			{Path: "/t.V/Read", RemoteAddr: ip("40"), Want: ok("free", 2, "ip")},
		}},
	{Name: "jwks down", JWKSDown: true, Why: "a bearer JWT that cannot be checked because the JWKS cannot be fetched is refused as unavailable, with a retry, and is not charged as an invalid key; API keys and anonymous calls still pass",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("44"), Token: &Token{Subject: "carol", Plan: "pro"}, Want: refused(KeysUnavailable, "", 0, 1)},
			{Path: "/t.V/Read", RemoteAddr: ip("44"), Token: &Token{Subject: "carol", Plan: "pro"}, Want: refused(KeysUnavailable, "", 0, 1)},
			{Path: "/t.V/Read", RemoteAddr: ip("44"), Token: &Token{Subject: "carol", Plan: "pro", Forged: true}, Want: refused(KeysUnavailable, "", 0, 1)},
			{Path: "/t.V/Read", RemoteAddr: ip("44"), Header: bearer(Key), Want: ok("pro.pro", 99, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("44"), Want: ok("free", 2, "ip")},
		}},
	{Name: "jwt tenant", Why: "the tokens of one tenant share its plan's tenant budget, as its API keys do",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("42"), Token: &Token{Subject: "erin", Plan: "team", Tenant: "globex"}, Want: ok("team.tenant", 2, "jwt")},
			{Path: "/t.V/Read", RemoteAddr: ip("43"), Token: &Token{Subject: "frank", Plan: "team", Tenant: "globex"}, Want: ok("team.tenant", 1, "jwt")},
			{Path: "/t.V/Read", RemoteAddr: ip("43"), Token: &Token{Subject: "grace", Plan: "team", Tenant: "initech"}, Want: ok("team.tenant", 2, "jwt")},
		}},
	{Name: "tenant", Why: "the keys of one tenant share its plan's tenant budget, reported when it is the most restrictive, beside each key's own limit",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("30"), Header: bearer(TenantKey), Want: ok("team.tenant", 2, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("31"), Header: bearer(OtherTenantKey), Want: ok("team.tenant", 1, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("30"), Header: bearer(TenantKey), Want: ok("team.tenant", 0, "key")},
			{Path: "/t.V/Read", RemoteAddr: ip("31"), Header: bearer(OtherTenantKey), Want: refused(Rate, "team.tenant", 0, 50)},
		}},
	{Name: "allowlist", Direct: true, Why: "an allowlisted address is charged no rate limit and never refused by one, but an invalid key from it is still refused",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("99"), Want: ok("", 0, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("99"), Want: ok("", 0, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("99"), Want: ok("", 0, "ip")},
			{Path: "/t.V/Search", RemoteAddr: ip("99"), Want: ok("", 0, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("99"), Want: ok("", 0, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("99"), Header: bearer("no-such-key-099"), Want: refused(InvalidKey, "", 0, 0)},
		}},
	{Name: "unlimited plan", Why: "a key of an unlimited plan is charged no rate limit, a route's global budget neither, and never refused by one",
		Calls: []Call{
			{Path: "/t.V/Search", RemoteAddr: ip("35"), Header: bearer(UnlimitedKey), Want: ok("", 0, "key")},
			{Path: "/t.V/Search", RemoteAddr: ip("35"), Header: bearer(UnlimitedKey), Want: ok("", 0, "key")},
			{Path: "/t.V/Search", RemoteAddr: ip("35"), Header: bearer(UnlimitedKey), Want: ok("", 0, "key")},
			{Path: "/t.V/Search", RemoteAddr: ip("36"), Want: ok("global.search", 1, "ip")},
		}},
	{Name: "allowlisted user", Direct: true, Why: "a user on the allowlist, named by a trusted proxy, is charged no rate limit; another user beside it is",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: "10.0.0.2:1", Header: map[string]string{"X-User-ID": "ops-bot"}, Want: ok("", 0, "user")},
			{Path: "/t.V/Read", RemoteAddr: "10.0.0.2:1", Header: map[string]string{"X-User-ID": "ops-bot"}, Want: ok("", 0, "user")},
			{Path: "/t.V/Read", RemoteAddr: "10.0.0.2:1", Header: map[string]string{"X-User-ID": "u2"}, Want: ok("users", 4, "user")},
		}},
	{Name: "shadow limit", Why: "a route's shadow_limit (a candidate) is charged beside the enforced limits but never refuses and is never reported",
		Calls: []Call{
			{Path: "/t.V/Try", RemoteAddr: ip("32"), Want: ok("free", 2, "ip")},
			{Path: "/t.V/Try", RemoteAddr: ip("32"), Want: ok("free", 1, "ip")},
			{Path: "/t.V/Try", RemoteAddr: ip("32"), Want: ok("free", 0, "ip")},
		}},
	{Name: "fail open", StoreDown: true, Why: "while the store is down, an ordinary route is decided by the local fallback, which enforces the limit (this instance's share of it)",
		Calls: []Call{
			{Path: "/t.V/Read", RemoteAddr: ip("33"), Want: ok("free", 2, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("33"), Want: ok("free", 1, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("33"), Want: ok("free", 0, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("33"), Want: refused(Rate, "free", 0, 50)},
		}},
	{Name: "fail closed", StoreDown: true, Why: "while the store is down, a route set to fail closed refuses every call as unavailable, and the others still pass",
		Calls: []Call{
			{Path: "/t.V/Pay", RemoteAddr: ip("34"), Want: refused(Unavailable, "", 0, 1)},
			{Path: "/t.V/Pay", RemoteAddr: ip("34"), Header: bearer(Key), Want: refused(Unavailable, "", 0, 1)},
			{Path: "/t.V/Read", RemoteAddr: ip("34"), Want: ok("free", 2, "ip")},
		}},
	{Name: "no route", Why: "a call no route matches is charged to the caller's plan, as a route without limits of its own would be",
		Calls: []Call{
			{Path: "/o.S/M", RemoteAddr: ip("50"), Want: ok("free", 2, "ip")},
			{Path: "/t.V/Read", RemoteAddr: ip("50"), Want: ok("free", 1, "ip")},
		}},
	{Name: "route required", RequireRoute: true, Why: "a front that requires a route refuses a call no route matches, before anything is charged, and for good: no retry is asked",
		Calls: []Call{
			{Path: "/o.S/M", RemoteAddr: ip("51"), Want: refused(NoRoute, "", 0, 0)},
			{Path: "/t.V/Read", RemoteAddr: ip("51"), Want: ok("free", 2, "ip")},
		}},
	{Name: "ambiguous path", HTTP: true, Why: "a path servers read as different routes is refused before anything is charged",
		Calls: []Call{
			{Path: "/t.V/Read/../Search", RemoteAddr: ip("13"), Want: refused(BadRequest, "", 0, 0)},
			{Path: "/t.V/Read", RemoteAddr: ip("13"), Want: ok("free", 2, "ip")},
		}},
	{Name: "login", HTTP: true, SeesEnd: true, Why: "a login route charges the account's failures: after max_failures failed attempts the account is locked, for any address",
		Calls: []Call{
			{Method: "POST", Path: "/login", Body: `{"user":"alice"}`, RemoteAddr: ip("14"), Status: 401, Want: ok("login", 99, "ip")},
			{Method: "POST", Path: "/login", Body: `{"user":"Alice"}`, RemoteAddr: ip("14"), Status: 401, Want: ok("login", 98, "ip")},
			{Method: "POST", Path: "/login", Body: `{"user":"alice"}`, RemoteAddr: ip("15"), Want: refused(LoginLocked, "", 0, 60)},
			{Method: "POST", Path: "/login", Body: `{"user":"bob"}`, RemoteAddr: ip("15"), Want: ok("login", 99, "ip")},
		}},
	{Name: "login read", HTTP: true, SeesEnd: true, Why: "a login whose account another parser could read otherwise, or one sent to the login path by another method, is refused before anything is held",
		Calls: []Call{
			{Method: "POST", Path: "/login", RawQuery: "user=bob", Body: `{"user":"alice"}`, RemoteAddr: ip("16"), Want: refused(BadLogin, "", 0, 0)},
			{Method: "PUT", Path: "/login", Body: `{"user":"alice"}`, RemoteAddr: ip("16"), Want: refused(LoginElsewhere, "", 0, 0)},
			{Method: "POST", Path: "/login", Body: `{"user":"alice"}`, RemoteAddr: ip("16"), Want: ok("login", 99, "ip")},
		}},
}

// A Front is what a front a case is run through is made of: an engine
// under Policy over Store, refusing calls no route matches if
// RequireRoute.
type Front struct {
	Policy       *policy.Policy
	Store        tollgate.Store
	RequireRoute bool
}

// A NewFront makes the front a case is run through: f behind the front's
// transport. call answers a call, and end ends the calls it holds.
type NewFront func(t *testing.T, f Front) (call func(Call) Answer, end func())

// Run runs every case on fronts made by newFront, one per case on fresh
// budgets: over a store made by newStore, or for a case with StoreDown,
// over DownStore.
func Run(t *testing.T, cases []Case, newStore func(t *testing.T) tollgate.Store, newFront NewFront) {
	keys := [...]*jwttest.Key{jwttest.NewKey(t, "ES256", "idp"), jwttest.NewKey(t, "ES256", "forger")}
	idp := jwttest.NewIdP(t, keys[0])
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			s := newStore
			if c.StoreDown {
				s = DownStore
			}
			jwks := idp.JWKSURL()
			if c.JWKSDown {
				jwks = closedURL(t)
			}
			call, end := newFront(t, Front{Policy: Policy(t, jwks), Store: s(t), RequireRoute: c.RequireRoute})
			defer end()
			for i, cl := range c.Calls {
				if tk := cl.Token; tk != nil {
					cl.Header = map[string]string{"Authorization": "Bearer " + tk.sign(t, keys)}
				}
				if got := call(cl); got != cl.Want {
					t.Errorf("call %d (%s %s): got %+v, want %+v\n(%s)", i, cl.Method, cl.Path, got, cl.Want, c.Why)
				}
			}
		})
	}
}

// closedURL returns a JWKS URL on a loopback port nothing listens at.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String() + "/jwks.json"
}

// sign returns tk signed with keys[0], the IdP's, or if forged with
// keys[1].
func (tk *Token) sign(t *testing.T, keys [2]*jwttest.Key) string {
	c := jwttest.Valid(tk.Subject, Now)
	if tk.Plan != "" {
		c = c.With("plan", tk.Plan)
	}
	if tk.Tenant != "" {
		c = c.With("org", tk.Tenant)
	}
	if tk.Forged {
		return jwttest.Sign(t, keys[1], c)
	}
	return jwttest.Sign(t, keys[0], c)
}

// Now is the time the table is decided at: its stores' clock.
var Now = time.UnixMilli(1_800_000_010_000)

// Clock is the table's clock: it reads Now.
func Clock() time.Time { return Now }

// MemoryStore returns a memory store on the table's clock.
func MemoryStore(t *testing.T) tollgate.Store {
	s := memory.New(memory.Options{Now: Clock})
	t.Cleanup(func() { s.Close() })
	return s
}

// Stores returns the stores the table runs on, by name: the memory store,
// and Redis on srv, flushed before each case, since global budgets are
// keyed by route, not by the policy's fresh secret.
func Stores(srv *redistest.Server) map[string]func(t *testing.T) tollgate.Store {
	return map[string]func(t *testing.T) tollgate.Store{
		"memory": MemoryStore,
		"redis":  func(t *testing.T) tollgate.Store { return fixture.EmptyRedisStore(t, srv) },
	}
}

// DownStore returns the store a gateway has while its Redis is down: the
// resilience store over a real redis-server that stops answering before
// the first call (stopped, so that its port stays its own), with a local
// fallback on the table's clock.
func DownStore(t *testing.T) tollgate.Store {
	srv := redistest.Start(t)
	primary, err := rstore.New(srv.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	local := memory.New(memory.Options{Now: Clock})
	s := resilience.New(primary, local, resilience.Options{Now: Clock})
	t.Cleanup(func() {
		s.Close()
		local.Close()
	})
	return s
}

// Request is the engine.Request c is on the HTTP front, its body read as
// the middleware reads it (identity.ReadLogin) for a login.
func Request(c Call) engine.Request {
	h := http.Header{}
	for k, v := range c.Header {
		h.Set(k, v)
	}
	if c.Body != "" {
		h.Set("Content-Type", "application/json")
	}
	method := c.Method
	if method == "" {
		method = http.MethodGet
	}
	return engine.Request{Method: method, Path: c.Path, RawQuery: c.RawQuery, Header: h,
		Bodiless: c.Body == "", RemoteAddr: c.RemoteAddr,
		Body: jsonBody{h: h, query: c.RawQuery, body: c.Body}}
}

// jsonBody is a call's body as the engine reads it: no credentials, and a
// login read as the middleware reads it.
type jsonBody struct {
	h           http.Header
	query, body string
}

func (jsonBody) Credentials(netip.Addr) ([]string, bool, error) { return nil, false, nil }

func (b jsonBody) Login(lg *policy.Login) (*identity.Login, error) {
	return identity.ReadLogin(identity.LoginRequest{Header: b.h, RawQuery: b.query, Body: strings.NewReader(b.body), Length: int64(len(b.body))},
		lg.AccountField, lg.MaxBody)
}

// Tokens reads a token call's request as the middleware reads it.
func (b jsonBody) Tokens(t *policy.Tokens) (engine.TokenRequest, error) {
	if b.body == "" {
		return engine.TokenRequest{}, fmt.Errorf("%w: a token route takes a JSON body", engine.ErrBadTokenRequest)
	}
	req, err := llm.ParseRequest([]byte(b.body), llm.RequestOptions{Fields: t.Fields})
	if err != nil {
		return engine.TokenRequest{}, fmt.Errorf("%w: %v", engine.ErrBadTokenRequest, err)
	}
	return engine.TokenRequest{Model: req.Model, MaxOutput: req.MaxOutput, Choices: req.Choices, Bytes: int64(len(b.body))}, nil
}

// AnswerOf returns the answer a verdict is.
func AnswerOf(v *engine.Verdict) Answer {
	a := Answer{Admitted: v.Outcome.Admitted(), Refusal: Of(v.Reason)}
	if c, ok := v.Reported(); ok {
		a.Budget, a.Remaining = c.Budget.Name, c.Decision.Remaining
	}
	if a.Admitted {
		a.Kind = v.Identity.Kind
	}
	a.RetryAfter = v.RetrySeconds()
	return a
}
