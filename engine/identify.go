package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/jwtauth"
	"github.com/tollgate/tollgate/policy"
)

// Credentials are what a call presented about who makes it, as a front
// read them from its transport (HTTP headers, gRPC metadata, a proxy's
// description), with the same parsers (package identity).
type Credentials struct {
	// Client is the client address charged: the peer's, or the one a
	// trusted proxy vouched for.
	Client netip.Addr
	// An API key: presented (KeyPresent), and its text (Key) unless it
	// was malformed (KeyMalformed).
	Key                      string
	KeyPresent, KeyMalformed bool
	// JWT says the key presented is a bearer JWT to verify (see
	// identity.Credential), under a policy that verifies them.
	JWT bool
	// Basic are the parts of a Basic credential that may be API keys
	// (identity.BasicParts): one that is a configured key is presented
	// as Key is, and one that is another key than Key makes the call
	// malformed. Parts that are no key are the service's own business.
	Basic []string
	// User is a user id a trusted proxy vouched for; read only when no
	// key was presented ("" for none).
	User string
	// Custom, when CustomOK, is who the front itself says the call is
	// charged to (httplimit's Subject hook): API keys and users are not
	// looked at then.
	Custom   string
	CustomOK bool
}

// Identify returns the call c describes, without its route or cost: its
// subject (an API key's, else a user's, else the client address's, or the
// front's own), and the configured key it presented, if any. Every front
// identifies through it, so that one set of credentials is one subject
// whichever front it arrives at.
//
// A bearer JWT (Credentials.JWT) is verified (package jwtauth): a valid
// one is charged to the user its subject claim names (one budget with
// that user's API keys and the user id an auth proxy reports), under the
// plan its tenant's override gives, else the one its plan claim names,
// else the policy's JWT default plan; an invalid one is an invalid key
// (KeyUnknown, or KeyMalformed), charged to the client address's
// invalid-key budget; one that cannot be checked, its JWKS unavailable,
// is KeyUnchecked, refused by Check as unavailable and charged nothing. Identify verifies without a deadline of its own
// beyond the JWKS fetch's; fronts call IdentifyContext.
func (e *Engine) Identify(c Credentials) (Call, *policy.APIKey) {
	return e.IdentifyContext(context.Background(), c)
}

// IdentifyContext is Identify, a JWKS fetch it needs bounded by ctx.
func (e *Engine) IdentifyContext(ctx context.Context, c Credentials) (Call, *policy.APIKey) {
	call, k, raw := e.identify(ctx, c)
	s := &call.Subject
	s.Unlimited = s.Unlimited || s.Plan != nil && s.Plan.Unlimited || e.allowlisted(call.Key, raw, c.Client)
	return call, k
}

// allowlisted reports whether the policy's allowlist names a call's key,
// user, tenant or address. A call of an invalid credential (key) is
// never on the list, whatever its address.
func (e *Engine) allowlisted(key KeyStatus, raw rawIDs, client netip.Addr) bool {
	l := e.policy.Allowlist
	if l == nil || key != KeyNone && key != KeyValid {
		return false
	}
	return raw.key != "" && l.Keys[raw.key] || raw.user != "" && l.Users[raw.user] ||
		raw.tenant != "" && l.Tenants[raw.tenant] || l.Address(client)
}

// rawIDs are the identities a call was found to carry, as configured
// (never logged): what the allowlist names.
type rawIDs struct{ key, user, tenant string }

// identify is IdentifyContext before the allowlist.
func (e *Engine) identify(ctx context.Context, c Credentials) (Call, *policy.APIKey, rawIDs) {
	p := e.policy
	ipID := e.hasher.Hash("ip", identity.ClientGroup(c.Client))
	sub := Subject{Client: ipID}
	if len(c.Basic) > 0 && len(p.Keys) > 0 && !c.CustomOK && !c.KeyMalformed {
		c = basicKey(p, c)
	}
	switch {
	case c.CustomOK:
		sub.Kind, sub.ID, sub.Plan = "custom", e.hasher.Hash("c", c.Custom), p.UserPlan
		if sub.Plan == nil {
			sub.Plan = p.AnonymousPlan
		}
		return Call{Subject: sub}, nil, rawIDs{}
	case c.KeyMalformed:
		sub.Kind, sub.ID = "ip", ipID
		return Call{Subject: sub, Key: KeyMalformed}, nil, rawIDs{}
	case c.KeyPresent && c.JWT:
		return e.identifyJWT(ctx, c.Key, sub)
	case c.KeyPresent:
		return e.identifyKey(c.Key, sub)
	case c.User != "":
		sub.Kind, sub.ID, sub.Plan = "user", e.hasher.Hash("u", c.User), p.UserPlan
		return Call{Subject: sub}, nil, rawIDs{user: c.User}
	}
	sub.Kind, sub.ID, sub.Plan = "ip", ipID, p.AnonymousPlan
	return Call{Subject: sub}, nil, rawIDs{}
}

