package policy

import (
	"strings"
	"time"
)

// store checks the store section and fills in its defaults.
func (c *compiler) store(p *Policy) {
	s := &p.Store
	c.storeType(s)
	c.rejectIf(s.MaxKeys < 0, "store.max_keys", "must not be negative")
	if b := s.MaxBytes; b != 0 && b < 1<<20 {
		c.addf("store.max_bytes", "want at least 1MiB (or none, for the default 256MiB), got %v", b)
	}
	c.storeMode(s)
	switch {
	case s.Timeout == 0:
		s.Timeout = 20 * time.Millisecond
	case s.Timeout < time.Millisecond:
		c.addf("store.timeout", "must be at least 1ms, got %v", s.Timeout)
	}
	c.rejectIf(s.Instances < 0, "store.instances", "must not be negative")
	switch s.CalendarFallback {
	case "", "closed", "share":
	default:
		c.addf("store.calendar_fallback", "want closed or share, got %q", s.CalendarFallback)
	}
	c.rejectIf(s.Breaker.OpenFor < 0, "store.breaker.open_for", "must not be negative")
}

// storeType checks the store's type (memory by default) and that only
// the redis store has, and needs, a URL.
func (c *compiler) storeType(s *StoreSpec) {
	switch s.Type {
	case "", "memory":
		s.Type = "memory"
		c.rejectIf(s.URL != "", "store.url", "a url is for the redis store; set type: redis")
	case "redis":
		if s.URL == "" {
			c.addf("store", "the redis store needs a url (redis://host:port/db)")
		} else if err := CheckRedisURL(s.URL); err != nil {
			c.addf("store.url", "%v", err)
		}
	default:
		c.addf("store.type", "unknown store %q (want memory or redis)", s.Type)
	}
}

// storeMode checks the store's mode, and that a sentinel one names its
// master set.
func (c *compiler) storeMode(s *StoreSpec) {
	switch s.Mode {
	case "", "standalone", "cluster":
	case "sentinel":
		c.rejectIf(s.Type == "redis" && !strings.Contains(s.URL, "master_set="), "store.url", "sentinel mode needs ?master_set=<name> in the url")
	default:
		c.addf("store.mode", "unknown mode %q (want standalone, cluster or sentinel)", s.Mode)
	}
}
