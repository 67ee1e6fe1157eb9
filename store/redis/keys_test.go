package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	rstore "github.com/tollgate/tollgate/store/redis"
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
	user := algo.Request{Name: "P", Subject: "q", Tag: "u", Limit: l, Cost: 3, Now: now}
	other := algo.Request{Name: "P:q", Subject: "u", Limit: l, Cost: 1, Now: now}
	if d, err := s.Allow(ctx, user); err != nil || !d.Allowed {
		t.Fatalf("the user's first request: %+v, %v", d, err)
	}
	if d, err := s.Allow(ctx, other); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("the other subject after the user spent everything: %+v, %v, want 2 left of 3", d, err)
	}
}

// parsedKey is what a key says it holds, read by the documented layout
// alone: rl:v3:{<group>}:<policy>[:<subject>]:<kind>[:held] (a settled
// reservation's marker: its ID in the policy's place, kind settled).
type parsedKey struct {
	group, policy, subject, kind string
	held                         bool
}

var keyKinds = map[string]bool{"gcra": true, "tb": true, "lb": true, "fw": true, "slc": true, "sc": true, "lock": true, "lease": true, "settled": true}

// parseKey reads key back, or fails if it does not follow the layout.
func parseKey(key string) (parsedKey, error) {
	var k parsedKey
	rest, ok := strings.CutPrefix(key, rstore.KeyPrefix+"{")
	i := strings.IndexByte(rest, '}')
	if !ok || i < 1 || strings.Contains(rest[:i], "{") || !strings.HasPrefix(rest[i+1:], ":") {
		return k, fmt.Errorf("no hash tag: %q", key)
	}
	k.group = rest[:i]
	fields := strings.Split(rest[i+2:], ":")
	suffix := func(f []string) bool {
		switch len(f) {
		case 1:
			return keyKinds[f[0]]
		case 2:
			return keyKinds[f[0]] && f[0] != "lease" && f[0] != "settled" && f[1] == "held"
		}
		return false
	}
	var err error
	if k.policy, err = unescapePart(fields[0]); err != nil {
		return k, err
	}
	tail := fields[1:]
	if !suffix(tail) {
		if len(tail) < 2 || !suffix(tail[1:]) {
			return k, fmt.Errorf("no kind: %q", key)
		}
		if k.subject, err = unescapePart(tail[0]); err != nil {
			return k, err
		}
		tail = tail[1:]
	}
	k.kind, k.held = tail[0], len(tail) == 2
	return k, nil
}

// unescapePart undoes the escaping of '%' and ':', failing on any other
// use of '%' (which escaping never writes).
func unescapePart(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '%':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
			i += 2
		case strings.HasPrefix(s[i:], "%3A"):
			b.WriteByte(':')
			i += 2
		default:
			return "", fmt.Errorf("a stray %% in %q", s)
		}
	}
	return b.String(), nil
}

var algSuffix = []string{"gcra", "tb", "lb", "fw", "slc", "sc"}

