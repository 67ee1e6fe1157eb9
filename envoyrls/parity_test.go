package envoyrls_test

import (
	"fmt"
	"math"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/envoyrls"
)

// TestNearLimitThresholdAsEnvoys: the near_limit threshold is
// envoyproxy/ratelimit's floor(limit × NEAR_LIMIT_RATIO) computed in
// single precision, its ratio being a float32: with a ratio of 0.7 and a
// limit of 90 that is 63 (in double precision, 62.99… and so 62), so the
// 90 hits of a window count 27 near_limit there, and must here.
func TestNearLimitThresholdAsEnvoys(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{
		server: envoyrls.Options{NearLimitRatio: 0.7},
		files: map[string]string{"near.yaml": `domain: near
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 90
`},
	})
	for i := 0; i < 90; i++ {
		f.ask(t, "near", 1, desc("k", "v"))
	}
	if got := f.counter(f.metrics.NearLimit, "near", "k", "", "k"); got != 27 {
		t.Fatalf("near_limit %d after 90 hits of 90 at ratio 0.7, want 27 (past envoyproxy/ratelimit's threshold 63)", got)
	}
	if got := f.counter(f.metrics.WithinLimit, "near", "k", "", "k"); got != 90 {
		t.Fatalf("within_limit %d, want 90", got)
	}
}

// TestReplacedUnlimited: an unlimited descriptor is answered as
// unlimited (OK, limit_remaining 4294967295) even when another of the
// request's limits replaces its name, as envoyproxy/ratelimit answers it:
// there a limit is replaced only when it is to be checked, and an
// unlimited one never is.
func TestReplacedUnlimited(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{"r.yaml": `domain: r
descriptors:
  - key: free
    rate_limit:
      unlimited: true
      name: free_limit
  - key: bar
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: free_limit
`}})
	expect(t, "replaced unlimited", f.ask(t, "r", 1, desc("free", "x"), desc("bar", "y")), ok,
		status{ok, 0, math.MaxUint32, 0}, status{ok, 3, 2, 50})
}

// TestOwnHitsDecideEachDescriptor: every limited descriptor is OVER_LIMIT
// when its own hits do not fit what it has left, as envoyproxy/ratelimit
// answers each from its own count, also when the request is refused for
// another reason first: a descriptor of requests_per_unit 0, or hits past
// another's whole limit (which make the store call a query of cost 0),
// or an enforced descriptor refusing beside a shadow one (whose hits are
// then not charged). The attack: key2 used up answered OK beside them,
// and a shadow descriptor's hits past its limit counted within_limit.
func TestOwnHitsDecideEachDescriptor(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		f := newFixture(t, kind, fixtureOptions{})
		expect(t, "use up key2", f.ask(t, "another", 20, desc("key2", "h")), ok, status{ok, 20, 0, 50})
		expect(t, "beside hits past key3's limit", f.ask(t, "another", 1, desc("key2", "h"), withHits(desc("key3", "h"), 11)), over,
			status{over, 20, 0, 50}, status{over, 10, 0, 3590})
		expect(t, "beside zero per unit", f.ask(t, "another", 1, desc("nothing", "h"), desc("key2", "h")), over,
			status{over, 0, 0, 1}, status{over, 20, 0, 50})
		if got := f.counter(f.metrics.OverLimit, "another", "key2", "", "key2"); got != 2 {
			t.Fatalf("key2 over_limit %d, want 2", got)
		}
		if got := f.counter(f.metrics.WithinLimit, "another", "key2", "", "key2"); got != 20 {
			t.Fatalf("key2 within_limit %d, want 20", got)
		}
		// Room for 1 of key3's 10 hours: 2 hits are over it, beside a
		// zero descriptor as alone.
		expect(t, "key3 to 9", f.ask(t, "another", 9, desc("key3", "z")), ok, status{ok, 10, 1, 3590})
		expect(t, "2 of 1 left", f.ask(t, "another", 2, desc("nothing", "z"), desc("key3", "z")), over,
			status{over, 0, 0, 1}, status{over, 10, 0, 3590})
		expect(t, "1 of 1 left", f.ask(t, "another", 1, desc("nothing", "z"), desc("key3", "z")), over,
			status{over, 0, 0, 1}, status{ok, 10, 1, 3590})

		// Shadow: tried used up, then asked beside enforced refusing.
		f.ask(t, "shadow", 1, desc("tried", "s"))
		f.ask(t, "shadow", 1, desc("tried", "s"))
		for i := 0; i < 3; i++ {
			f.ask(t, "shadow", 1, desc("enforced", "t"))
		}
		expect(t, "shadow over beside a refusal", f.ask(t, "shadow", 1, desc("tried", "s"), desc("enforced", "t")), over,
			status{ok, 2, 0, 50}, status{over, 3, 0, 50})
		for name, want := range map[string]int{"within_limit": 2, "over_limit": 1, "shadow_mode": 1} {
			vec := map[string]*prometheus.CounterVec{"within_limit": f.metrics.WithinLimit, "over_limit": f.metrics.OverLimit, "shadow_mode": f.metrics.ShadowMode}[name]
			if got := f.counter(vec, "shadow", "tried", "", "tried"); got != want {
				t.Fatalf("shadow descriptor %s %d, want %d", name, got, want)
			}
		}
	})
}

