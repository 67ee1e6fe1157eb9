package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

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
	pol := e.policy
	cred := Credentials{Client: id.Addr, Custom: p.Custom, CustomOK: p.CustomOK}
	if !cred.CustomOK {
		fields := pol.CredentialFields
		if fields == nil {
			fields = identity.DefaultFields
		}
		tokens, qerr := fields.QueryTokens(p.RawQuery)
		tokens = append(append(tokens, p.BodyTokens...), fields.CookieTokens(p.Header)...)
		key, isJWT, present, err := identity.RequestCredential(p.Header, tokens, pol.JWT != nil)
		cred.Key, cred.JWT, cred.KeyPresent, cred.KeyMalformed = key, isJWT, present, err != nil || qerr != nil || p.BodyMalformed
		cred.Basic = identity.BasicParts(p.Header)
		if !present && !cred.KeyMalformed && pol.UserHeader != "" && id.TrustedPeer {
			user, ok, err := identity.UserID(p.Header, pol.UserHeader)
			if err != nil {
				return Call{}, Identity{}, fmt.Errorf("identifying the call: %w", err)
			}
			if ok {
				cred.User = user
			}
		}
	}
	call, key := e.IdentifyContext(ctx, cred)
	id.Subject, id.Key = call.Subject, key
	return call, id, nil
}
