package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/identity"
)

// Reasons a connection is refused (the reason label of
// tollgate_connections_refused_total).
const (
	refusedTotal     = "total"      // the listener is at its cap
	refusedPerClient = "per_client" // the client address is at its cap
)

// connMetrics are the connection gauges and counters, by listener.
type connMetrics struct {
	open     *prometheus.GaugeVec   // listener
	max      *prometheus.GaugeVec   // listener
	refused  *prometheus.CounterVec // listener, reason
	timeouts *prometheus.CounterVec // listener, phase (body, send)
}

func newConnMetrics(reg prometheus.Registerer) *connMetrics {
	m := &connMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_connections_open",
			Help: "Connections open, by listener (public, admin).",
		}, []string{"listener"}),
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_connections_max",
			Help: "The cap on open connections, by listener.",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_connections_refused_total",
			Help: "Connections closed as soon as accepted, by listener and reason (total: the listener's cap; per_client: the client address's).",
		}, []string{"listener", "reason"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_connection_timeouts_total",
			Help: "Requests cut off because the client was too slow, by listener and phase (body: the request body did not arrive in time; send: the client did not take the response in).",
		}, []string{"listener", "phase"}),
	}
	reg.MustRegister(m.open, m.max, m.refused, m.timeouts)
	for _, l := range []string{"public", "admin"} {
		m.open.WithLabelValues(l)
		m.refused.WithLabelValues(l, refusedTotal)
		m.refused.WithLabelValues(l, refusedPerClient)
		m.timeouts.WithLabelValues(l, "body")
		m.timeouts.WithLabelValues(l, "send")
	}
	return m
}

// connLimiter is a net.Listener that caps the connections it hands out, in
// all and per client address. Over a cap a connection is closed as soon as
// it is accepted: accepting goes on, so the kernel's backlog never fills
// with connections nobody will serve. Refusals are counted, and logged at
// most once a second as counts (never an address).
type connLimiter struct {
	net.Listener
	name      string
	max       int
	perClient int                   // 0: no cap per address
	exempt    func(netip.Addr) bool // peers counted only in the total (trusted proxies); may be nil
	log       *slog.Logger

	open                   prometheus.Gauge
	refusedAll, refusedOne prometheus.Counter
	sinceLog               [2]atomic.Int64 // refusals since the last log line: total, per client
	lastLog                atomic.Int64    // unix nanoseconds
	mu                     sync.Mutex
	n                      int                  // connections open
	clients                map[netip.Prefix]int // open connections per client address
}

func newConnLimiter(l net.Listener, name string, max, perClient int, exempt func(netip.Addr) bool, m *connMetrics, log *slog.Logger) *connLimiter {
	m.max.WithLabelValues(name).Set(float64(max))
	return &connLimiter{
		Listener: l, name: name, max: max, perClient: perClient, exempt: exempt, log: log,
		open:       m.open.WithLabelValues(name),
		refusedAll: m.refused.WithLabelValues(name, refusedTotal),
		refusedOne: m.refused.WithLabelValues(name, refusedPerClient),
		clients:    map[netip.Prefix]int{},
	}
}

// clientKey is the network a client's connections are counted under, as
// its requests are limited (identity.ClientPrefix): one host cannot
// multiply its cap by rotating addresses within its /64.
func clientKey(a netip.Addr) netip.Prefix { return identity.ClientPrefix(a) }

// Accept returns the next connection within the caps, closing at once any
// accepted over them.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// admit counts c in, or refuses it and returns nil.
func (l *connLimiter) admit(c net.Conn) net.Conn {
	lc := &limitedConn{Conn: c, l: l, key: l.keyOf(c)}
	reason := l.take(lc.key)
	if reason == "" {
		l.open.Inc()
		return lc
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset: nothing of it lingers here
	}
	c.Close()
	l.refused(reason)
	return nil
}

// keyOf returns the key c's client is counted under: none (not valid)
// when clients are not capped one by one, or c's is exempt.
func (l *connLimiter) keyOf(c net.Conn) netip.Prefix {
	if l.perClient <= 0 {
		return netip.Prefix{}
	}
	if a, ok := remoteAddr(c); ok && (l.exempt == nil || !l.exempt(a)) {
		return clientKey(a)
	}
	return netip.Prefix{}
}

// take counts a connection in, under key when it is valid, and returns
// "" or, when a cap is reached, the reason for refusing it.
func (l *connLimiter) take(key netip.Prefix) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.n >= l.max:
		return refusedTotal
	case key.IsValid() && l.clients[key] >= l.perClient:
		return refusedPerClient
	}
	l.n++
	if key.IsValid() {
		l.clients[key]++
	}
	return ""
}

func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	l.n--
	if c.key.IsValid() {
		if l.clients[c.key] <= 1 {
			delete(l.clients, c.key)
		} else {
			l.clients[c.key]--
		}
	}
	l.mu.Unlock()
	l.open.Dec()
}

// refused counts a refusal and logs the refusals of the last second, at
// most once a second.
func (l *connLimiter) refused(reason string) {
	if reason == refusedTotal {
		l.refusedAll.Inc()
		l.sinceLog[0].Add(1)
	} else {
		l.refusedOne.Inc()
		l.sinceLog[1].Add(1)
	}
	now, last := time.Now().UnixNano(), l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.mu.Lock()
	open := l.n
	l.mu.Unlock()
	l.log.LogAttrs(context.Background(), slog.LevelWarn, "connections refused", slog.String("listener", l.name),
		slog.Int64("over_total_cap", l.sinceLog[0].Swap(0)), slog.Int64("over_per_client_cap", l.sinceLog[1].Swap(0)),
		slog.Int("open", open), slog.Int("max_conns", l.max), slog.Int("max_conns_per_client", l.perClient))
}

// remoteAddr returns c's peer address.
func remoteAddr(c net.Conn) (netip.Addr, bool) {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr(), true
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr(), err == nil
}

// limitedConn is an admitted connection; closing it frees its place.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	key  netip.Prefix // counted under key, if valid
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// CloseWrite lets net/http half-close the connection so that a client
// still sending receives the response before the connection ends.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the TCP connection's sendfile and splice paths.
func (c *limitedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// defaultMaxConns is the cap on public connections when the policy sets
// none: half the file descriptors the process may open (its soft limit),
// less a reserve for the admin listener's adminMax connections, the
// store, the listeners and the policy files; half, because each proxied
// connection may hold an upstream connection too. At least 32.
func defaultMaxConns(adminMax int) int {
	const least, fallback = 32, 10_000
	soft, _, err := FileLimit()
	if err != nil || soft == 0 {
		return fallback
	}
	reserve := uint64(256 + max(adminMax, 0))
	if soft < reserve+2*least {
		return least
	}
	return int(min((soft-reserve)/2, 1<<24))
}
