// Package faultproxy is a TCP proxy for tests that inject network faults
// between Tollgate and Redis: added latency, and a cut that drops every
// connection and refuses new ones. It runs in the test process on
// loopback; the test controls it directly.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	Addr string // where clients connect

	target  string
	ln      net.Listener
	latency atomic.Int64 // ns added before each chunk is forwarded
	cut     atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetLatency delays every chunk of data, both ways, by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Cut drops every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.cut.Store(true)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Restore undoes Cut.
func (p *Proxy) Restore() { p.cut.Store(false) }

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, true)
		p.track(up, true)
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.track(dst, false)
		p.track(src, false)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a cut: close both sides
		}
	}
}