// TestIETFHeadersLeaveShadowOut: RateLimit-Policy and RateLimit are
// written as the gateway writes them, of the limits enforced: a
// shadow_mode descriptor, which refuses nothing, is not advertised, and
// its would-be refusal is not reported to a client it admits as r=0 (the
// attack: a client told to wait out a limit it is not held to). The
// LIMIT_RESPONSE_HEADERS_ENABLED headers report it as
// envoyproxy/ratelimit does.
func TestIETFHeadersLeaveShadowOut(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{server: envoyrls.Options{Headers: true, IETFHeaders: true}})
	f.ask(t, "shadow", 1, desc("tried", "s"))
	f.ask(t, "shadow", 1, desc("tried", "s"))
	headers := func(resp *rlspb.RateLimitResponse) map[string]string {
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		return got
	}
	resp := f.ask(t, "shadow", 1, desc("tried", "s"), desc("enforced", "t"))
	expect(t, "shadow over", resp, ok, status{ok, 2, 0, 50}, status{ok, 3, 2, 50})
	got := headers(resp)
	want := map[string]string{
		"RateLimit-Policy": `"shadow.enforced";q=3;w=60`,
		"RateLimit":        `"shadow.enforced";r=2;t=50`,
		"RateLimit-Limit":  "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "50",
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("header %s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// Shadow descriptors alone: no IETF fields (no limit is enforced).
	got = headers(f.ask(t, "shadow", 1, desc("tried", "s")))
	if _, ok := got["RateLimit"]; ok || got["RateLimit-Policy"] != "" || got["RateLimit-Remaining"] != "0" {
		t.Fatalf("shadow alone: %v", got)
	}
}

// TestDetailedMetricEmptyValue: with detailed_metric (and no
// share_threshold on the path), envoyproxy/ratelimit names a level
// key_value whatever the value, so an empty one is "key_": the same
// descriptor must count under the same name here.
func TestDetailedMetricEmptyValue(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{"d.yaml": `domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
`}})
	f.ask(t, "d", 1, desc("user", ""))
	f.ask(t, "d", 1, desc("user", "u"))
	if got := f.counter(f.metrics.TotalHits, "d", "user_", "", "user_"); got != 1 {
		t.Fatalf("total_hits of d.user_ %d, want 1", got)
	}
	if got := f.counter(f.metrics.TotalHits, "d", "user_u", "", "user_u"); got != 1 {
		t.Fatalf("total_hits of d.user_u %d, want 1", got)
	}
}

// TestDomainNotFoundPerDescriptor: envoyproxy/ratelimit looks each
// descriptor up, and counts domain_not_found once per descriptor of a
// request for an unknown domain; so must the same statistic here.
func TestDomainNotFoundPerDescriptor(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{})
	expect(t, "three", f.ask(t, "nowhere", 1, desc("a", "1"), desc("b", "2"), desc("c", "3")), ok,
		status{ok, 0, 0, 0}, status{ok, 0, 0, 0}, status{ok, 0, 0, 0})
	if got := int(testutilDomainNotFound(f, "nowhere")); got != 3 {
		t.Fatalf("domain_not_found %d after a request of 3 descriptors, want 3", got)
	}
}

// TestDomainNotFoundBounded: a caller naming a new domain each time makes
// no new series past the first hundred; the rest count as "_other".
func TestDomainNotFoundBounded(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{})
	for i := range 150 {
		f.ask(t, fmt.Sprintf("nowhere-%d", i), 1, desc("a", "1"))
	}
	if n := testutil.CollectAndCount(f.metrics.DomainNotFound); n != 101 {
		t.Fatalf("%d domain_not_found series after 150 unknown domains, want 101", n)
	}
	if got := int(testutilDomainNotFound(f, "_other")); got != 50 {
		t.Fatalf("_other counted %d, want 50", got)
	}
}
