package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// TestDurationsInDays: wherever the file takes a duration, days are
// accepted ("1d", "7d", "1d12h", quoted or not, several on one line);
// a name that looks like one ("7d") is left alone; a bad duration is
// still reported at its line.
func TestDurationsInDays(t *testing.T) {
	src := strings.Replace(valid, "  pro: {algorithm: token_bucket, rate: 1000, period: 1m, burst: 200}",
		`  pro: {algorithm: token_bucket, rate: 1000, period: 7d, burst: 200}
  7d: {algorithm: sliding_window, rate: 50, period: "1d12h"}
  week:
    limits:
      - {name: 1d, algorithm: leaky_bucket, rate: 100, period: 1d, max_delay: 1s}
      - {name: 7d, rate: 1000, period: '7d'}`, 1)
	src = strings.Replace(src, "on_store_failure: fail_closed, limit:", "on_store_failure: fail_closed, login: {lock: 1d, max_lock: 2d, offence_memory: 30d}, limit:", 1)
	src = strings.Replace(src, "routes:", "upstream: {timeout: 1d}\nroutes:", 1)
	src = strings.Replace(src, "algorithm: sliding_window", "algorithm: sliding_counter", 1)
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	day := 24 * time.Hour
	for _, c := range []struct {
		got, want time.Duration
	}{
		{p.Plans["pro"].Limits[0].Limit.Period, 7 * day},
		{p.Plans["7d"].Limits[0].Limit.Period, 36 * time.Hour},
		{p.Plans["week"].Limits[0].Limit.Period, day},
		{p.Plans["week"].Limits[1].Limit.Period, 7 * day},
		{p.Routes[2].Login.Rule.Lock, day},
		{p.Routes[2].Login.Rule.MaxLock, 2 * day},
		{p.Routes[2].Login.Rule.Memory, 30 * day},
		{p.UpstreamTimeout, day},
	} {
		if c.got != c.want {
			t.Errorf("got %v, want %v", c.got, c.want)
		}
	}
	if p.Plans["week"].Limits[0].Name != "week.1d" || p.Plans["week"].Limits[1].Name != "week.7d" {
		t.Errorf("limit names were rewritten: %q %q", p.Plans["week"].Limits[0].Name, p.Plans["week"].Limits[1].Name)
	}
	for _, bad := range []string{"1.5d", "d", "1d-1h", "1 d", "99999999999d"} {
		src := strings.Replace(valid, "period: 1m}\n  pro", "period: "+bad+"}\n  pro", 1)
		if _, err := policy.Parse([]byte(src), "p.yaml"); err == nil || !strings.Contains(err.Error(), "p.yaml:7:") || !strings.Contains(err.Error(), "duration") {
			t.Errorf("period %q: %v", bad, err)
		}
	}
	for s, want := range map[string]time.Duration{"7d": 7 * day, "1d12h": 36 * time.Hour, "90s": 90 * time.Second, "0d": 0} {
		if d, err := policy.ParseDuration(s); err != nil || d != want {
			t.Errorf("ParseDuration(%q) = %v, %v", s, d, err)
		}
	}
}