// FuzzKeyLayout builds every kind of key the store writes from a policy,
// a tag and a subject, and reads each back by the documented layout
// alone: each key says exactly what it was built from (the group and the
// grouped subject as safeTag makes them), so no two inputs share a key, up
// to collisions of SHA-256 among hashed names. It also checks that safeTag
// keeps a name or marks it hashed, and that the group alone picks the
// Cluster slot.
func FuzzKeyLayout(f *testing.F) {
	for _, seed := range [][3]string{
		{"P", "u", "q"}, {"P:q", "", "u"}, {"P%3Aq", "", "u"}, {"", "", ""}, {":", ":", ":"}, {"%", "%", "%"},
		{"api", "", "user-42"}, {"p", "t", "h:x"}, {"p", "{u}", "a}b"}, {"p:gcra", "u", "lock"}, {"p", "u", "gcra:held"},
		{"p", "held", "lease"}, {"2025:plan:free", "tenant", "k_abc"}, {"x", "s", "s"},
		{strings.Repeat("n", 129), "t", "u"}, {"h:" + strings.Repeat("0", 32), "", "u"},
	} {
		f.Add(seed[0], seed[1], seed[2], uint8(0))
	}
	f.Fuzz(func(t *testing.T, policy, tag, subject string, alg uint8) {
		a := algo.Algorithm(alg % uint8(len(algSuffix)))
		req := algo.Request{Name: policy, Tag: tag, Subject: subject, Limit: algo.Limit{Algorithm: a}}
		for _, name := range []string{policy, tag, subject} {
			if st := rstore.SafeTag(name); st != name && (!strings.HasPrefix(st, "h:") || len(st) != 34) {
				t.Fatalf("SafeTag(%q) = %q: neither the name nor a hash", name, st)
			}
		}
		name := rstore.SafeName(policy)
		if name != policy && (!strings.HasPrefix(name, "h:") || len(name) != 34) || len(name) > 128 {
			t.Fatalf("SafeName(%q) = %q: neither the name nor a hash", policy, name)
		}
		grouped := ""
		if tag != "" && tag != subject {
			grouped = rstore.SafeTag(subject)
		}
		lock, lockHeld := rstore.LockKeys(policy, subject)
		for _, c := range []struct {
			key  string
			want parsedKey
		}{
			{rstore.KeyFor(req), parsedKey{rstore.SafeTag(req.Group()), name, grouped, algSuffix[a], false}},
			{rstore.HeldKey(req), parsedKey{rstore.SafeTag(req.Group()), name, grouped, algSuffix[a], true}},
			{lock, parsedKey{rstore.SafeTag(subject), name, "", "lock", false}},
			{lockHeld, parsedKey{rstore.SafeTag(subject), name, "", "lock", true}},
			{rstore.LeaseKey(policy, subject), parsedKey{rstore.SafeTag(subject), name, "", "lease", false}},
			{rstore.SettledKey(req.Group(), policy), parsedKey{rstore.SafeTag(req.Group()), name, "", "settled", false}},
		} {
			got, err := parseKey(c.key)
			if err != nil || got != c.want {
				t.Fatalf("key %q reads as %+v, %v; built from %+v", c.key, got, err, c.want)
			}
			if rstore.KeySlot(c.key) != rstore.KeySlot("{"+c.want.group+"}") {
				t.Fatalf("key %q is not in its group's slot", c.key)
			}
		}
	})
}

// TestKeysDistinct builds every kind of key from names made of separators,
// escapes and kind names, and checks that no two inputs share one.
func TestKeysDistinct(t *testing.T) {
	parts := []string{"", "p", "q", "u", ":", "%", "%3A", "%25", "p:q", "q:u", "h:x", "{u}", "gcra", "lock", "held",
		"lease", "settled", "q:gcra", "lock:held", "gcra:held", "q:settled",
		strings.Repeat("n", 128), strings.Repeat("n", 129), strings.Repeat("n", 128) + "m", "h:" + strings.Repeat("0", 32)}
	seen := map[string]string{}
	add := func(key, what string) {
		if prev, ok := seen[key]; ok && prev != what {
			t.Fatalf("%s and %s share the key %q", prev, what, key)
		}
		seen[key] = what
	}
	for _, p := range parts {
		for _, tag := range parts {
			for _, sub := range parts {
				tag := tag
				if tag == sub {
					tag = "" // the same state
				}
				for a := range algo.Algorithms() {
					req := algo.Request{Name: p, Tag: tag, Subject: sub, Limit: algo.Limit{Algorithm: algo.Algorithm(a)}}
					what := fmt.Sprintf("%v state of (%q, %q, %q)", req.Limit.Algorithm, p, tag, sub)
					add(rstore.KeyFor(req), what)
					add(rstore.HeldKey(req), "holds of "+what)
				}
			}
			lock, held := rstore.LockKeys(p, tag)
			add(lock, fmt.Sprintf("the guard state of (%q, %q)", p, tag))
			add(held, fmt.Sprintf("the guard's holds of (%q, %q)", p, tag))
			add(rstore.LeaseKey(p, tag), fmt.Sprintf("the leases of (%q, %q)", p, tag))
			add(rstore.SettledKey(tag, p), fmt.Sprintf("the marker of reservation %q of group %q", p, tag))
		}
	}
}
