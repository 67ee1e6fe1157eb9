package policy

import (
	"bytes"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/tollgate/tollgate/identity"
)

// fieldPattern is what a credential field's name may be.
var fieldPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// DefaultMaxCredentialBody is the largest form, JSON or multipart body
// read for a credential when identity.max_body is not set.
const DefaultMaxCredentialBody = 1 << 20

// identity compiles the identity secret, the user header, the body limit
// and the trusted proxies.
func (c *compiler) identity(p *Policy, id IdentitySpec, env Env) {
	c.identitySecret(p, id, env)
	c.rejectIf(id.UserHeader != "" && !headerPattern.MatchString(id.UserHeader), "identity.user_header", "not a header name: %q", id.UserHeader)
	p.UserHeader = id.UserHeader
	p.MaxCredentialBody = c.credentialBody(id.MaxBody)
	p.CredentialFields = c.credentialFields(id.CredentialFields)
	c.trustedProxies(p, id.TrustedProxies)
}

// identitySecret compiles the secret that keys the identity HMAC: the
// file's, its environment variable's, or else the Env's generated one.
func (c *compiler) identitySecret(p *Policy, id IdentitySpec, env Env) {
	if p.Secret = c.fileSecret(id, env); p.Secret != nil {
		c.rejectIf(len(p.Secret) < 16, "identity", "the secret must be at least 16 bytes")
		return
	}
	c.rejectIf(p.Store.Type == "redis", "identity", "a shared store needs identity.secret or identity.secret_env, so every instance hashes subjects alike")
	c.rejectIf(len(env.Secret) < 16, "identity", "set identity.secret or identity.secret_env: no secret was generated for this policy")
	p.Secret = bytes.Clone(env.Secret)
	p.SecretGenerated = true
}

// fileSecret returns the secret the file sets, in identity.secret or
// the environment variable identity.secret_env names, or nil.
func (c *compiler) fileSecret(id IdentitySpec, env Env) []byte {
	switch {
	case id.Secret != "" && id.SecretEnv != "":
		c.addf("identity.secret_env", "set secret or secret_env, not both")
	case id.SecretEnv != "":
		if v := env.lookup(id.SecretEnv); v != "" {
			return []byte(v)
		}
		c.addf("identity.secret_env", "environment variable %s is empty or unset", id.SecretEnv)
	case id.Secret != "":
		return []byte(id.Secret)
	}
	return nil
}

// credentialBody compiles identity.max_body: the largest body read for a
// credential.
func (c *compiler) credentialBody(size ByteSize) int64 {
	switch {
	case size == 0:
		return DefaultMaxCredentialBody
	case size < 1<<10 || size > 64<<20:
		c.addf("identity.max_body", "want 1KiB to 64MiB, got %v", size)
	}
	return int64(size)
}

// credentialFields compiles identity.credential_fields: the fields read
// for a credential (the defaults when the file lists none).
func (c *compiler) credentialFields(fields []string) identity.Fields {
	for i, f := range fields {
		c.rejectIf(!fieldPattern.MatchString(f), fmt.Sprintf("identity.credential_fields[%d]", i), "want a field name of 1-64 letters, digits, '_', '-' and '.', got %q", f)
	}
	if fields == nil {
		return identity.DefaultFields
	}
	return identity.Fields(fields)
}

// trustedProxies compiles identity.trusted_proxies, and warns of a list
// that trusts far more than proxies.
func (c *compiler) trustedProxies(p *Policy, list []string) {
	p.TrustedProxies = c.prefixes("identity.trusted_proxies", list)
	if len(p.TrustedProxies) != len(list) {
		return
	}
	cidrs := make([]string, len(p.TrustedProxies))
	for i, pre := range p.TrustedProxies {
		cidrs[i] = pre.String()
	}
	var err error
	if p.Trusted, err = identity.ParseTrustedProxies(cidrs); err != nil {
		c.addf("identity.trusted_proxies", "%v", err)
	}
	for _, w := range TrustWarnings(p.Trusted.Prefixes()) {
		c.warnf("identity.trusted_proxies", "%s", w)
	}
}

// prefixes compiles the list of addresses and CIDRs at path; those that
// do not parse are reported and left out.
func (c *compiler) prefixes(path string, list []string) []netip.Prefix {
	var out []netip.Prefix
	for i, s := range list {
		pre, err := parsePrefix(s)
		if err != nil {
			c.addf(fmt.Sprintf("%s[%d]", path, i), "%v", err)
			continue
		}
		out = append(out, pre)
	}
	return out
}

// parsePrefix parses a CIDR, or an address as the prefix of itself alone.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, fmt.Errorf("not a CIDR: %q", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an address or CIDR: %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
