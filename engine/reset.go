package engine

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/policy"
)

// ResetSubject forgets what subject (a pseudonym) has spent of every
// budget that counts per subject: each plan's limits (in tenant's group
// when the plan has a tenant budget and tenant, a pseudonym, is set),
// route limits and candidates, and, for a client address, the invalid-key
// and login failure budgets and its invalid-key penalty. Shared budgets
// (a tenant's, a route's global) are left alone. It returns how many
// budgets it reset.
func (e *Engine) ResetSubject(ctx context.Context, subject, tenant string) (int, error) {
	if e.policy == nil {
		return 0, fmt.Errorf("resetting %s: the engine has no policy", subject)
	}
	var reqs []tollgate.Request
	for role, b := range e.policy.Budgets() {
		switch role {
		case policy.RolePlan:
			reqs = append(reqs, b.Request(subject, "", 0))
			if tenant != "" {
				reqs = append(reqs, b.Request(subject, tenant, 0))
			}
		case policy.RoleRoute, policy.RoleCandidate, policy.RoleInvalidKey, policy.RoleLoginIP:
			reqs = append(reqs, b.Request(subject, "", 0))
		}
	}
	if err := e.store.Reset(ctx, reqs); err != nil {
		return 0, fmt.Errorf("resetting %s: %w", subject, err)
	}
	if e.deny != nil {
		for i := range reqs {
			e.deny.forget(&reqs[i])
		}
	}
	e.penalty.forget(subject)
	return len(reqs), nil
}
