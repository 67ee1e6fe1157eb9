package envoyrls

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
)

// Options configures a [Server]. Engine is required; the zero value of
// every other field is envoyproxy/ratelimit's default.
type Options struct {
	// Engine decides every request (see [engine.FrontRLS]); it needs no
	// policy.
	Engine *engine.Engine
	// Metrics, if set, counts hits as envoyproxy/ratelimit's statistics.
	Metrics *Metrics
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit (NEAR_LIMIT_RATIO); zero means 0.8. It is used as a
	// float32, as envoyproxy/ratelimit holds it.
	NearLimitRatio float64
	// Headers adds the headers of the most restrictive descriptor to the
	// response (LIMIT_RESPONSE_HEADERS_ENABLED): LimitHeader,
	// RemainingHeader and ResetHeader, by default RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (seconds).
	Headers                                   bool
	LimitHeader, RemainingHeader, ResetHeader string
	// IETFHeaders adds RateLimit-Policy (every limited descriptor not in
	// shadow_mode) and RateLimit (the most restrictive of them) as
	// draft-ietf-httpapi-ratelimit-headers spells them, as Tollgate's
	// gateway does.
	IETFHeaders bool
	// ShadowMode answers OK whatever the limits say (SHADOW_MODE); the
	// statuses still say which descriptors are over their limits.
	ShadowMode bool
	// Now, if set, is the clock of duration_until_reset where the store
	// reports no reset (nil: time.Now). Decisions are on the engine's
	// clock.
	Now func() time.Time
	// Logger receives reloads; nil means slog.Default().
	Logger *slog.Logger
}

// Server is the rate-limit service. It is safe for concurrent use; its
// configuration is swapped atomically (see SetConfig).
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer
	opts   Options
	cfg    atomic.Pointer[Config]
	health *health.Server
	log    *slog.Logger
	names  requestNames // the names made of request data, bounded
}

// New returns a server answering under cfg (nil: none yet; every domain
// is then unknown and the health service reports NOT_SERVING).
func New(cfg *Config, opts Options) (*Server, error) {
	if opts.Engine == nil {
		return nil, errors.New("creating rate-limit service: Engine is required")
	}
	opts.NearLimitRatio = cmp.Or(opts.NearLimitRatio, 0.8)
	opts.LimitHeader = cmp.Or(opts.LimitHeader, "RateLimit-Limit")
	opts.RemainingHeader = cmp.Or(opts.RemainingHeader, "RateLimit-Remaining")
	opts.ResetHeader = cmp.Or(opts.ResetHeader, "RateLimit-Reset")
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, health: health.NewServer(), log: opts.Logger}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	if cfg != nil {
		s.SetConfig(cfg)
	}
	return s, nil
}

// SetConfig makes cfg the configuration of every request from now on;
// requests in flight finish under the one they started with.
func (s *Server) SetConfig(cfg *Config) {
	s.cfg.Store(cfg)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Config returns the active configuration, or nil.
func (s *Server) Config() *Config { return s.cfg.Load() }

// Register registers the rate-limit service, the gRPC health service and
// reflection on g.
func (s *Server) Register(g *grpc.Server) {
	rlspb.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
}

// ServerOptions are the options of the gRPC server that serves the
// service: a pool of streamWorkers goroutines that serve the calls (gRPC
// starts a goroutine of its own for a call that finds none free). By
// default gRPC starts one per call, whose stack then grows, copied at
// each doubling, on the way down to the store: at 64 callers on Redis,
// an eighth of the service's CPU (BENCHMARKS.md, section 4).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers)}
}

// streamWorkers is the size of ServerOptions' pool: more than the calls
// a few Envoys have in flight at once while Redis answers, each idle
// worker a few KiB of stack.
const streamWorkers = 256

// Shutdown reports NOT_SERVING to health checks, so that clients move
// away before the listener closes.
func (s *Server) Shutdown() { s.health.Shutdown() }

// descriptorState is what the answer needs of one descriptor beyond its
// verdict: the limit it resolved to, and the tree's nodes it matched.
type descriptorState struct {
	lim   *Limit
	nodes []*node
}

// ShouldRateLimit decides a request: every descriptor's limit, all or
// nothing (a request over any limit charges none), in one store call. As
// envoyproxy/ratelimit splits it: the limits the descriptors resolve to
// (rlsCall.Resolve, asked by the engine), their decision (decide), and
// the answer (answer).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, s.serviceError("rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, s.serviceError("rate limit descriptor list must not be empty")
	}
	var dom *Domain
	if cfg := s.cfg.Load(); cfg != nil {
		dom = cfg.Domain(req.Domain)
	}
	if dom == nil {
		return s.unknownDomain(req), nil
	}
	c := &rlsCall{s: s, req: req, dom: dom}
	if n := len(req.Descriptors); n > len(c.stack) {
		c.states = make([]descriptorState, n)
	} else {
		c.states = c.stack[:n]
	}
	v, err := s.decide(ctx, c)
	if err != nil {
		return nil, err
	}
	c.v = v
	c.refused = v.Outcome == engine.Refused || v.Outcome == engine.FailClosed
	return s.answer(c), nil
}

