package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestTaggedSubjectKeepsItsOwnState: a user's budget in a tenant's group
// ({Policy "P", Subject "q", Tag "u"}) and another subject's budget under
// a policy whose name holds the user ({Policy "P:q", Subject "u"}) are two
// budgets: spending one leaves the other whole.
func TestTaggedSubjectKeepsItsOwnState(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	l := algo.Limit{Rate: 3, Period: time.Hour}
	now := time.UnixMilli(1_800_000_000_000)
	user := algo.Request{Policy: "P", Subject: "q", Tag: "u", Limit: l, Cost: 3, Now: now}
	other := algo.Request{Policy: "P:q", Subject: "u", Limit: l, Cost: 1, Now: now}
	if d, err := s.Allow(ctx, user); err != nil || !d.Allowed {
		t.Fatalf("the user's first request: %+v, %v", d, err)
	}
	if d, err := s.Allow(ctx, other); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("the other subject after the user spent everything: %+v, %v, want 2 left of 3", d, err)
	}
}
