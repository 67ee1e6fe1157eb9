package envoyrls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
)

// RateLimitConfigType is the type URL of the resources WatchXDS asks
// for.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// XDSOptions says where and how [Server.WatchXDS] fetches the
// configuration.
type XDSOptions struct {
	// ServerURL is the control plane's address, as grpc.NewClient takes
	// it (CONFIG_GRPC_XDS_SERVER_URL).
	ServerURL string
	// Node is how this service names itself to the control plane, which
	// keeps a snapshot per node (CONFIG_GRPC_XDS_NODE_ID and
	// CONFIG_GRPC_XDS_NODE_METADATA).
	Node *corev3.Node
	// Credentials secure the connection (nil: plain text); DialOptions
	// are its other options.
	Credentials credentials.TransportCredentials
	DialOptions []grpc.DialOption
	// Headers are sent with the stream
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// RetryInterval is the wait before connecting again once the control
	// plane is lost or cannot be reached; it doubles with each attempt
	// that gets no response, up to MaxRetryInterval, and Jitter makes
	// each wait a random one between half of it and all of it. Zero:
	// 3s, and 60s.
	RetryInterval, MaxRetryInterval time.Duration
	Jitter                          bool
	// Load says how the resources are read, as a directory's files are.
	Load LoadOptions
}

// WatchXDS fetches the configuration from an xDS control plane until ctx
// ends: envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW, state of the
// world over ADS, for RateLimitConfig resources. The resources of each
// response are the whole configuration, read as the files of a
// directory are (each one a file) and applied at once, as a reload is
// (see [Server.Reload]): a valid one is acknowledged and served, an
// invalid one is refused to the control plane with the reason while the
// active configuration keeps serving. A lost control plane is connected
// to again (see XDSOptions.RetryInterval) while the last configuration
// keeps serving. The channel is closed once a configuration is served.
func (s *Server) WatchXDS(ctx context.Context, opts XDSOptions) (<-chan struct{}, error) {
	if opts.ServerURL == "" {
		return nil, errors.New("watching xDS: the control plane's address is required")
	}
	opts.RetryInterval = cmp.Or(opts.RetryInterval, 3*time.Second)
	opts.MaxRetryInterval = max(cmp.Or(opts.MaxRetryInterval, 60*time.Second), opts.RetryInterval)
	if opts.Credentials == nil {
		opts.Credentials = insecure.NewCredentials()
	}
	opts.DialOptions = append(slices.Clip(opts.DialOptions), grpc.WithTransportCredentials(opts.Credentials))
	c := &xdsClient{s: s, opts: opts, ready: make(chan struct{})}
	go c.run(ctx)
	return c.ready, nil
}

// xdsClient is one WatchXDS: the last response it applied and the last
// it refused.
type xdsClient struct {
	s       *Server
	opts    XDSOptions
	ready   chan struct{}
	once    sync.Once
	applied *discoverypb.DiscoveryResponse
	refused *discoverypb.DiscoveryResponse
	reason  string // why refused was
}

// run streams from the control plane until ctx ends, connecting again
// after each stream that ends.
func (c *xdsClient) run(ctx context.Context) {
	b := backoff{first: c.opts.RetryInterval, max: c.opts.MaxRetryInterval, jitter: c.opts.Jitter}
	b.reset()
	for {
		responded, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if responded {
			b.reset()
		}
		d := b.next()
		c.s.log.Warn("the xDS control plane cannot be reached or is gone; the active rate-limit configuration, if any, keeps serving",
			slog.String("server", c.opts.ServerURL), slog.String("error", err.Error()), slog.Duration("retry_in", d))
		if !sleep(ctx, d) {
			return
		}
	}
}

// stream runs one ADS stream on a connection of its own, until it fails
// or ctx ends. It reports whether the control plane responded.
func (c *xdsClient) stream(ctx context.Context) (responded bool, err error) {
	conn, err := grpc.NewClient(c.opts.ServerURL, c.opts.DialOptions...)
	if err != nil {
		return false, fmt.Errorf("connecting to the xDS control plane: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers)))
	defer cancel()
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("opening the ADS stream: %w", err)
	}
	req := &discoverypb.DiscoveryRequest{Node: c.opts.Node, TypeUrl: RateLimitConfigType, VersionInfo: c.applied.GetVersionInfo()}
	for {
		if req != nil {
			if err := st.Send(req); err != nil {
				return responded, fmt.Errorf("sending to the xDS control plane: %w", err)
			}
		}
		resp, err := st.Recv()
		if err != nil {
			return responded, fmt.Errorf("receiving from the xDS control plane: %w", err)
		}
		responded = true
		if req = c.answer(ctx, resp); ctx.Err() != nil {
			return responded, ctx.Err()
		}
	}
}

// answer is the request that acknowledges resp, applied, or refuses it;
// nil for a response of another type, which is not answered. The same
// response as the last refused is refused again without being read
// again, after the retry interval: go-control-plane's snapshot cache
// sends a refused snapshot again at once, and would otherwise be
// answered in a loop until it has another.
func (c *xdsClient) answer(ctx context.Context, resp *discoverypb.DiscoveryResponse) *discoverypb.DiscoveryRequest {
	if resp.GetTypeUrl() != RateLimitConfigType {
		return nil
	}
	ok := true
	switch {
	case sameResponse(resp, c.refused):
		ok = false
		sleep(ctx, c.opts.RetryInterval)
	case sameResponse(resp, c.applied):
	default:
		if err := c.s.applyXDS(resp, c.opts.Load); err != nil {
			ok, c.refused, c.reason = false, resp, err.Error()
		}
	}
	if !ok {
		return &discoverypb.DiscoveryRequest{TypeUrl: RateLimitConfigType, ResponseNonce: resp.GetNonce(), VersionInfo: c.applied.GetVersionInfo(),
			ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: c.reason}}
	}
	c.applied, c.refused = resp, nil
	c.once.Do(func() { close(c.ready) })
	return &discoverypb.DiscoveryRequest{TypeUrl: RateLimitConfigType, ResponseNonce: resp.GetNonce(), VersionInfo: resp.GetVersionInfo()}
}

