package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// keyParts are policy suffixes, tags and subjects chosen to make keys
// built by joining parts with separators collide: separators and what
// escapes them, hash-tag braces, the prefix of hashed parts, and the names
// a store appends to keys.
var keyParts = []string{"", "q", "u", "q:u", "u:q", ":", "%", "%3A", "h:x", "{u}", "u}", "gcra", "q:gcra", "lock",
	"held", "q/u"}

// keyPolicySuffixes are appended to a test's policy name so that, with
// keyParts as subjects and tags, one request's policy holds another's
// subject or tag.
var keyPolicySuffixes = []string{"", ":q", ":q:u", "%3Aq", ":", "%", ":gcra", ":lock", ":q:lock", "/q"}

// keyTriple is one request's (policy, tag, subject) in testDistinctKeys.
type keyTriple struct{ policy, tag, subject string }

// keyPair is one request's (policy, subject) in testDistinctKeys, for the
// kinds of state that have no tag.
type keyPair struct{ policy, subject string }

// testDistinctKeys checks that distinct requests never share state,
// whatever their policies, tags and subjects hold: for every distinct
// (policy, tag, subject) — a Tag equal to the Subject being the same as no
// Tag — a limit of 1 admits one request and refuses the next, so a request
// whose state another's charge reached is refused at once. Held attempts,
// login-guard state and leases are checked the same way, after the rate
// state is in place, so that no kind of state shares another's either.
func testDistinctKeys(t *testing.T, s tollgate.Store) {
	p := policy(t)
	triples := distinctTriples(p)
	checkDistinctRates(t, s, triples)
	checkDistinctHolds(t, s, triples, p)
	// Login-guard state and leases have a policy and a subject: under the
	// rate state's names, each locks after one failure and takes one lease.
	pairs := distinctPairs(p)
	checkDistinctLockouts(t, s, pairs)
	checkDistinctLeases(t, s, pairs)
}

// distinctTriples returns every distinct (policy, tag, subject) made of
// policy p with keyPolicySuffixes and of keyParts, leaving out those
// whose tag is their subject (the same state as no tag).
func distinctTriples(p string) []keyTriple {
	var reqs []keyTriple
	for _, ps := range keyPolicySuffixes {
		for _, tag := range keyParts {
			for _, sub := range keyParts {
				if tag != "" && tag == sub {
					continue // the same state as no tag
				}
				reqs = append(reqs, keyTriple{p + ps, tag, sub})
			}
		}
	}
	return reqs
}

// distinctPairs returns every (policy, subject) made of policy p with
// keyPolicySuffixes and of keyParts.
func distinctPairs(p string) []keyPair {
	var pairs []keyPair
	for _, ps := range keyPolicySuffixes {
		for _, sub := range keyParts {
			pairs = append(pairs, keyPair{p + ps, sub})
		}
	}
	return pairs
}

// checkDistinctRates checks rate state on a limit of 1 per key: the
// second request of each is refused (which a store may also remember),
// the first is not, whatever came before.
func checkDistinctRates(t *testing.T, s tollgate.Store, reqs []keyTriple) {
	ctx := context.Background()
	l := algo.Limit{Rate: 1, Period: time.Hour}
	for _, r := range reqs {
		req := algo.Request{Name: r.policy, Tag: r.tag, Subject: r.subject, Limit: l, Cost: 1, Now: base}
		d, err := s.Allow(ctx, req)
		if !meets(d, err, allowed) {
			t.Fatalf("policy %q, tag %q, subject %q: first request %+v, %v: its state is another request's", r.policy, r.tag, r.subject, d, err)
		}
		if d, err := s.Allow(ctx, req); !meets(d, err, refused) {
			t.Fatalf("policy %q, tag %q, subject %q: second request %+v, %v", r.policy, r.tag, r.subject, d, err)
		}
	}
}

// checkDistinctHolds checks held attempts on a limit of 2 per key, under
// a new policy in place of p in reqs: one hold fits beside one charge, a
// second does not.
func checkDistinctHolds(t *testing.T, s tollgate.Store, reqs []keyTriple, p string) {
	ctx := context.Background()
	l := algo.Limit{Rate: 2, Period: time.Hour}
	p2 := policy(t)
	for _, r := range reqs {
		req := algo.Request{Name: p2 + r.policy[len(p):], Tag: r.tag, Subject: r.subject, Limit: l, Cost: 1, Now: base}
		if d, err := s.Allow(ctx, req); !meets(d, err, allowed, left(1)) {
			t.Fatalf("policy %q, tag %q, subject %q: charging %+v, %v: its state is another request's", req.Name, r.tag, r.subject, d, err)
		}
		if d, err := s.Reserve(ctx, req, algo.Hold{ID: "a", TTL: time.Hour}); !meets(d, err, allowed) {
			t.Fatalf("policy %q, tag %q, subject %q: first hold %+v, %v: its holds are another request's", req.Name, r.tag, r.subject, d, err)
		}
		if d, err := s.Reserve(ctx, req, algo.Hold{ID: "b", TTL: time.Hour}); !meets(d, err, refused) {
			t.Fatalf("policy %q, tag %q, subject %q: second hold %+v, %v", req.Name, r.tag, r.subject, d, err)
		}
	}
}

// checkDistinctLockouts checks that each account of pairs is unlocked
// before its first failure and locked after it, on a threshold of 1.
func checkDistinctLockouts(t *testing.T, g tollgate.Guard, pairs []keyPair) {
	ctx := context.Background()
	rule := algo.LockoutRule{Threshold: 1, Lock: time.Hour, MaxLock: time.Hour, Window: time.Hour, Memory: time.Hour}
	for _, r := range pairs {
		req := algo.LockoutRequest{Name: r.policy, Subject: r.subject, Rule: rule, Op: algo.LockCheck, Now: base}
		if res, err := g.Lockout(ctx, req); !meets(res, err, unlocked, level(0)) {
			t.Fatalf("policy %q, account %q: %+v, %v before any failure: its state is another account's", r.policy, r.subject, res, err)
		}
		req.Op = algo.LockFail
		if res, err := g.Lockout(ctx, req); !meets(res, err, locked) {
			t.Fatalf("policy %q, account %q: a failure left %+v, %v", r.policy, r.subject, res, err)
		}
	}
}

// checkDistinctLeases checks that each subject of pairs takes one lease
// and is refused a second, on a limit of 1.
func checkDistinctLeases(t *testing.T, ls tollgate.Leaser, pairs []keyPair) {
	ctx := context.Background()
	for i, r := range pairs {
		req := algo.LeaseRequest{Name: r.policy, Subject: r.subject, ID: fmt.Sprintf("lease-%d", i), Limit: 1, TTL: time.Hour, Now: base}
		if got, err := ls.Acquire(ctx, req); !meets(got, err, is(true)) {
			t.Fatalf("policy %q, subject %q: the first lease: %v, %v: its slots are another subject's", r.policy, r.subject, got, err)
		}
		req.ID += "-second"
		if got, err := ls.Acquire(ctx, req); !meets(got, err, is(false)) {
			t.Fatalf("policy %q, subject %q: a second lease: %v, %v", r.policy, r.subject, got, err)
		}
	}
}