// identifyJWT identifies a call presenting the bearer token token, from
// sub, the subject of its address: by the token's verified subject,
// tenant and plan, or, if no verifier is configured, the address is
// penalised or the token does not verify, as the address presenting an
// invalid key.
func (e *Engine) identifyJWT(ctx context.Context, token string, sub Subject) (Call, *policy.APIKey, rawIDs) {
	p := e.policy
	sub.Kind, sub.ID = "ip", sub.Client
	if e.jwt == nil {
		return Call{Subject: sub, Key: KeyMalformed, JWT: true}, nil, rawIDs{}
	}
	if _, penalised := e.penalty.get(sub.Client, e.now()); penalised {
		// The address is refused whatever it presents (checkKey): no
		// signature check, no JWKS fetch on its behalf.
		return Call{Subject: sub, Key: KeyUnknown, JWT: true}, nil, rawIDs{}
	}
	cl, err := e.jwt.Verify(ctx, token)
	switch {
	case errors.Is(err, jwtauth.ErrKeysUnavailable):
		return Call{Subject: sub, Key: KeyUnchecked, JWT: true}, nil, rawIDs{}
	case err != nil:
		return Call{Subject: sub, Key: KeyUnknown, JWT: true}, nil, rawIDs{}
	}
	sub.Kind, sub.ID, sub.Plan = "jwt", e.hasher.Hash("u", cl.Subject), p.JWT.DefaultPlan
	if cl.Tenant != "" {
		sub.Tenant = e.hasher.Hash("t", cl.Tenant)
	}
	if pl := jwtPlan(p, cl.Tenant, cl.Plan); pl != nil {
		sub.Plan = pl
	}
	return Call{Subject: sub, Key: KeyValid, JWT: true, Claims: cl.Extra}, nil, rawIDs{user: cl.Subject, tenant: cl.Tenant}
}

// jwtPlan is the plan of a token of tenant that names plan: its tenant's
// plan (TenantPlans), else the plan it names, else nil.
func jwtPlan(p *policy.Policy, tenant, plan string) *policy.Plan {
	if tp := p.TenantPlans[tenant]; tp != nil && tenant != "" {
		return tp
	}
	if plan == "" {
		return nil
	}
	return p.Plans[plan]
}

// identifyKey identifies a call presenting the API key key, from sub,
// the subject of its address: by the key's subject and plan, or as the
// address if the key is unknown.
func (e *Engine) identifyKey(key string, sub Subject) (Call, *policy.APIKey, rawIDs) {
	k := e.policy.Keys[identity.KeyDigest(key)]
	if k == nil {
		sub.Kind, sub.ID = "ip", sub.Client
		return Call{Subject: sub, Key: KeyUnknown}, nil, rawIDs{}
	}
	sub.Kind, sub.Plan = "key", k.Plan
	sub.ID, sub.Tenant = e.KeySubject(k)
	return Call{Subject: sub, Key: KeyValid}, k, rawIDs{key: k.ID, user: k.User, tenant: k.Tenant}
}

// basicKey returns c with the configured API key its Basic credential
// holds presented as its key; malformed if the credential holds two, or
// another than the key c presents otherwise.
func basicKey(p *policy.Policy, c Credentials) Credentials {
	found := ""
	for _, b := range c.Basic {
		if p.Keys[identity.KeyDigest(b)] == nil {
			continue
		}
		if found != "" && found != b {
			c.KeyMalformed, c.KeyPresent, c.Key = true, true, ""
			return c
		}
		found = b
	}
	switch {
	case found == "":
	case !c.KeyPresent:
		c.Key, c.KeyPresent, c.JWT = found, true, false
	case c.Key != found:
		c.KeyMalformed, c.Key, c.JWT = true, "", false
	}
	return c
}

