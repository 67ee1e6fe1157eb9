package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// jwtFile is the valid file with identity.jwt set to block (indented
// under jwt:).
func jwtFile(block string) string {
	return strings.Replace(valid, "  anonymous_plan: free\n", "  anonymous_plan: free\n  jwt:\n"+block, 1)
}

func TestJWTDefaults(t *testing.T) {
	p, err := policy.ParseEnv([]byte(jwtFile("    jwks_url: https://idp.example/.well-known/jwks.json\n    plan_claim: plan\n")), "p.yaml",
		policy.Env{Secret: []byte("0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	j := p.JWT
	if j == nil || strings.Join(j.Algorithms, ",") != "RS256,ES256,EdDSA" || j.ClockSkew != 30*time.Second ||
		j.SubjectClaim != "sub" || j.PlanClaim != "plan" || j.DefaultPlan != p.UserPlan ||
		j.RefreshInterval != 15*time.Minute || j.MinRefreshInterval != 30*time.Second || j.HMACSecret != nil {
		t.Fatalf("defaults: %+v", j)
	}
	p, err = policy.ParseEnv([]byte(jwtFile("    algorithms: [HS256]\n    hmac_secret_env: JWT_SECRET\n    default_plan: pro\n")), "p.yaml",
		policy.Env{Vars: map[string]string{"JWT_SECRET": strings.Repeat("s", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	if string(p.JWT.HMACSecret) != strings.Repeat("s", 32) || p.JWT.DefaultPlan != p.Plans["pro"] {
		t.Fatalf("HS256: %+v", p.JWT)
	}
}

func TestJWTInvalid(t *testing.T) {
	const url = "    jwks_url: https://idp.example/jwks\n"
	env := policy.Env{Vars: map[string]string{"SHORT": "short", "LONG": strings.Repeat("s", 32)}}
	for _, c := range []struct {
		name, block string
		want        []string
	}{
		{"unknown field", url + "    audiences: [api]\n", []string{"p.yaml:8:", `unknown field "audiences"`}},
		{"alg none", url + "    algorithms: [RS256, none]\n", []string{"identity.jwt.algorithms[1]", "never accepted"}},
		{"unknown alg", url + "    algorithms: [RS257]\n", []string{"identity.jwt.algorithms[0]", `unknown algorithm "RS257"`}},
		{"alg twice", url + "    algorithms: [RS256, RS256]\n", []string{"listed twice"}},
		{"HS256 without a secret", url + "    algorithms: [RS256, HS256]\n", []string{"identity.jwt.hmac_secret_env", "needs hmac_secret_env"}},
		{"a secret without HS", url + "    hmac_secret_env: LONG\n", []string{"identity.jwt.hmac_secret_env", "only with an HS"}},
		{"a short secret", "    algorithms: [HS256]\n    hmac_secret_env: SHORT\n", []string{"at least 32 bytes"}},
		{"an unset secret", "    algorithms: [HS512]\n    hmac_secret_env: NOPE\n", []string{"NOPE must hold"}},
		{"no JWKS", "    issuer: x\n", []string{"identity.jwt.jwks_url", "name the JWKS URL"}},
		{"a JWKS unused", url + "    algorithms: [HS256]\n    hmac_secret_env: LONG\n", []string{"no algorithm listed verifies with a JWKS"}},
		{"plain http", "    jwks_url: http://idp.example/jwks\n", []string{"want https (http only to a loopback host)"}},
		{"not a URL", "    jwks_url: idp.example\n", []string{"want an https URL"}},
		{"bad skew", url + "    clock_skew: 10m\n", []string{"identity.jwt.clock_skew", "to 5m0s, got 10m0s"}},
		{"negative skew", url + "    clock_skew: -1s\n", []string{"identity.jwt.clock_skew"}},
		{"bad duration", url + "    clock_skew: 30 seconds\n", []string{"p.yaml:8:", "duration"}},
		{"refresh too often", url + "    refresh_interval: 10s\n", []string{"identity.jwt.refresh_interval", "1m to 24h"}},
		{"min above max", url + "    min_refresh_interval: 1h\n", []string{"identity.jwt.min_refresh_interval"}},
		{"unknown default plan", url + "    default_plan: gold\n", []string{"identity.jwt.default_plan", `no plan named "gold"`}},
		{"one claim for two", url + "    tenant_claim: org\n    plan_claim: org\n", []string{"identity.jwt.plan_claim", `"org" is already the tenant_claim`}},
		{"subject from exp", url + "    subject_claim: exp\n", []string{"identity.jwt.subject_claim", "registered claim"}},
		{"a claim with a space", url + "    plan_claim: \"my plan\"\n", []string{"identity.jwt.plan_claim", "visible ASCII"}},
		{"an empty audience", url + "    audience: [\"\"]\n", []string{"identity.jwt.audience[0]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := policy.ParseEnv([]byte(jwtFile(c.block)), "p.yaml", env)
			if p != nil || err == nil {
				t.Fatalf("accepted:\n%s", jwtFile(c.block))
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
