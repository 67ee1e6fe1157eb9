package policy

import (
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// Compile validates and compiles a policy written in Go as a File, as
// ParseEnv compiles one read from YAML: the same rules, the same
// [*ValidationError] (naming fields by their YAML paths), and environment
// variables and the generated secret from env alone. A File built in code
// lists its API keys in APIKeys; KeysFile is not read. Unlike a file,
// it may have no routes: the middleware then limits every request by the
// subject's plan at cost 1.
func Compile(f File, env Env) (*Policy, error) {
	c := &compiler{file: "(code)", lines: map[string]int{}, fromCode: true}
	if f.KeysFile != "" {
		c.addf("keys_file", "a policy compiled from code lists its keys in APIKeys")
		return nil, c.err()
	}
	p := c.compile(&f, env)
	c.compileKeys(p, f.APIKeys, c.lines, c.file)
	c.allowlist(p, f.Allowlist)
	if len(c.problems) > 0 {
		return nil, c.err()
	}
	p.Source = c.file
	p.Warnings = c.warnings
	return p, nil
}

// SpecOf returns the LimitSpec that compiles to l.
func SpecOf(l tollgate.Limit) LimitSpec {
	s := LimitSpec{Algorithm: l.Algorithm.String(), Rate: l.Rate, Period: l.Period, Burst: l.Burst, MaxDelay: l.MaxDelay}
	if l.Calendar != algo.NoCalendar {
		s.Calendar, s.Period = l.Calendar.String(), 0
		if l.Zone != nil {
			s.TimeZone = l.Zone.String()
		}
	}
	return s
}

// ForLimit returns a policy that applies l to every request, per client
// address (or per whatever subject the middleware's hook names): one
// plan, "default", whose one limit is l; no routes, no API keys, no
// trusted proxies, and a secret random per process. It is what package
// httplimit runs without a policy file.
func ForLimit(l tollgate.Limit) (*Policy, error) {
	return Compile(File{
		Version:   "code",
		Listeners: ListenerSpec{Public: "127.0.0.1:0"},
		Identity:  IdentitySpec{AnonymousPlan: "default", UserPlan: "default"},
		Plans:     map[string]PlanSpec{"default": {LimitSpec: SpecOf(l)}},
	}, ProcessEnv())
}
