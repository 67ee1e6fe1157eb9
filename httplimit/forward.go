package httplimit

import (
	"net/http"
	"net/textproto"
	"strings"
)

// Headers that name the client's address. The gateway decides the client
// itself (identity.ClientChain) and replaces them all: X-Forwarded-For
// with the chain it vouches for, X-Real-IP with the client it charged.
var addressHeaders = []string{
	"Forwarded", "X-Forwarded-For", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip",
	"X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Original-Forwarded-For",
}

// Headers believed only from a trusted proxy, besides the user header:
// removed from any other peer's request.
var proxyHeaders = []string{
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server",
}

// Headers the middleware decides on besides those above: credentials and
// how the body reads.
var decidedHeaders = []string{
	"Authorization", "X-Api-Key", "Cookie", "Content-Type", "Content-Length", "Content-Encoding",
}

// protected returns the set of headers a client must not be able to
// remove (through Connection) or shadow (with another spelling), keyed by
// lower case with '_' read as '-': those the gateway decides on, the user
// header, and those routes match or key on (routeHeaders).
func protected(userHeader string, routeHeaders ...string) map[string]bool {
	set := map[string]bool{}
	for _, list := range [][]string{addressHeaders, proxyHeaders, decidedHeaders} {
		for _, h := range list {
			set[headerKey(h)] = true
		}
	}
	if userHeader != "" {
		set[headerKey(userHeader)] = true
	}
	for _, h := range routeHeaders {
		set[headerKey(h)] = true
	}
	return set
}

// canonicalSet returns names as a set of canonical header names ("" is
// left out).
func canonicalSet(names []string) map[string]bool {
	set := map[string]bool{}
	for _, n := range names {
		if n != "" {
			set[textproto.CanonicalMIMEHeaderKey(n)] = true
		}
	}
	return set
}

// headerKey is how CGI-style servers and some proxies see a header name:
// case and '-' versus '_' do not count.
func headerKey(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", "-"))
}

// shadows reports whether the header name is spelt with '_' and so read
// by CGI-style servers as a protected header (see protected).
func (m *middleware) shadows(name string) bool {
	return strings.IndexByte(name, '_') >= 0 && m.protected[headerKey(name)]
}

// forwardHeaders returns the headers to pass on for a request from sub,
// whose peer is or is not a trusted proxy, so that the handler behind (a
// proxied service) sees the identity the middleware charged and no other:
//
//   - headers believed only from trusted proxies (the user header,
//     X-Forwarded-Host and the like) are removed from other peers'
//     requests;
//   - every header naming the client's address is replaced:
//     X-Forwarded-For by the chain the middleware vouches for (from the
//     client it charged, dropping what the client wrote further left),
//     X-Real-IP by that client;
//   - a header spelt with '_' that such a server would read as one of the
//     headers above, or as a credential, is removed;
//   - Connection loses any token naming one of them, so no hop-by-hop
//     processing downstream can strip a credential or identity the
//     middleware decided on.
//
// A request with none of these headers, the usual case, is passed on as
// it came, without a copy; the gateway's proxy sets X-Forwarded-For and
// X-Real-IP on its own copy (see [Subject.ForwardedFor]).
func (m *middleware) forwardHeaders(h http.Header, sub Subject, trustedPeer bool) http.Header {
	if !m.touches(h, trustedPeer) {
		return h
	}
	out := h.Clone()
	for _, name := range addressHeaders {
		delete(out, name)
	}
	if !trustedPeer {
		m.removeProxyHeaders(out)
	}
	for name := range out {
		if m.shadows(name) {
			delete(out, name)
		}
	}
	m.pruneConnection(out)
	if sub.Addr.IsValid() {
		out.Set("X-Real-Ip", sub.Addr.String())
	}
	if len(sub.Chain) > 0 {
		out.Set("X-Forwarded-For", sub.ForwardedFor())
	}
	return out
}

// removeProxyHeaders removes from h the headers believed only from a
// trusted proxy: X-Forwarded-Host and the like, and the user header.
func (m *middleware) removeProxyHeaders(h http.Header) {
	for _, name := range proxyHeaders {
		delete(h, name)
	}
	if m.opts.Policy.UserHeader != "" {
		delete(h, textproto.CanonicalMIMEHeaderKey(m.opts.Policy.UserHeader))
	}
}

// pruneConnection removes from h's Connection header every token that
// names a protected header, and the header itself if none is left.
func (m *middleware) pruneConnection(h http.Header) {
	conn := h["Connection"]
	if len(conn) == 0 {
		return
	}
	var keep []string
	for _, line := range conn {
		for _, tok := range strings.Split(line, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !m.protected[headerKey(tok)] {
				keep = append(keep, tok)
			}
		}
	}
	if len(keep) > 0 {
		h["Connection"] = []string{strings.Join(keep, ", ")}
	} else {
		delete(h, "Connection")
	}
}

// touches reports whether forwardHeaders has anything to change in h: a
// header to remove or replace, or a Connection header.
func (m *middleware) touches(h http.Header, trustedPeer bool) bool {
	for name := range h {
		switch {
		case m.replaced[name], name == "Connection", !trustedPeer && m.trustedOnly[name]:
			return true
		case m.shadows(name):
			return true
		}
	}
	return false
}
