package gateway_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holdSlow opens n connections from src that send a request head and one
// byte of the body, and returns them once the gateway holds them all (a
// connection refused because the gateway has not yet counted out one that
// just closed is tried again). A connection is held if a second passes
// without the gateway closing it: it closes one it refuses at once.
func holdSlow(t *testing.T, src, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for round := 0; len(cs) < n; round++ {
		if round == 20 {
			t.Fatalf("only %d of %d connections from %s held", len(cs), n, src)
		}
		var fresh []net.Conn
		for range n - len(cs) {
			c, err := dialFrom(src, addr)
			if errors.Is(err, syscall.ECONNRESET) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, slowPost("/api/upload"))
			fresh = append(fresh, c)
		}
		settled := time.Now().Add(time.Second) // a refused one is reset by then
		for _, c := range fresh {
			c.SetReadDeadline(settled)
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				c.SetReadDeadline(time.Time{})
				cs = append(cs, c)
			} else {
				c.Close()
			}
		}
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// refusedAtOnce connects from src and sends a slow request's head, and
// reports whether the gateway closed the connection at once, unanswered
// (perhaps before connect returned): within 3 s, where one it let in
// would be held until its body deadline (10 s in the tests that ask).
func refusedAtOnce(t *testing.T, src, addr string) bool {
	t.Helper()
	c, err := dialFrom(src, addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, slowPost("/api/upload"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestTotalConnectionCap: when the public listener is full, new
// connections are accepted and closed at once (the backlog never fills
// with dead connections), counted, and the admin listener, with a budget of
// its own, still answers; when the slow bodies are cut off the public side
// serves again. The checks while the listeners are full must end before
// the held connections' body deadline: it is 10 s, over 10 times what
// they take on a loaded machine. The test mostly waits for it, on
// connections of its own gateway: it runs in parallel.
func TestTotalConnectionCap(t *testing.T) {
	t.Parallel()
	up := readingUpstream(t)
	g := start(t, slowConfig(t, up.URL, "body_timeout: 10s", "max_conns: 40", "max_conns_per_client: 40", "admin_max_conns: 4"), "")
	pub, adm := hostPort(g.public), hostPort(g.admin)
	admin := clientFrom("127.0.0.1")
	client.CloseIdleConnections()

	holdSlow(t, "127.0.0.2", pub, 40)
	waitFor(t, "40 public connections open", 10*time.Second, func() bool {
		v, err := scrape(admin, g.admin, `tollgate_connections_open{listener="public"}`)
		return err == nil && v == 40
	})
	for i := range 20 {
		if !refusedAtOnce(t, "127.0.0.3", pub) {
			t.Fatalf("connection %d over the total cap was not closed at once", i)
		}
	}
	if _, err := clientFrom("127.0.0.4").Get(g.public + "/api/x"); err == nil {
		t.Error("an ordinary request was served past the total cap")
	}
	if resp, err := admin.Get(g.admin + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz with the public listener full: %v", err)
	}

	// The admin listener's own budget.
	held := holdSlow(t, "127.0.0.1", adm, 4)
	if !refusedAtOnce(t, "127.0.0.1", adm) {
		t.Error("a fifth admin connection was not refused")
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "/healthz answers again", 10*time.Second, func() bool {
		resp, err := admin.Get(g.admin + "/healthz")
		return err == nil && resp.StatusCode == http.StatusOK
	})

	waitFor(t, "the public side serves again after the body deadline", 30*time.Second, func() bool {
		resp, err := clientFrom("127.0.0.4").Get(g.public + "/api/x")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if n, _ := scrape(admin, g.admin, `tollgate_connections_refused_total{listener="public",reason="total"}`); n < 20 {
		t.Errorf("refused over the total cap: %v, want at least 20", n)
	}
	if n, _ := scrape(admin, g.admin, `tollgate_connections_refused_total{listener="admin",reason="total"}`); n < 1 {
		t.Errorf("refused over the admin cap: %v, want at least 1", n)
	}
}

// TestConnectionCapSparesTrustedProxies: the per-address cap does not
// apply to a trusted proxy, which opens every connection of the clients
// behind it; an untrusted address is held to it, and gets its slots back
// as its connections close.
func TestConnectionCapSparesTrustedProxies(t *testing.T) {
	up := readingUpstream(t)
	g := start(t, slowConfig(t, up.URL, "max_conns_per_client: 5"), "")
	pub := hostPort(g.public)
	open := func(src string) (net.Conn, bool) {
		c, err := dialFrom(src, pub)
		if errors.Is(err, syscall.ECONNRESET) {
			return nil, false // refused before connect returned
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET /api/x HTTP/1.1\r\nHost: tollgate\r\nX-Forwarded-For: 192.0.2.9\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return c, false
		}
		resp.Body.Close()
		return c, resp.StatusCode == http.StatusOK
	}
	for i := range 12 {
		if _, ok := open("127.0.0.1"); !ok {
			t.Fatalf("trusted proxy connection %d was refused", i)
		}
	}
	var mine []net.Conn
	served := 0
	for range 12 {
		c, ok := open("127.0.0.2")
		if ok {
			served++
			mine = append(mine, c)
		}
	}
	if served != 5 {
		t.Fatalf("an untrusted address got %d connections served, want 5", served)
	}
	for _, c := range mine {
		c.Close()
	}
	waitFor(t, "the address's slots come back", 10*time.Second, func() bool {
		_, ok := open("127.0.0.2")
		return ok
	})
}

// TestReloadKeepsConnLimits: the connection bounds are the listeners';
// a reload that changes them is refused, as one that moves a listener is.
func TestReloadKeepsConnLimits(t *testing.T) {
	up := readingUpstream(t)
	g := start(t, slowConfig(t, up.URL, "body_timeout: 1s"), "")
	if err := g.g.Reload(slowConfig(t, up.URL, "body_timeout: 5s")); err == nil || !strings.Contains(err.Error(), "need a restart") {
		t.Fatalf("reload with another body_timeout: %v", err)
	}
	if err := g.g.Reload(slowConfig(t, up.URL, "body_timeout: 1s")); err != nil {
		t.Fatalf("reload with the same bounds: %v", err)
	}
}
