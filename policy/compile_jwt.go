package policy

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"
)

// JWT algorithms: what identity.jwt.algorithms may list.
var (
	jwtAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
		"ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}
	defaultJWTAlgorithms = []string{"RS256", "ES256", "EdDSA"}
)

// MaxClockSkew bounds identity.jwt.clock_skew.
const MaxClockSkew = 5 * time.Minute

// jwt compiles identity.jwt; it runs after the plans.
func (c *compiler) jwt(p *Policy, f *File, env Env) {
	s := f.Identity.JWT
	if s == nil {
		return
	}
	const path = "identity.jwt"
	j := &JWT{
		JWKSURL:            s.JWKSURL,
		Issuer:             s.Issuer,
		Audience:           s.Audience,
		ClockSkew:          orDefault(s.ClockSkew, 30*time.Second),
		SubjectClaim:       orDefault(s.SubjectClaim, "sub"),
		TenantClaim:        s.TenantClaim,
		PlanClaim:          s.PlanClaim,
		RefreshInterval:    orDefault(s.RefreshInterval, 15*time.Minute),
		MinRefreshInterval: orDefault(s.MinRefreshInterval, 30*time.Second),
	}
	symmetric, asymmetric := c.jwtAlgorithms(j, s, path)
	c.jwtHMACSecret(j, s, path, env, symmetric)
	c.jwtJWKS(s, path, asymmetric)
	c.jwtTimes(j, s, path)
	c.jwtClaims(j, s, path)
	j.DefaultPlan = c.planRef(p, f, path+".default_plan", s.DefaultPlan)
	if s.DefaultPlan == "" {
		j.DefaultPlan = p.UserPlan
	}
	p.JWT = j
}

// jwtAlgorithms compiles the algorithms accepted, and reports whether
// any is symmetric (HS*) and any asymmetric.
func (c *compiler) jwtAlgorithms(j *JWT, s *JWTSpec, path string) (symmetric, asymmetric bool) {
	algs := s.Algorithms
	if len(algs) == 0 {
		algs = defaultJWTAlgorithms
	}
	for i, a := range algs {
		if !c.jwtAlgorithm(fmt.Sprintf("%s.algorithms[%d]", path, i), a, j.Algorithms) {
			continue
		}
		j.Algorithms = append(j.Algorithms, a)
	}
	symmetric = slices.ContainsFunc(j.Algorithms, Symmetric)
	asymmetric = slices.ContainsFunc(j.Algorithms, func(a string) bool { return !Symmetric(a) })
	return symmetric, asymmetric
}

// jwtAlgorithm reports whether the algorithm a, listed at ap after those
// accepted, is accepted too: not none, known, and not listed twice.
func (c *compiler) jwtAlgorithm(ap, a string, accepted []string) bool {
	switch {
	case a == "none" || a == "None" || a == "NONE":
		c.addf(ap, "unsigned tokens (alg none) are never accepted")
	case !slices.Contains(jwtAlgorithms, a):
		c.addf(ap, "unknown algorithm %q (want one of %v)", a, jwtAlgorithms)
	case slices.Contains(accepted, a):
		c.addf(ap, "%s is listed twice", a)
	default:
		return true
	}
	return false
}

// jwtHMACSecret compiles the secret of the HS* algorithms, read from
// the environment variable hmac_secret_env, which only they take.
func (c *compiler) jwtHMACSecret(j *JWT, s *JWTSpec, path string, env Env, symmetric bool) {
	switch {
	case symmetric && s.HMACSecretEnv == "":
		c.addf(path+".hmac_secret_env", "an HS* algorithm needs hmac_secret_env, the environment variable holding its secret")
	case !symmetric && s.HMACSecretEnv != "":
		c.addf(path+".hmac_secret_env", "set only with an HS* algorithm listed in algorithms")
	case symmetric:
		if v := env.lookup(s.HMACSecretEnv); len(v) < 32 {
			c.addf(path+".hmac_secret_env", "environment variable %s must hold at least 32 bytes", s.HMACSecretEnv)
		} else {
			j.HMACSecret = []byte(v)
		}
	}
}

// jwtJWKS checks the JWKS URL, which the asymmetric algorithms need and
// only they take.
func (c *compiler) jwtJWKS(s *JWTSpec, path string, asymmetric bool) {
	switch {
	case asymmetric && s.JWKSURL == "":
		c.addf(path+".jwks_url", "name the JWKS URL the signing keys are published at")
	case !asymmetric && s.JWKSURL != "":
		c.addf(path+".jwks_url", "no algorithm listed verifies with a JWKS")
	case s.JWKSURL != "":
		c.addErr(path+".jwks_url", checkJWKSURL(s.JWKSURL))
	}
}

// jwtTimes checks the clock skew and the JWKS refresh intervals.
func (c *compiler) jwtTimes(j *JWT, s *JWTSpec, path string) {
	c.rejectIf(s.ClockSkew < 0 || s.ClockSkew > MaxClockSkew, path+".clock_skew", "want 0 (the default, 30s) to %v, got %v", MaxClockSkew, s.ClockSkew)
	c.rejectIf(j.RefreshInterval < time.Minute || j.RefreshInterval > 24*time.Hour, path+".refresh_interval", "want 1m to 24h, got %v", j.RefreshInterval)
	c.rejectIf(j.MinRefreshInterval < time.Second || j.MinRefreshInterval > j.RefreshInterval, path+".min_refresh_interval", "want 1s to refresh_interval (%v), got %v", j.RefreshInterval, j.MinRefreshInterval)
}

// jwtClaims checks the audiences and the claims that name an identity.
func (c *compiler) jwtClaims(j *JWT, s *JWTSpec, path string) {
	for i, a := range s.Audience {
		c.rejectIf(a == "", fmt.Sprintf("%s.audience[%d]", path, i), "an audience is not empty")
	}
	claims := map[string]string{}
	for _, cl := range []struct{ field, name string }{
		{"subject_claim", j.SubjectClaim}, {"tenant_claim", j.TenantClaim}, {"plan_claim", j.PlanClaim},
	} {
		if cl.name != "" {
			c.identityClaim(path+"."+cl.field, cl.field, cl.name, claims)
		}
	}
}

// identityClaim checks the claim name that the field at path says names
// an identity: a claim name, not a registered claim, and not the claim
// of another field (claims maps those seen to their fields).
func (c *compiler) identityClaim(path, field, name string, claims map[string]string) {
	if !claimPattern.MatchString(name) {
		c.addf(path, "a claim name is 1-128 visible ASCII characters, got %q", name)
	} else if reserved[name] {
		c.addf(path, "%q is a registered claim (iss, aud, exp, nbf, iat, jti), not an identity", name)
	} else if other, dup := claims[name]; dup {
		c.addf(path, "claim %q is already the %s", name, other)
	}
	claims[name] = field
}

var reserved = map[string]bool{"iss": true, "aud": true, "exp": true, "nbf": true, "iat": true, "jti": true}

// checkJWKSURL accepts https URLs, and http ones to a loopback host.
func checkJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("want an https URL, got %q", s)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if loopbackURL(u) {
			return nil
		}
		return fmt.Errorf("keys fetched over plain http could be replaced on the way: want https (http only to a loopback host), got %q", s)
	}
	return fmt.Errorf("want an https URL, got %q", s)
}

// loopbackURL reports whether u's host is localhost or a loopback
// address.
func loopbackURL(u *url.URL) bool {
	h := u.Hostname()
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}
