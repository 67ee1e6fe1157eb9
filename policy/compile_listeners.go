package policy

import (
	"net"
	"time"

	"github.com/tollgate/tollgate/identity"
)

// ConnLimits bounds the listeners' connections and how long a client may
// take over each part of a request. Every field holds its default when the
// file sets none, except MaxConns.
type ConnLimits struct {
	// HeaderTimeout bounds reading a request's headers.
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from the end of its
	// headers.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection left idle this long.
	IdleTimeout time.Duration
	// SendTimeout bounds each write of a response to the client.
	SendTimeout time.Duration
	// MaxConnsPerClient caps the public connections of one client address
	// (an IPv6 /64); trusted proxies are exempt.
	MaxConnsPerClient int
	// MaxConns caps all public connections; 0 means the gateway derives it
	// from the process's file-descriptor limit.
	MaxConns int
	// AdminMaxConns caps the admin listener's connections.
	AdminMaxConns int
}

// Defaults of ConnLimits.
const (
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultSendTimeout       = time.Minute
	DefaultMaxConnsPerClient = 256
	DefaultAdminMaxConns     = 64
)

// connLimits compiles the connection bounds under listeners:.
func (c *compiler) connLimits(s ListenerSpec) ConnLimits {
	l := ConnLimits{
		HeaderTimeout:     orDefault(s.HeaderTimeout, DefaultHeaderTimeout),
		BodyTimeout:       orDefault(s.BodyTimeout, DefaultBodyTimeout),
		IdleTimeout:       orDefault(s.IdleTimeout, DefaultIdleTimeout),
		SendTimeout:       orDefault(s.SendTimeout, DefaultSendTimeout),
		MaxConnsPerClient: orDefault(s.MaxConnsPerClient, DefaultMaxConnsPerClient),
		MaxConns:          s.MaxConns,
		AdminMaxConns:     orDefault(s.AdminMaxConns, DefaultAdminMaxConns),
	}
	c.connTimeouts(l)
	c.rejectIf(l.MaxConnsPerClient < 1, "listeners.max_conns_per_client", "want at least 1 connection, got %d", l.MaxConnsPerClient)
	c.rejectIf(l.MaxConns < 0, "listeners.max_conns", "want at least 1 connection (or leave it out to derive it from the file limit), got %d", l.MaxConns)
	if s.MaxConnsPerClient == 0 && l.MaxConns > 0 {
		l.MaxConnsPerClient = min(l.MaxConnsPerClient, l.MaxConns)
	}
	c.rejectIf(l.MaxConns > 0 && l.MaxConnsPerClient > l.MaxConns, "listeners.max_conns_per_client", "%d per client exceeds max_conns %d", l.MaxConnsPerClient, l.MaxConns)
	c.rejectIf(l.AdminMaxConns < 1, "listeners.admin_max_conns", "want at least 1 connection, got %d", l.AdminMaxConns)
	return l
}

// connTimeouts checks the listeners' timeouts: at least 100ms, and none
// too long to bound anything, which is as wrong as none.
func (c *compiler) connTimeouts(l ConnLimits) {
	for _, d := range []struct {
		path     string
		v, most  time.Duration
		mostText string
	}{
		{"listeners.header_timeout", l.HeaderTimeout, time.Minute, "1m"},
		{"listeners.body_timeout", l.BodyTimeout, time.Hour, "1h"},
		{"listeners.idle_timeout", l.IdleTimeout, time.Hour, "1h"},
		{"listeners.send_timeout", l.SendTimeout, 10 * time.Minute, "10m"},
	} {
		c.rejectIf(d.v < 100*time.Millisecond || d.v > d.most, d.path, "want 100ms to %s, got %v", d.mostText, d.v)
	}
}

// listeners compiles the listen addresses, the admin token and the
// connection bounds.
func (c *compiler) listeners(p *Policy, s ListenerSpec, env Env) {
	p.Public = orDefault(env.Public, s.Public)
	p.Admin = orDefault(orDefault(env.Admin, s.Admin), "127.0.0.1:9090")
	c.adminToken(p, s.AdminTokenEnv, env)
	c.listenAddrs(p)
	p.Conns = c.connLimits(s)
}

// adminToken compiles the admin listener's token, from the environment
// variable name, which an admin listener off loopback needs.
func (c *compiler) adminToken(p *Policy, name string, env Env) {
	if name != "" {
		if p.AdminToken = env.lookup(name); len(p.AdminToken) < 16 {
			c.addf("listeners.admin_token_env", "environment variable %s must hold a token of at least 16 bytes", name)
		}
	}
	if host, _, err := net.SplitHostPort(p.Admin); err == nil && !identity.LoopbackHost(host) && p.AdminToken == "" {
		c.addf("listeners.admin", "the admin listener on %s is not loopback: set admin_token_env so it requires a token", p.Admin)
	}
}

// listenAddrs checks that the listen addresses are host:port, and
// differ. No public listener is a policy for the middleware alone; the
// gateway needs one (tollgate serve --listen, or the file's).
func (c *compiler) listenAddrs(p *Policy) {
	for _, l := range []struct{ path, addr string }{{"listeners.public", p.Public}, {"listeners.admin", p.Admin}} {
		if l.addr == "" && l.path == "listeners.public" {
			continue
		}
		if _, port, err := net.SplitHostPort(l.addr); err != nil || port == "" {
			c.addf(l.path, "want host:port, got %q", l.addr)
		}
	}
	c.rejectIf(p.Public != "" && p.Public == p.Admin, "listeners.admin", "the admin listener must not share the public address %s", p.Public)
}
