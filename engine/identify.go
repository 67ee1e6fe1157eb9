package engine

import (
	"context"
	"hash/fnv"
	"net/netip"

	"github.com/tollgate/tollgate/identity"
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
// invalid-key budget. Identify verifies without a deadline of its own
// beyond the JWKS fetch's; fronts call IdentifyContext.
func (e *Engine) Identify(c Credentials) (Call, *policy.APIKey) {
	return e.IdentifyContext(context.Background(), c)
}

// IdentifyContext is Identify, a JWKS fetch it needs bounded by ctx.
func (e *Engine) IdentifyContext(ctx context.Context, c Credentials) (Call, *policy.APIKey) {
	call, k, raw := e.identify(ctx, c)
	s := &call.Subject
	if s.Plan != nil && s.Plan.Unlimited {
		s.Unlimited = true
	}
	// An invalid credential is never on the list, whatever its address.
	if l := e.policy.Allowlist; l != nil && (call.Key == KeyNone || call.Key == KeyValid) {
		if raw.key != "" && l.Keys[raw.key] || raw.user != "" && l.Users[raw.user] ||
			raw.tenant != "" && l.Tenants[raw.tenant] || l.Address(c.Client) {
			s.Unlimited = true
		}
	}
	return call, k
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
	if err != nil {
		return Call{Subject: sub, Key: KeyUnknown, JWT: true}, nil, rawIDs{}
	}
	sub.Kind, sub.ID, sub.Plan = "jwt", e.hasher.Hash("u", cl.Subject), p.JWT.DefaultPlan
	if cl.Tenant != "" {
		sub.Tenant = e.hasher.Hash("t", cl.Tenant)
	}
	if tp := p.TenantPlans[cl.Tenant]; tp != nil && cl.Tenant != "" {
		sub.Plan = tp
	} else if pl := p.Plans[cl.Plan]; pl != nil && cl.Plan != "" {
		sub.Plan = pl
	}
	return Call{Subject: sub, Key: KeyValid, JWT: true, Claims: cl.Extra}, nil, rawIDs{user: cl.Subject, tenant: cl.Tenant}
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
