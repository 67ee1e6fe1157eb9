// Package xdstest runs a real xDS control plane in a test's process:
// go-control-plane's server on its snapshot cache, serving
// RateLimitConfig resources over ADS as Envoy Gateway's does, and
// recording every request it receives (the acknowledgements and the
// refusals, with their reasons).
package xdstest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// ControlPlane is a control plane serving one node's snapshots.
type ControlPlane struct {
	// Addr is where it listens; NodeID the node it serves.
	Addr, NodeID string
	cache        cachev3.SnapshotCache
	g            *grpc.Server
	cancel       context.CancelFunc
	done         chan struct{}

	mu       sync.Mutex
	requests []Request
	changed  chan struct{} // closed and replaced on each request
}

// Request is a discovery request the control plane received.
type Request struct {
	// Version is the version the client has; Nonce the response it
	// answers ("" for a stream's first request); Error the reason it
	// refuses that response ("" for an acknowledgement).
	Version, Nonce, Error string
	// Node is the client's node ID, TypeURL what it asks for.
	Node, TypeURL string
}

// Start starts a control plane for nodeID listening on addr
// ("127.0.0.1:0" for any port) with the server options opts; it stops
// when the test ends, if Stop has not stopped it before.
func Start(t testing.TB, addr, nodeID string, opts ...grpc.ServerOption) *ControlPlane {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &ControlPlane{Addr: ln.Addr().String(), NodeID: nodeID, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		g: grpc.NewServer(opts...), cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	srv := serverv3.NewServer(ctx, c.cache, serverv3.CallbackFuncs{StreamRequestFunc: c.record})
	discoverypb.RegisterAggregatedDiscoveryServiceServer(c.g, srv)
	go func() {
		defer close(c.done)
		c.g.Serve(ln)
	}()
	t.Cleanup(c.Stop)
	return c
}

// record keeps a request.
func (c *ControlPlane) record(_ int64, req *discoverypb.DiscoveryRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, Request{Version: req.GetVersionInfo(), Nonce: req.GetResponseNonce(), Error: req.GetErrorDetail().GetMessage(),
		Node: req.GetNode().GetId(), TypeURL: req.GetTypeUrl()})
	close(c.changed)
	c.changed = make(chan struct{})
	return nil
}

// Set makes configs the node's snapshot at version.
func (c *ControlPlane) Set(t testing.TB, version string, configs ...*rlsconfpb.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, rc := range configs {
		res[i] = rc
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cache.SetSnapshot(context.Background(), c.NodeID, snap); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the control plane at once, closing its streams, and waits
// until it has stopped.
func (c *ControlPlane) Stop() {
	c.g.Stop()
	c.cancel()
	<-c.done
}

// Requests returns the requests received so far, and a channel closed
// at the next one.
func (c *ControlPlane) Requests() ([]Request, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.requests...), c.changed
}

// Refusals returns the requests received so far that refuse a response.
func (c *ControlPlane) Refusals() []Request {
	reqs, _ := c.Requests()
	var out []Request
	for _, r := range reqs {
		if r.Error != "" {
			out = append(out, r)
		}
	}
	return out
}

// Acknowledged reports whether a request has acknowledged version.
func (c *ControlPlane) Acknowledged(version string) bool {
	reqs, _ := c.Requests()
	for _, r := range reqs {
		if r.Error == "" && r.Nonce != "" && r.Version == version {
			return true
		}
	}
	return false
}

// Await waits until cond holds of the requests received, for at most d,
// and reports whether it did.
func (c *ControlPlane) Await(d time.Duration, cond func([]Request) bool) bool {
	timeout := time.After(d)
	for {
		reqs, changed := c.Requests()
		if cond(reqs) {
			return true
		}
		select {
		case <-changed:
		case <-timeout:
			return false
		}
	}
}
