package policy_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// TestShapingBounds: a shaping limit holds each delayed request (its
// goroutine and connection) for up to max_delay, and a subject can have up
// to max_delay × rate / period of them waiting; both are bounded.
func TestShapingBounds(t *testing.T) {
	cases := []struct {
		limit string
		want  string // "" when accepted
	}{
		{"{algorithm: leaky_bucket, rate: 10, period: 1s, burst: 10, max_delay: 2s}", ""},
		{"{algorithm: leaky_bucket, rate: 10, period: 1s, burst: 10, max_delay: 30s}", ""},
		{"{algorithm: leaky_bucket, rate: 100, period: 1s, burst: 10, max_delay: 10s}", ""},
		{"{algorithm: leaky_bucket, rate: 1, period: 1h, burst: 10, max_delay: 30s}", ""},
		{"{algorithm: leaky_bucket, rate: 1, period: 1s, burst: 10, max_delay: 31s}", "max_delay 31s is longer than 30s"},
		{"{algorithm: leaky_bucket, rate: 1, period: 1h, burst: 10, max_delay: 1h}", "max_delay 1h0m0s is longer than 30s"},
		{"{algorithm: leaky_bucket, rate: 1, period: 1m, burst: 10, max_delay: 8760h}", "max_delay 8760h0m0s is longer than 30s"},
		{"{algorithm: leaky_bucket, rate: 1001, period: 1s, burst: 10, max_delay: 1s}", "lets 1001 requests wait at once under one budget (at most 1000)"},
		{"{algorithm: leaky_bucket, rate: 1000, period: 1s, burst: 10, max_delay: 2s}", "lets 2000 requests"},
	}
	for _, c := range cases {
		for _, where := range []struct{ edit, with string }{
			{"  free: {rate: 100, period: 1m}", "  free: " + c.limit},
			{"limit: {algorithm: sliding_log, rate: 5, period: 1m}", "limit: " + c.limit},
			{"cost: 10}", "cost: 10, global: " + c.limit + "}"},
		} {
			src := strings.Replace(valid, where.edit, where.with, 1)
			_, err := policy.Parse([]byte(src), "p.yaml")
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s refused: %v", where.with, err)
			case c.want != "" && err == nil:
				t.Errorf("%s accepted", where.with)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Errorf("%s: error lacks %q:\n%v", where.with, c.want, err)
			}
		}
	}
}

// TestLeaseTTLBound: a slot whose release is lost (a gateway that crashed,
// a store call that failed) stays taken until its lease expires.
func TestLeaseTTLBound(t *testing.T) {
	for ttl, want := range map[string]string{"1h": "", "90s": "", "61m": "at most 1h0m0s", "8760h": "at most 1h0m0s"} {
		src := strings.Replace(valid, "cost: 10}", "cost: 10, concurrency: {limit: 2, lease_ttl: "+ttl+"}}", 1)
		_, err := policy.Parse([]byte(src), "p.yaml")
		switch {
		case want == "" && err != nil:
			t.Errorf("lease_ttl %s refused: %v", ttl, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "routes[0].concurrency.lease_ttl")):
			t.Errorf("lease_ttl %s: %v, want %q", ttl, err, want)
		}
	}
}
