package envoyrls_test

import (
	"math"
	"testing"

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
