package policy

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// tenants compiles the tenants' plan overrides.
func (c *compiler) tenants(p *Policy, f *File) {
	p.TenantPlans = map[string]*Plan{}
	for t, ts := range f.Tenants {
		if err := CheckName("tenant", t); err != nil {
			c.addf("tenants", "%v", err)
			continue
		}
		if pl := c.planRef(p, f, "tenants."+t+".plan", ts.Plan); pl != nil {
			p.TenantPlans[t] = pl
		} else if ts.Plan == "" {
			c.addf("tenants."+t, "name the tenant's plan")
		}
	}
}

// invalidKey compiles the per-IP limit on invalid API keys.
func (c *compiler) invalidKey(p *Policy, s *LimitSpec) {
	ik := LimitSpec{Algorithm: "fixed_window", Rate: 10, Period: time.Minute}
	if s != nil {
		ik = *s
		c.rejectIf(ik.Shadow, "invalid_key_limit.shadow", "the invalid-key limit is a guard, always enforced: it cannot be in shadow")
	}
	if l, ok := c.limit("invalid_key_limit", ik); ok {
		p.InvalidKey = newBudget("invalid_key", invalidKeyID(), l, false)
	}
}

// compileKeys compiles the API keys, listed in file (whose line map is
// lines): each gets its own plan, or its tenant's override.
func (c *compiler) compileKeys(p *Policy, keys []KeySpec, lines map[string]int, file string) {
	ids := map[string]bool{}
	for i, k := range keys {
		path := fmt.Sprintf("api_keys[%d]", i)
		switch {
		case c.required(lines, file, path+".id", k.ID):
		case !namePattern.MatchString(k.ID):
			c.add(lines, file, path+".id", "key ids are 1-64 letters, digits, '.', '_' or '-' (got %q)", k.ID)
		case ids[k.ID]:
			c.add(lines, file, path+".id", "key id %q is already used", k.ID)
		}
		ids[k.ID] = true
		switch {
		case c.required(lines, file, path+".digest", k.Digest):
		case !digestPattern.MatchString(k.Digest):
			c.add(lines, file, path+".digest", `want "sha256:" and 64 lower-case hex digits (echo KEY | tollgate hash-key prints it); never the key itself`)
		case p.Keys[k.Digest] != nil:
			c.add(lines, file, path+".digest", "the same key is listed twice")
		}
		if err := checkKeyNames(k); err != nil {
			c.add(lines, file, path, "%v", err)
		}
		pl, ok := p.Plans[k.Plan]
		if c.required(lines, file, path+".plan", k.Plan) {
			continue
		}
		if !ok {
			c.add(lines, file, path+".plan", "no plan named %q (the plans are %s)", k.Plan, planNames(p.Plans))
			continue
		}
		p.Keys[k.Digest] = &APIKey{ID: k.ID, Tenant: k.Tenant, User: k.User, Plan: planInForce(pl, k.Tenant, p.TenantPlans), OwnPlan: pl}
	}
}

// checkKeyNames reports what is wrong with a key's tenant and user, which
// the file's keys and the admin API's (Policy.Override) both pass.
func checkKeyNames(k KeySpec) error {
	if k.Tenant != "" {
		if err := CheckName("tenant", k.Tenant); err != nil {
			return err
		}
	}
	if k.User != "" {
		return CheckName("user", k.User)
	}
	return nil
}

// maxNameBytes is the longest tenant or user name.
const maxNameBytes = 128

// CheckName reports what is wrong with a tenant's or user's name (kind
// says which), however it came (a policy file, the admin API, a state
// file): one of 1 to 128 bytes of UTF-8 without control characters
// (NUL, newlines), so that it reads back the same from logs, the state
// file and the dashboard.
func CheckName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a %s name is empty", kind)
	case len(name) > maxNameBytes:
		return fmt.Errorf("a %s name is at most %d bytes (got %d)", kind, maxNameBytes, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("a %s name is UTF-8", kind)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("a %s name holds no control characters", kind)
	}
	return nil
}

// allowlist compiles the allowlist; it runs after the keys.
func (c *compiler) allowlist(p *Policy, s *AllowlistSpec) {
	if s == nil {
		return
	}
	l := &Allowlist{Keys: map[string]bool{}, Users: map[string]bool{}, Tenants: map[string]bool{}}
	ids := map[string]bool{}
	for _, k := range p.Keys {
		ids[k.ID] = true
	}
	for i, id := range s.Keys {
		c.rejectIf(!ids[id], fmt.Sprintf("allowlist.keys[%d]", i), "no API key with id %q", id)
		l.Keys[id] = true
	}
	for _, f := range []struct {
		field string
		ids   []string
		set   map[string]bool
	}{{"users", s.Users, l.Users}, {"tenants", s.Tenants, l.Tenants}} {
		for i, id := range f.ids {
			c.rejectIf(id == "" || len(id) > 128, fmt.Sprintf("allowlist.%s[%d]", f.field, i), "1 to 128 bytes, got %d", len(id))
			f.set[id] = true
		}
	}
	l.Addresses = c.prefixes("allowlist.addresses", s.Addresses)
	p.Allowlist = l
}