// KeySubject returns the pseudonyms the API key k is charged under: its
// subject (its user's, when it names one: a user shares one budget with
// that user's other keys and with the user id an auth proxy reports) and
// its tenant's ("" for none).
func (e *Engine) KeySubject(k *policy.APIKey) (subject, tenant string) {
	subject = e.hasher.Hash("k", k.ID)
	if k.User != "" {
		subject = e.hasher.Hash("u", k.User)
	}
	if k.Tenant != "" {
		tenant = e.hasher.Hash("t", k.Tenant)
	}
	return subject, tenant
}

// LimitKey returns the pseudonym a route's limit is counted per for the
// values its LimitKey names (policy.Route.KeyValues), for Call.LimitKey.
func (e *Engine) LimitKey(r *policy.Route, values []string) string {
	return e.hasher.Hash("rk", policy.RouteKeyID(r.LimitKey, values))
}

// route puts the call on route, which rr matched with params (nil for
// none): the route, and what its own limit is counted per.
func (e *Engine) route(call *Call, route *policy.Route, rr policy.RouteRequest, params policy.Params) {
	call.Route = route
	if route != nil && route.Limit != nil && route.LimitKey != nil {
		call.LimitKey = e.LimitKey(route, route.KeyValues(rr, params, call.Subject.ID, call.Claims))
	}
}

// Pseudonym returns the pseudonym of id among ids of one kind ("acct" for
// login accounts, "t" for tenants), keyed by the policy's secret.
func (e *Engine) Pseudonym(kind, id string) string { return e.hasher.Hash(kind, id) }

// spelling returns the digest of an account name as a login wrote it
// (byte for byte) that the login guard tells its spellings apart by:
// keyed like a pseudonym, so no client can choose a name whose digest
// matches another's. See algo.LockoutRequest.Spelling.
func (e *Engine) spelling(account string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(e.hasher.Hash("spelt", account)))
	return h.Sum32()
}

// Presented is what a call presents about who makes it, as a front read
// it off its transport: every front (the HTTP middleware, forward-auth,
// gRPC) hands it to [Engine.IdentifyPresented], which reads it with the
// identity package, so that one request is one subject at any of them.
type Presented struct {
	// Header holds the request's headers, or a gRPC call's metadata as
	// headers (binary keys and pseudo-headers left out).
	Header http.Header
	// RawQuery is the query as it came ("" where there is none).
	RawQuery string
	// BodyTokens are the credentials the body holds (identity.BodyTokens);
	// BodyMalformed says one is a field no key could be.
	BodyTokens    []string
	BodyMalformed bool
	// RemoteAddr is the peer's address, host:port ("" when the transport
	// is not TCP).
	RemoteAddr string
	// Custom, when CustomOK, is who the front itself says the call is
	// charged to (Credentials.Custom).
	Custom   string
	CustomOK bool
}

// Identity is who a call was attributed to, as every front reports it to
// the handler behind (httplimit.Subject and grpclimit.Subject are it).
type Identity struct {
	Subject
	Key *policy.APIKey // for Kind "key"
	// Addr is the client address the call was charged to.
	Addr netip.Addr
	// Chain is the forwarding chain vouched for (identity.ClientChain):
	// the client, then the trusted proxies after it, up to the peer.
	Chain []netip.Addr
	// TrustedPeer says the immediate peer is a trusted proxy.
	TrustedPeer bool
}