// An rlsCall is one ShouldRateLimit on its way: the engine's
// [engine.Descriptors] of the request.
type rlsCall struct {
	s       *Server
	req     *rlspb.RateLimitRequest
	dom     *Domain
	states  []descriptorState // each descriptor's (Resolve)
	stack   [4]descriptorState
	v       *engine.Verdict // (decide)
	refused bool            // the request is refused
}

// Domain is the request's domain and its failure mode.
func (c *rlsCall) Domain() (string, bool) { return c.req.Domain, c.dom.FailClosed }

// Len is the number of the request's descriptors.
func (c *rlsCall) Len() int { return len(c.req.Descriptors) }

// Resolve finds descriptor i's limit: the request's own override, or the
// domain's tree's; and whose state of its budget it charges.
func (c *rlsCall) Resolve(i int) (engine.Descriptor, error) {
	d, st := c.req.Descriptors[i], &c.states[i]
	if o := d.GetLimit(); o != nil {
		lim, err := c.s.overrideLimit(c.req.Domain, d, o)
		if err != nil {
			return engine.Descriptor{}, err
		}
		st.lim = lim
	} else {
		st.lim, st.nodes = c.dom.lookup(d.Entries, nil)
	}
	lim := st.lim
	if lim == nil {
		return engine.Descriptor{}, nil
	}
	ed := engine.Descriptor{Limited: true, Unlimited: lim.Unlimited, Budget: lim.Budget, Name: lim.Name, Replaces: lim.Replaces,
		Hits: hitsOf(c.req, d), AfterResponse: lim.AfterResponse}
	if lim.Budget != nil && !lim.Unlimited {
		nodes := st.nodes
		if nodes == nil {
			nodes = overrideNodes(len(d.Entries))
		}
		ed.Subject = subject(d.Entries, nodes)
	}
	return ed, nil
}

// unknownDomain answers a request of a domain no configuration has: every
// descriptor OK, counted once a descriptor, as envoyproxy/ratelimit
// counts it.
func (s *Server) unknownDomain(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	if m := s.opts.Metrics; m != nil {
		m.DomainNotFound.WithLabelValues(m.notFoundLabel(req.Domain)).Add(float64(len(req.Descriptors)))
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	return resp
}

// decide asks the engine for the request's descriptors, and maps what it
// cannot decide to the service's errors.
func (s *Server) decide(ctx context.Context, c *rlsCall) (*engine.Verdict, error) {
	v := s.opts.Engine.Decide(ctx, engine.Request{Front: engine.FrontRLS, Descriptors: c})
	switch v.Outcome {
	case engine.Invalid:
		return nil, s.serviceError(v.Err.Error())
	case engine.FailClosed:
		if v.Reason == engine.ReasonCanceled {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return v, nil
}

// answer assembles the response: each descriptor's status, counted in the
// metrics, the headers, and the global shadow mode.
func (s *Server) answer(c *rlsCall) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(c.req.Descriptors))}
	now := s.opts.Now()
	for i, d := range c.req.Descriptors {
		st := &c.states[i]
		ds, counted := s.status(c, i, now)
		resp.Statuses[i] = ds
		if ds.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if counted.applied {
			s.count(c.req.Domain, d.Entries, st, c.v.Descriptors[i].Hits, counted)
		}
	}
	if s.opts.Headers || s.opts.IETFHeaders {
		resp.ResponseHeadersToAdd = s.headers(c.states, resp.Statuses)
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && s.opts.ShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OK
		if m := s.opts.Metrics; m != nil {
			m.GlobalShadowMode.Inc()
		}
	}
	return resp
}

// count counts a descriptor of domain with entries, whose limit was
// applied, in the metrics, if any.
func (s *Server) count(domain string, entries []*rlv3.RateLimitDescriptor_Entry, st *descriptorState, hits int64, n counted) {
	m := s.opts.Metrics
	if m == nil {
		return
	}
	lim := st.lim
	key := lim.StatKey
	if st.nodes != nil && dynamicMetric(lim, st.nodes) {
		key = s.names.name(metricKey(domain, lim, entries, st.nodes), lim.StatKey)
	}
	m.counters(domain, key).record(uint64(hits), n.limit, n.before, n.over, lim.Shadow, s.opts.NearLimitRatio)
}

// counted is what a descriptor's status tells the metrics: whether a
// limit was applied, the limit, the hits before it, and whether they
// were over.
type counted struct {
	applied       bool
	limit, before uint64
	over          bool
}