// sameResponse reports whether a and b hold the same version of the same
// resources, in any order (go-control-plane's snapshot cache sends them
// in any).
func sameResponse(a, b *discoverypb.DiscoveryResponse) bool {
	if a == nil || b == nil || a.GetVersionInfo() != b.GetVersionInfo() {
		return false
	}
	return slices.Equal(resourceBytes(a), resourceBytes(b))
}

// resourceBytes is the type and bytes of each resource of r, sorted.
func resourceBytes(r *discoverypb.DiscoveryResponse) []string {
	bs := make([]string, len(r.GetResources()))
	for i, a := range r.GetResources() {
		bs[i] = a.GetTypeUrl() + "\x00" + string(a.GetValue())
	}
	slices.Sort(bs)
	return bs
}

// applyXDS makes the resources of resp the configuration (see Reload),
// and its version the one the metrics report; it returns why they are
// refused, if they are.
func (s *Server) applyXDS(resp *discoverypb.DiscoveryResponse, opts LoadOptions) error {
	var err error
	ok := s.Reload(func() (*Config, error) {
		var cfg *Config
		if cfg, err = parseXDS(resp.GetResources(), opts); err != nil {
			err = fmt.Errorf("xDS version %q: %w", resp.GetVersionInfo(), err)
		}
		return cfg, err
	})
	if !ok {
		return err
	}
	if m := s.opts.Metrics; m != nil {
		m.XDSConfig.Reset()
		m.XDSConfig.WithLabelValues(resp.GetVersionInfo()).Set(1)
	}
	s.log.Info("rate-limit configuration from xDS served", slog.String("version", resp.GetVersionInfo()))
	return nil
}

// parseXDS reads RateLimitConfig resources as Parse reads files, each
// one named after its resource, in the order of their names.
func parseXDS(resources []*anypb.Any, opts LoadOptions) (*Config, error) {
	rcs := make([]*rlsconfpb.RateLimitConfig, len(resources))
	for i, a := range resources {
		rcs[i] = &rlsconfpb.RateLimitConfig{}
		if err := a.UnmarshalTo(rcs[i]); err != nil {
			return nil, fmt.Errorf("reading resource %d: %w", i, err)
		}
	}
	slices.SortStableFunc(rcs, func(a, b *rlsconfpb.RateLimitConfig) int { return strings.Compare(a.GetName(), b.GetName()) })
	p := newParser(opts)
	for _, rc := range rcs {
		p.name = fmt.Sprintf("RateLimitConfig %q", rc.GetName())
		p.cfg.Files = append(p.cfg.Files, p.name)
		p.domainFile(fileYAML{Domain: rc.GetDomain(), Descriptors: descriptorsYAML(rc.GetDescriptors())}, 0)
	}
	return p.config()
}

// descriptorsYAML is RateLimitConfig descriptors as a file holds them.
func descriptorsYAML(ds []*rlsconfpb.RateLimitDescriptor) []descYAML {
	ys := make([]descYAML, len(ds))
	for i, d := range ds {
		ys[i] = descYAML{Key: d.GetKey(), Value: d.GetValue(), RateLimit: rateLimitOf(d.GetRateLimit()),
			Descriptors: descriptorsYAML(d.GetDescriptors()), ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
	}
	return ys
}

// rateLimitOf is a RateLimitConfig policy as a file holds it; nil for
// none.
func rateLimitOf(p *rlsconfpb.RateLimitPolicy) *rateLimitYAML {
	if p == nil {
		return nil
	}
	r := &rateLimitYAML{RequestsPerUnit: p.GetRequestsPerUnit(), Unit: p.GetUnit().String(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	for _, rep := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, struct {
			Name string `yaml:"name"`
		}{rep.GetName()})
	}
	return r
}

// backoff is the wait between attempts: first, doubled after each, to
// max; with jitter, a random one between half of it and all of it.
type backoff struct {
	first, max, wait time.Duration
	jitter           bool
}

func (b *backoff) reset() { b.wait = b.first }

// next is the wait before the next attempt.
func (b *backoff) next() time.Duration {
	d := b.wait
	b.wait = min(2*b.wait, b.max)
	if b.jitter {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