// ForwardedFor is what X-Forwarded-For should say of the request before
// the hop that received it: the client charged and the trusted proxies
// after it ("" when the client is the peer). A proxy appends the peer.
func (id Identity) ForwardedFor() string {
	var b strings.Builder
	for i, a := range id.Chain {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	return b.String()
}

// ErrNoClientAddress is returned by [Engine.IdentifyPresented] when the
// client's address cannot be determined (no TCP peer, or forwarding
// headers from a trusted proxy that name none).
var ErrNoClientAddress = errors.New("the client address cannot be determined")

// IdentifyPresented finds who a call comes from: the client address
// (forwarding headers believed only from the policy's trusted proxies),
// then, unless the front named the subject (Custom), its credential
// (identity.RequestCredential: headers, and the policy's credential
// fields in the query, the body and the cookies alike; and a Basic
// credential's parts), else a user id from the policy's user header
// when the peer is trusted; and decides the call they make
// ([Engine.IdentifyContext]). It fails with ErrNoClientAddress, or an
// error wrapping identity.ErrMalformedUser for a user header that holds
// no acceptable id, which fronts answer as bad requests.
func (e *Engine) IdentifyPresented(ctx context.Context, p Presented) (Call, Identity, error) {
	id, err := e.address(p.Header, p.RemoteAddr)
	if err != nil {
		return Call{}, Identity{}, err
	}
	return e.identifyAt(ctx, p, id)
}

// address returns the client address a call is charged to, and the
// chain of trusted proxies it came through (see IdentifyPresented).
func (e *Engine) address(h http.Header, remoteAddr string) (Identity, error) {
	pol := e.policy
	r := &http.Request{Header: h, RemoteAddr: remoteAddr}
	ip, chain, ok := identity.ClientChain(r, pol.Trusted)
	if !ok {
		return Identity{}, ErrNoClientAddress
	}
	peer, _ := identity.PeerAddr(r)
	return Identity{Addr: ip, Chain: chain, TrustedPeer: pol.Trusted.Contains(peer)}, nil
}

// identifyAt is IdentifyPresented for a call from the address id found.
func (e *Engine) identifyAt(ctx context.Context, p Presented, id Identity) (Call, Identity, error) {
	cred := Credentials{Client: id.Addr, Custom: p.Custom, CustomOK: p.CustomOK}
	if !cred.CustomOK {
		var err error
		if cred, err = e.credentials(p, id, cred); err != nil {
			return Call{}, Identity{}, fmt.Errorf("identifying the call: %w", err)
		}
	}
	call, key := e.IdentifyContext(ctx, cred)
	id.Subject, id.Key = call.Subject, key
	return call, id, nil
}

// credentials fills in cred with what p presents from the address id
// found: its key or token, wherever it is, its Basic credentials, and the
// user id a trusted proxy names when it presents no key.
func (e *Engine) credentials(p Presented, id Identity, cred Credentials) (Credentials, error) {
	pol := e.policy
	fields := pol.CredentialFields
	if fields == nil {
		fields = identity.DefaultFields
	}
	tokens, qerr := fields.QueryTokens(p.RawQuery)
	tokens = append(append(tokens, p.BodyTokens...), fields.CookieTokens(p.Header)...)
	key, isJWT, present, err := identity.RequestCredential(p.Header, tokens, pol.JWT != nil)
	cred.Key, cred.JWT, cred.KeyPresent, cred.KeyMalformed = key, isJWT, present, err != nil || qerr != nil || p.BodyMalformed
	cred.Basic = identity.BasicParts(p.Header)
	if present || cred.KeyMalformed || pol.UserHeader == "" || !id.TrustedPeer {
		return cred, nil
	}
	user, _, err := identity.UserID(p.Header, pol.UserHeader)
	cred.User = user
	return cred, err
}

// penaltyBox remembers, in this process, client addresses that are over
// their invalid-key budget, so their further key attempts are refused
// without a store call. It holds at most maxPenalties entries.
type penaltyBox struct {
	mu    sync.Mutex
	until map[string]time.Time
}

const maxPenalties = 100_000

func (b *penaltyBox) get(id string, now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.until[id]
	if ok && !now.Before(t) {
		delete(b.until, id)
		return t, false
	}
	return t, ok
}

func (b *penaltyBox) set(id string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.until[id]; !ok && len(b.until) >= maxPenalties {
		b.evict()
	}
	b.until[id] = t
}

// evict removes, of a few entries taken at random (map order), the one
// that ends first, so that no request pays for a scan of a full box. An
// address evicted early is still over its budget in the store: its next
// invalid key is refused there and boxed again. b.mu is held.
func (b *penaltyBox) evict() {
	var victim string
	var end time.Time
	n := 0
	for k, v := range b.until {
		if n == 0 || v.Before(end) {
			victim, end = k, v
		}
		if n++; n == 8 {
			break
		}
	}
	delete(b.until, victim)
}

// forget ends id's penalty.
func (b *penaltyBox) forget(id string) {
	b.mu.Lock()
	delete(b.until, id)
	b.mu.Unlock()
}