// status is descriptor i's status, and what the metrics count of it.
func (s *Server) status(c *rlsCall, i int, now time.Time) (*rlspb.RateLimitResponse_DescriptorStatus, counted) {
	lim, dv := c.states[i].lim, &c.v.Descriptors[i]
	switch {
	case lim != nil && lim.Unlimited:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, counted{}
	case !dv.Applied:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}, counted{}
	}
	ds := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: lim.proto}
	n := counted{applied: true, limit: uint64(lim.RequestsPerUnit)}
	reset := windowReset(lim.Period, now)
	switch {
	case dv.Charge < 0: // requests_per_unit 0
		n.over = dv.Hits > 0
	case c.v.Outcome == engine.FailClosed:
		n.over = true
	case c.v.Outcome == engine.FailOpen:
		// Undecided: admitted, nothing known of the budget.
		ds.LimitRemaining = lim.RequestsPerUnit
	default:
		reset = c.judge(lim, dv, ds, &n, reset)
	}
	if n.over && !lim.Shadow {
		ds.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	ds.DurationUntilReset = &durationpb.Duration{Seconds: reset}
	return ds, n
}

// judge fills in ds and n for a descriptor whose budget the store
// decided, and returns its reset: the window's, given, unless the
// decision says otherwise.
func (c *rlsCall) judge(lim *Limit, dv *engine.DescriptorVerdict, ds *rlspb.RateLimitResponse_DescriptorStatus, n *counted, reset int64) int64 {
	dec := c.v.Charges[dv.Charge].Decision
	n.over = c.over(lim, dv, dec)
	n.before = c.before(lim, dv, dec, n.over)
	n.limit = uint64(dec.Quota)
	if !n.over {
		ds.LimitRemaining = uint32(min(dec.Remaining, math.MaxUint32))
	}
	// A fixed window's reset is its end; a fresh window's (a query of an
	// unused budget) is the clock's.
	if dec.ResetAfter > 0 || lim.Budget.Limit.Algorithm != algo.FixedWindow {
		return ceilSeconds(dec.ResetAfter)
	}
	return reset
}

// over reports whether a descriptor's hits were over its limit, decided
// as dec.
func (c *rlsCall) over(lim *Limit, dv *engine.DescriptorVerdict, dec tollgate.Decision) bool {
	if !dec.Allowed {
		return true
	}
	if c.v.Queried || lim.Shadow && (c.refused || c.v.Local) {
		// Decided at cost 0: the hits are over if they do not fit what
		// is left, as if they had been asked for.
		return dv.Asked > dec.Remaining
	}
	return false
}

// before is what a descriptor's budget had used before its hits. Remaining
// is after the charge if there was one; otherwise (the request refused,
// a shadow budget's would-be refusal or its charge skipped while the
// store is down) as it is.
func (c *rlsCall) before(lim *Limit, dv *engine.DescriptorVerdict, dec tollgate.Decision, over bool) uint64 {
	if c.refused || over || lim.Shadow && c.v.Local {
		return sat(dec.Quota - dec.Remaining)
	}
	return sat(dec.Quota - dec.Remaining - dv.Hits)
}

// headers are the response headers: LIMIT_RESPONSE_HEADERS_ENABLED's of
// the most restrictive descriptor, shadow ones included, as
// envoyproxy/ratelimit sends them; RateLimit-Policy and RateLimit of the
// limits enforced, as the gateway sends them (a shadow_mode descriptor
// refuses nothing, so a client is not told of it).
func (s *Server) headers(states []descriptorState, statuses []*rlspb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	if r := mostRestrictive(states, statuses, true); s.opts.Headers && r >= 0 {
		hs = s.legacyHeaders(states[r].lim, statuses[r])
	}
	if r := mostRestrictive(states, statuses, false); s.opts.IETFHeaders && r >= 0 {
		hs = append(hs, ietfHeaders(states, statuses, r)...)
	}
	return hs
}

// legacyHeaders are LIMIT_RESPONSE_HEADERS_ENABLED's headers of lim,
// decided as st.
func (s *Server) legacyHeaders(lim *Limit, st *rlspb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	return []*corev3.HeaderValue{
		{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(lim.RequestsPerUnit), 10)},
		{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: s.opts.ResetHeader, Value: strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)}}
}

// ietfHeaders are RateLimit-Policy, listing the limits enforced, and
// RateLimit of descriptor r.
func ietfHeaders(states []descriptorState, statuses []*rlspb.RateLimitResponse_DescriptorStatus, r int) []*corev3.HeaderValue {
	var pol strings.Builder
	for i, x := range states {
		if !limited(x, statuses[i]) || x.lim.Shadow {
			continue
		}
		if pol.Len() > 0 {
			pol.WriteString(", ")
		}
		pol.WriteString(x.lim.policyItem())
	}
	st := statuses[r]
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: pol.String()},
		{Key: "RateLimit", Value: sfString(states[r].lim.headerName()) + ";r=" + strconv.FormatUint(uint64(st.LimitRemaining), 10) +
			";t=" + strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)}}
}

