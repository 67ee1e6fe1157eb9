package httplimit

import (
	"context"
	"fmt"
)

// ResetKey forgets what the API key id has spent (see
// engine.Engine.ResetSubject): the budgets of the subject it is charged
// as (its user's, when it names one), in its tenant's group. It returns
// the subject's pseudonym and how many budgets it reset.
func (f *Front) ResetKey(ctx context.Context, id string) (string, int, error) {
	m := f.base
	for _, k := range m.opts.Policy.Keys {
		if k.ID != id {
			continue
		}
		subject, tenant := m.engine.KeySubject(k)
		n, err := m.engine.ResetSubject(ctx, subject, tenant)
		return subject, n, err
	}
	return "", 0, fmt.Errorf("resetting key %q: no such key", id)
}

// ResetSubject forgets what the subject with this pseudonym (as logs and
// the dashboard show it) has spent; tenant, if set, is the name of its
// tenant, whose group its plan limits are kept in.
func (f *Front) ResetSubject(ctx context.Context, subject, tenant string) (int, error) {
	if tenant != "" {
		tenant = f.base.engine.Pseudonym("t", tenant)
	}
	return f.base.engine.ResetSubject(ctx, subject, tenant)
}
