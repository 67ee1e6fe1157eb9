package policy

import (
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"time"

	"github.com/tollgate/tollgate/overload"
)

// adaptive compiles route r's adaptive concurrency limit.
func (c *compiler) adaptive(p *Policy, path string, s *AdaptiveSpec, r *Route) *Adaptive {
	cfg := overload.Config{MinLimit: s.MinLimit, MaxLimit: s.MaxLimit, Window: s.SampleWindow,
		MinRTTInterval: s.MinRTTInterval, MinRTTSamples: s.MinRTTSamples}
	if cfg.MaxLimit == 0 {
		cfg.MaxLimit = max(1000, cfg.MinLimit)
	}
	cfg = cfg.WithDefaults()
	c.rejectIf(cfg.MinLimit < 1, path+".min_limit", "at least 1 request in flight, got %d", cfg.MinLimit)
	c.rejectIf(cfg.MaxLimit > 100_000, path+".max_limit", "at most 100000, got %d", cfg.MaxLimit)
	c.rejectIf(cfg.MinLimit > cfg.MaxLimit, path+".max_limit", "max_limit %d is less than min_limit %d", cfg.MaxLimit, cfg.MinLimit)
	c.rejectIf(outside(cfg.Window, 10*time.Millisecond, 10*time.Second), path+".sample_window", "want 10ms to 10s, got %v", cfg.Window)
	c.rejectIf(outside(cfg.MinRTTInterval, 10*cfg.Window, 24*time.Hour), path+".min_rtt_interval",
		"want 10 sample_windows (%v) to 24h, got %v", 10*cfg.Window, cfg.MinRTTInterval)
	c.rejectIf(outside(cfg.MinRTTSamples, 1, 10_000), path+".min_rtt_samples", "want 1 to 10000, got %d", cfg.MinRTTSamples)
	if b := s.RTTBuffer; b != nil {
		c.rejectIf(!(*b >= 0 && *b <= 1), path+".rtt_buffer", "want a fraction of the minimum latency from 0 to 1, got %v", *b)
		cfg.Buffer = *b
		if *b == 0 {
			cfg.Buffer = overload.NoBuffer
		}
	}
	a := &Adaptive{Upstream: adaptiveKey(r), Config: cfg, Shadow: s.Shadow}
	sum := 0.0
	for _, plan := range slices.Sorted(maps.Keys(s.Shares)) {
		share := s.Shares[plan]
		switch {
		case p.Plans[plan] == nil:
			c.addf(path+".shares."+plan, "no plan is named %q (plans: %v)", plan, slices.Sorted(maps.Keys(p.Plans)))
		case !(share > 0 && share <= 1):
			c.addf(path+".shares."+plan, "a share is a fraction of the limit, above 0 and at most 1, got %v", share)
		}
		sum += share
		a.Plans = append(a.Plans, plan)
		a.Config.Shares = append(a.Config.Shares, share)
	}
	c.rejectIf(sum > 1+1e-9, path+".shares", "the shares sum to %v: at most 1 (the whole limit) can be guaranteed", sum)
	return a
}

// adaptiveKey names the limit of r's upstream: its scheme and host, which
// routes to other paths of one server share.
func adaptiveKey(r *Route) string {
	if r.Upstream == "" {
		return "group:" + r.Group
	}
	if u, err := url.Parse(r.Upstream); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return r.Upstream // builtin:echo
}

// adaptiveShared checks that the routes sending to one upstream set one
// adaptive limit: the upstream is what it protects, so they share it, and
// warns of a route sending there without it (its requests are not
// counted).
func (c *compiler) adaptiveShared(p *Policy) {
	first := map[string]int{} // an upstream's first route with a limit
	for i, r := range p.Routes {
		if r.Adaptive == nil {
			continue
		}
		j, seen := first[r.Adaptive.Upstream]
		if !seen {
			first[r.Adaptive.Upstream] = i
			continue
		}
		if o := p.Routes[j].Adaptive; !reflect.DeepEqual(o, r.Adaptive) {
			c.addf(fmt.Sprintf("routes[%d].adaptive", i), "routes %s and %s send to %s, whose one adaptive limit they share: set the same adaptive block on both",
				p.Routes[j].Name, r.Name, r.Adaptive.Upstream)
		} else {
			r.Adaptive = o // one limit
		}
	}
	for i, r := range p.Routes {
		if r.Adaptive != nil || r.Upstream == "" {
			continue
		}
		if j, ok := first[adaptiveKey(r)]; ok {
			c.warnf(fmt.Sprintf("routes[%d]", i), "route %s sends to %s without the adaptive limit route %s sets there: its requests are not counted in it",
				r.Name, adaptiveKey(r), p.Routes[j].Name)
		}
	}
}