// mostRestrictive is the index of the descriptor whose state headers
// report, as envoyproxy/ratelimit picks it: the last one over its limit
// (and not in shadow mode), else the first with the least remaining;
// shadow descriptors only with shadow; -1 for none limited.
func mostRestrictive(states []descriptorState, statuses []*rlspb.RateLimitResponse_DescriptorStatus, shadow bool) int {
	r := -1
	for i, st := range statuses {
		if !limited(states[i], st) || states[i].lim.Shadow && !shadow {
			continue
		}
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT || r < 0 || statuses[r].Code == rlspb.RateLimitResponse_OK && st.LimitRemaining < statuses[r].LimitRemaining {
			r = i
		}
	}
	return r
}

// limited reports whether a descriptor was decided under a limit (its
// status then carries current_limit).
func limited(st descriptorState, ds *rlspb.RateLimitResponse_DescriptorStatus) bool {
	return st.lim != nil && !st.lim.Unlimited && ds.CurrentLimit != nil
}

// headerName is the limit's name in RateLimit-Policy: its name, else its
// descriptor key.
func (l *Limit) headerName() string {
	if l.Name != "" {
		return l.Name
	}
	return l.StatKey
}

// policyItem is the limit as a RateLimit-Policy item: "name";q=N;w=S.
func (l *Limit) policyItem() string {
	return sfString(l.headerName()) + ";q=" + strconv.FormatUint(uint64(l.RequestsPerUnit), 10) + ";w=" + strconv.FormatInt(int64(l.Period/time.Second), 10)
}

// sfString is s as a structured-field string: quoted, '"' and '\'
// escaped, bytes outside printable ASCII as '?'.
func sfString(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			sb.WriteByte('?')
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// serviceError is a request that cannot be decided, as
// envoyproxy/ratelimit answers it: an error (Envoy then applies its
// failure_mode_deny).
func (s *Server) serviceError(msg string) error {
	if m := s.opts.Metrics; m != nil {
		m.Errors.WithLabelValues("service_error").Inc()
	}
	return status.Error(codes.InvalidArgument, msg)
}

// hitsOf is what a descriptor charges: its own hits_addend if set (zero
// asks without charging), else the request's, at least 1.
func hitsOf(req *rlspb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	var h uint64
	if a := d.GetHitsAddend(); a != nil {
		h = a.GetValue()
	} else {
		h = max(1, uint64(req.GetHitsAddend()))
	}
	return int64(min(h, math.MaxInt64))
}

// windowReset is the seconds until the window of period that now is in
// ends, as envoyproxy/ratelimit computes duration_until_reset.
func windowReset(period time.Duration, now time.Time) int64 {
	p := int64(period / time.Second)
	if p <= 0 {
		return 0
	}
	return p - now.Unix()%p
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// sat is n as a count, never negative.
func sat(n int64) uint64 { return uint64(max(0, n)) }

// overrideLimit is the limit a descriptor carries itself (Envoy's
// limit override): its budget is per descriptor keys, a fixed window of
// the unit, and its name (the metric key and the budget's label) the
// descriptor's keys (never its values). The keys are request data, so
// the name is bounded as every such name is (see requestNames): past the
// bound it is "<domain>._other", while the budget stays the keys' own.
func (s *Server) overrideLimit(domain string, d *rlv3.RateLimitDescriptor, o *rlv3.RateLimitDescriptor_RateLimitOverride) (*Limit, error) {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	period, ok := unitPeriods[unit]
	if !ok {
		return nil, errors.New("limit override: unknown unit " + unit.String())
	}
	path := make([]policy.RLSEntry, len(d.Entries))
	keys := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		path[i] = policy.RLSEntry{Key: e.Key}
		keys[i] = e.Key
	}
	name := s.names.name(domain+"."+strings.Join(keys, "."), domain+"._other")
	l := &Limit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, Period: period, StatKey: name}
	l.proto = &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: unit}
	if l.RequestsPerUnit == 0 {
		return l, nil
	}
	b, err := policy.RLSBudget(l.StatKey, domain, path, tollgate.Limit{Algorithm: algo.FixedWindow, Rate: int64(l.RequestsPerUnit), Period: period}, false)
	if err != nil {
		return nil, err
	}
	l.Budget = b
	return l, nil
}

// overrideNodes are the nodes an override's subject is made with: the
// request's own values.
func overrideNodes(n int) []*node {
	ns := make([]*node, n)
	for i := range ns {
		ns[i] = &plainNode
	}
	return ns
}

var plainNode node
