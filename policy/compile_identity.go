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
	switch {
	case id.Secret != "" && id.SecretEnv != "":
		c.addf("identity.secret_env", "set secret or secret_env, not both")
	case id.SecretEnv != "":
		if v := env.lookup(id.SecretEnv); v == "" {
			c.addf("identity.secret_env", "environment variable %s is empty or unset", id.SecretEnv)
		} else {
			p.Secret = []byte(v)
		}
	case id.Secret != "":
		p.Secret = []byte(id.Secret)
	}
	if p.Secret != nil && len(p.Secret) < 16 {
		c.addf("identity", "the secret must be at least 16 bytes")
	}
	if p.Secret == nil {
		if p.Store.Type == "redis" {
			c.addf("identity", "a shared store needs identity.secret or identity.secret_env, so every instance hashes subjects alike")
		}
		if len(env.Secret) < 16 {
			c.addf("identity", "set identity.secret or identity.secret_env: no secret was generated for this policy")
		}
		p.Secret = bytes.Clone(env.Secret)
		p.SecretGenerated = true
	}
	if id.UserHeader != "" && !headerPattern.MatchString(id.UserHeader) {
		c.addf("identity.user_header", "not a header name: %q", id.UserHeader)
	}
	p.UserHeader = id.UserHeader
	p.MaxCredentialBody = int64(id.MaxBody)
	switch {
	case id.MaxBody == 0:
		p.MaxCredentialBody = DefaultMaxCredentialBody
	case id.MaxBody < 1<<10 || id.MaxBody > 64<<20:
		c.addf("identity.max_body", "want 1KiB to 64MiB, got %v", id.MaxBody)
	}
	p.CredentialFields = identity.DefaultFields
	if id.CredentialFields != nil {
		p.CredentialFields = identity.Fields(id.CredentialFields)
	}
	for i, f := range id.CredentialFields {
		if !fieldPattern.MatchString(f) {
			c.addf(fmt.Sprintf("identity.credential_fields[%d]", i), "want a field name of 1-64 letters, digits, '_', '-' and '.', got %q", f)
		}
	}
	for i, s := range id.TrustedProxies {
		pre, err := parsePrefix(s)
		if err != nil {
			c.addf(fmt.Sprintf("identity.trusted_proxies[%d]", i), "%v", err)
			continue
		}
		p.TrustedProxies = append(p.TrustedProxies, pre)
	}
	if len(p.TrustedProxies) == len(id.TrustedProxies) {
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
