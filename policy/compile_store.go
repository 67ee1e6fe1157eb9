package policy

import (
	"strings"
	"time"
)

// store checks the store section and fills in its defaults.
func (c *compiler) store(p *Policy) {
	switch p.Store.Type {
	case "", "memory":
		p.Store.Type = "memory"
		if p.Store.URL != "" {
			c.addf("store.url", "a url is for the redis store; set type: redis")
		}
	case "redis":
		if p.Store.URL == "" {
			c.addf("store", "the redis store needs a url (redis://host:port/db)")
		} else if err := CheckRedisURL(p.Store.URL); err != nil {
			c.addf("store.url", "%v", err)
		}
	default:
		c.addf("store.type", "unknown store %q (want memory or redis)", p.Store.Type)
	}
	if p.Store.MaxKeys < 0 {
		c.addf("store.max_keys", "must not be negative")
	}
	if b := p.Store.MaxBytes; b != 0 && b < 1<<20 {
		c.addf("store.max_bytes", "want at least 1MiB (or none, for the default 256MiB), got %v", b)
	}
	switch p.Store.Mode {
	case "", "standalone", "cluster":
	case "sentinel":
		if p.Store.Type == "redis" && !strings.Contains(p.Store.URL, "master_set=") {
			c.addf("store.url", "sentinel mode needs ?master_set=<name> in the url")
		}
	default:
		c.addf("store.mode", "unknown mode %q (want standalone, cluster or sentinel)", p.Store.Mode)
	}
	switch {
	case p.Store.Timeout == 0:
		p.Store.Timeout = 20 * time.Millisecond
	case p.Store.Timeout < time.Millisecond:
		c.addf("store.timeout", "must be at least 1ms, got %v", p.Store.Timeout)
	}
	if p.Store.Instances < 0 {
		c.addf("store.instances", "must not be negative")
	}
	switch p.Store.CalendarFallback {
	case "", "closed", "share":
	default:
		c.addf("store.calendar_fallback", "want closed or share, got %q", p.Store.CalendarFallback)
	}
	if p.Store.Breaker.OpenFor < 0 {
		c.addf("store.breaker.open_for", "must not be negative")
	}
}
