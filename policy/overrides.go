package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Overrides are runtime changes laid over a policy file: API keys added or
// replaced (by id) or removed, and tenant plan overrides. They survive
// reloads of the file.
type Overrides struct {
	// Keys maps a key id to its replacement; a nil value removes the key.
	Keys map[string]*KeySpec `json:"keys"`
	// Tenants maps a tenant to the plan its keys get; "" removes the
	// override.
	Tenants map[string]string `json:"tenants"`
}

// With returns o with change laid over it: change's keys and tenants
// replace o's of the same names (a nil key or empty tenant plan stays a
// removal). o and change are unchanged.
func (o Overrides) With(change Overrides) Overrides {
	next := Overrides{Keys: make(map[string]*KeySpec, len(o.Keys)+len(change.Keys)), Tenants: make(map[string]string, len(o.Tenants)+len(change.Tenants))}
	for _, m := range []Overrides{o, change} {
		maps.Copy(next.Keys, m.Keys)
		maps.Copy(next.Tenants, m.Tenants)
	}
	return next
}

// Fitting returns the part of o that p can take (Override accepts it) and
// what it left out: every removal, and each key and tenant override that
// fits together with those before it (in the order of their names). For a
// gateway applying a fleet's overrides over a version that lacks
// something another gateway's version has (a plan): the rest, removals
// of keys above all, still applies.
func (o Overrides) Fitting(p *Policy) (Overrides, []error) {
	if _, err := p.Override(o); err == nil {
		return o, nil
	}
	fit := Overrides{Keys: map[string]*KeySpec{}, Tenants: map[string]string{}}
	var left []error
	for _, t := range slices.Sorted(maps.Keys(o.Tenants)) {
		fit.Tenants[t] = o.Tenants[t]
		if _, err := p.Override(Overrides{Tenants: fit.Tenants}); err != nil && o.Tenants[t] != "" {
			delete(fit.Tenants, t)
			left = append(left, err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(o.Keys)) {
		fit.Keys[id] = o.Keys[id]
		if _, err := p.Override(fit); err != nil && o.Keys[id] != nil {
			delete(fit.Keys, id)
			left = append(left, err)
		}
	}
	return fit, left
}

// Override returns a copy of p with o applied, or an error naming what in
// o does not fit p (an unknown plan, a malformed digest). p is unchanged.
func (p *Policy) Override(o Overrides) (*Policy, error) {
	q := *p
	var err error
	if q.TenantPlans, err = p.overrideTenants(o.Tenants); err != nil {
		return nil, err
	}
	if q.Keys, err = p.overrideKeys(o.Keys); err != nil {
		return nil, err
	}
	keysInForce(q.Keys, q.TenantPlans)
	return &q, nil
}

// overrideTenants returns p's tenant plans with the overrides laid over
// them ("" removes one).
func (p *Policy) overrideTenants(tenants map[string]string) (map[string]*Plan, error) {
	out := make(map[string]*Plan, len(p.TenantPlans)+len(tenants))
	maps.Copy(out, p.TenantPlans)
	for t, name := range tenants {
		if err := CheckName("tenant", t); err != nil {
			return nil, fmt.Errorf("overriding tenant %.64q: %w", t, err)
		}
		if name == "" {
			delete(out, t)
			continue
		}
		pl, ok := p.Plans[name]
		if !ok {
			return nil, fmt.Errorf("overriding tenant %q: no plan named %q", t, name)
		}
		out[t] = pl
	}
	return out, nil
}

// overrideKeys returns p's keys (by digest) with the keys overridden by
// id replaced or, for a nil spec, removed. Each key has its own plan.
func (p *Policy) overrideKeys(keys map[string]*KeySpec) (map[string]*APIKey, error) {
	out := make(map[string]*APIKey, len(p.Keys)+len(keys))
	for d, k := range p.Keys {
		if _, replaced := keys[k.ID]; !replaced {
			out[d] = k
		}
	}
	for id, ks := range keys {
		if ks == nil {
			continue
		}
		k, err := p.overrideKey(id, ks)
		if err != nil {
			return nil, fmt.Errorf("overriding key %q: %w", id, err)
		}
		if _, dup := out[ks.Digest]; dup {
			return nil, fmt.Errorf("overriding key %q: that key is already listed", id)
		}
		out[ks.Digest] = k
	}
	return out, nil
}

// overrideKey returns the key id that ks describes, or what is wrong
// with it.
func (p *Policy) overrideKey(id string, ks *KeySpec) (*APIKey, error) {
	if !namePattern.MatchString(id) || !digestPattern.MatchString(ks.Digest) {
		return nil, errors.New("want an id of letters, digits, '.', '_' or '-' and a sha256:<hex> digest")
	}
	if err := checkKeyNames(*ks); err != nil {
		return nil, err
	}
	pl, ok := p.Plans[ks.Plan]
	if !ok {
		return nil, fmt.Errorf("no plan named %q", ks.Plan)
	}
	return &APIKey{ID: id, Tenant: ks.Tenant, User: ks.User, Plan: pl, OwnPlan: pl}, nil
}

// keysInForce gives every key of keys the plan in force: its tenant's
// override, else its own. A key whose plan changes is copied, never
// changed in place (the policy it came from may be running).
func keysInForce(keys map[string]*APIKey, tenantPlans map[string]*Plan) {
	for d, k := range keys {
		if want := planInForce(k.OwnPlan, k.Tenant, tenantPlans); k.Plan != want {
			c := *k
			c.Plan = want
			keys[d] = &c
		}
	}
}

// planInForce returns the plan in force for a key whose own plan is own:
// its tenant's override, else own.
func planInForce(own *Plan, tenant string, tenantPlans map[string]*Plan) *Plan {
	if tp := tenantPlans[tenant]; tp != nil && tenant != "" {
		return tp
	}
	return own
}
