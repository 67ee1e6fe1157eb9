// Package grpclimit is Tollgate for gRPC servers: unary and stream server
// interceptors that decide every call through the decision engine
// (package engine), per method, as package httplimit does for HTTP, and a
// client interceptor that backs off as the refusals ask.
//
// A call's route is the policy route matching its full method name,
// "/package.Service/Method", as a path with method POST: a route with
// path /helloworld.Greeter/SayHello names one method, a prefix route
// /helloworld.Greeter/ every method of the service. Its subject is found
// exactly as httplimit finds a request's, from the call's metadata read as
// HTTP headers by the same parsers: an API key ("authorization: Bearer
// <key>" or "x-api-key"), else a user id in the metadata key named by the
// policy's user_header (lower-cased, as gRPC metadata keys are) when the
// peer is a trusted proxy, else the client address: the peer's, or, when
// the peer is a trusted proxy, the one x-forwarded-for (or forwarded)
// vouches for. A peer that is not a TCP address has no client address,
// and its calls are refused with InvalidArgument.
//
// A refused call never reaches the handler. It ends with a Trailers-Only
// response: codes.ResourceExhausted (a rate budget, a concurrency limit,
// too many invalid keys) or codes.Unavailable (a route that fails closed
// while the store is unavailable), with a google.rpc.RetryInfo detail and
// the trailer grpc-retry-pushback-ms, which grpc-go's own retry policy
// obeys; an unknown or malformed API key is codes.Unauthenticated. Every
// decided call carries the ratelimit and ratelimit-policy metadata of the
// RateLimit headers: in the response header when admitted, in the
// trailer when refused. For a call from a peer that is not a trusted
// proxy, the handler's incoming metadata has no user id key: only trusted
// proxies may set it. [FromContext] tells the handler whom the call was
// charged to.
//
// Routes with a login guard are not supported over gRPC (there is no
// request body to read an account from before the handler): their calls
// are refused with codes.FailedPrecondition, charging nothing.
// Concurrency limits are: the slot is held until the unary handler
// returns, or until the stream ends.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
)

// PushbackKey is the trailer grpc-go's retry policy reads the server's
// retry delay from, in milliseconds.
const PushbackKey = "grpc-retry-pushback-ms"

// Options configures the interceptors. Store and Policy are required;
// the zero value of every other field is the default.
type Options struct {
	// Engine, if set, decides every call: the one the HTTP middleware or
	// a gateway also decides with, so that a key's budget is one budget
	// over both. Its policy is the Policy, and the fields that configure
	// an engine (Policy, Store, Logger, Metrics, LogRefusalsPerSecond,
	// Now, DenyCacheSize, Tracer) are not read. Without it the limiter
	// builds its own.
	Engine *engine.Engine
	// Policy is what to enforce; its routes' paths name gRPC methods.
	Policy *policy.Policy
	Store  tollgate.Store
	// Logger receives refusals (sampled) and store errors; nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics, if set, counts decisions and store calls.
	Metrics *engine.Metrics
	// LogRefusalsPerSecond bounds the log lines of each repeated event
	// (see engine.Options).
	LogRefusalsPerSecond float64
	// Now, if set, is the clock every decision is made at; nil means the
	// store's own clock.
	Now func() time.Time
	// DenyCacheSize bounds the engine's deny cache (see
	// engine.Options.DenyCacheSize).
	DenyCacheSize int
	// Tracer, if set, records a span per store call (see
	// engine.Options.Tracer).
	Tracer trace.Tracer
	// RequireRoute refuses calls to methods no route matches with
	// codes.Unimplemented instead of limiting them under the subject's
	// plan at cost 1.
	RequireRoute bool
}

// Subject is who a call was attributed to: the identity every front
// reports (engine.Identity).
type Subject = engine.Identity

// Info is what the interceptor decided, for the handler behind it.
type Info struct {
	Route    *policy.Route // nil when no route matched
	Subject  Subject
	Decision tollgate.Decision
}

type ctxKey struct{}

// FromContext returns the interceptor's Info for a call it admitted.
func FromContext(ctx context.Context) (*Info, bool) {
	i, ok := ctx.Value(ctxKey{}).(*Info)
	return i, ok
}

// Limiter holds the interceptors' decision engine: a unary and a stream
// interceptor of one Limiter share budgets, identities and penalties.
type Limiter struct {
	opts   Options
	engine *engine.Engine
}

// New returns a Limiter deciding under opts.
func New(opts Options) (*Limiter, error) {
	if opts.Engine != nil {
		opts.Policy = opts.Engine.Policy()
		return &Limiter{opts: opts, engine: opts.Engine}, nil
	}
	if opts.Store == nil || opts.Policy == nil {
		return nil, errors.New("creating grpc limiter: Store and Policy are required")
	}
	e, err := engine.New(engine.Options{Policy: opts.Policy, Store: opts.Store, Logger: opts.Logger,
		Metrics: opts.Metrics, LogRefusalsPerSecond: opts.LogRefusalsPerSecond, Now: opts.Now,
		DenyCacheSize: opts.DenyCacheSize, Tracer: opts.Tracer})
	if err != nil {
		return nil, fmt.Errorf("creating grpc limiter: %w", err)
	}
	return &Limiter{opts: opts, engine: e}, nil
}

// Unary returns the unary server interceptor. On a token route the
// trailers the handler sets settle the call (InputTokensKey,
// OutputTokensKey).
func (l *Limiter) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		d, err := l.decide(ctx, info.FullMethod)
		if err != nil {
			// Trailer only: a refusal with a header is not Trailers-Only,
			// and grpc-go's retry policy never retries it.
			if len(d.trailer) > 0 {
				grpc.SetTrailer(ctx, d.trailer)
			}
			return nil, err
		}
		defer done(ctx, d.v)
		if len(d.header) > 0 {
			grpc.SetHeader(ctx, d.header)
		}
		if !d.v.Wait(ctx) {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		hctx := l.handlerContext(ctx, d.info)
		if d.v.Call.Tokens == nil {
			resp, err := handler(hctx, req)
			d.v.Answered(ctx, answerStatus(err))
			return resp, err
		}
		var t trailers
		resp, err := handler(withTrailers(hctx, &t), req)
		d.v.Answered(ctx, answerStatus(err))
		d.v.Used(t.usage(err))
		return resp, err
	}
}

// Stream returns the stream server interceptor: a stream is one call,
// decided when it opens, its concurrency slot held until it ends. The
// messages on it are not counted; on a token route the trailers its
// handler sets settle it (InputTokensKey, OutputTokensKey).
func (l *Limiter) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		d, err := l.decide(ctx, info.FullMethod)
		if err != nil {
			if len(d.trailer) > 0 {
				ss.SetTrailer(d.trailer)
			}
			return err
		}
		defer done(ctx, d.v)
		if len(d.header) > 0 {
			ss.SetHeader(d.header)
		}
		if !d.v.Wait(ctx) {
			return status.FromContextError(ctx.Err()).Err()
		}
		st := &stream{ServerStream: ss, ctx: l.handlerContext(ctx, d.info), v: d.v}
		if d.v.Call.Tokens != nil {
			st.trailers = new(trailers)
		}
		err = handler(srv, st)
		d.v.Answered(ctx, answerStatus(err)) // a stream that sent nothing
		if st.trailers != nil {
			d.v.Used(st.trailers.usage(err))
		}
		return err
	}
}

// handlerContext returns the context the handler is called with: it
// holds info, and, for a call whose peer is not a trusted proxy, the
// incoming metadata without the user id key, which only trusted proxies
// may set (as httplimit removes the user header).
func (l *Limiter) handlerContext(ctx context.Context, info *Info) context.Context {
	ctx = context.WithValue(ctx, ctxKey{}, info)
	name := strings.ToLower(l.opts.Policy.UserHeader)
	if name == "" || info.Subject.TrustedPeer {
		return ctx
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(name)) > 0 {
		md = md.Copy()
		md.Delete(name)
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return ctx
}

// stream is a ServerStream with the Info in its context and, on a token
// route, the trailers its handler sets recorded. Its first header or
// message is the call's answer (Verdict.Answered): the adaptive limit's
// latency sample is the time to it, not to the stream's end.
type stream struct {
	grpc.ServerStream
	ctx      context.Context
	trailers *trailers // nil off a token route
	v        *engine.Verdict
	sent     bool
}

func (s *stream) answer() {
	if !s.sent {
		s.sent = true
		s.v.Answered(s.ctx, http.StatusOK)
	}
}

func (s *stream) SendHeader(md metadata.MD) error {
	s.answer()
	return s.ServerStream.SendHeader(md)
}

func (s *stream) SendMsg(m any) error {
	s.answer()
	return s.ServerStream.SendMsg(m)
}

// answerStatus is the HTTP status that tells Verdict.Answered what a
// call's error says of the service's time: 200 for none, 504 for a
// deadline passed, 500 for a failure (no sample of its latency), 400 for
// a call refused as made.
func answerStatus(err error) int {
	switch status.Code(err) {
	case codes.OK:
		return http.StatusOK
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unimplemented:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

func (s *stream) Context() context.Context { return s.ctx }

func (s *stream) SetTrailer(md metadata.MD) {
	if s.trailers != nil {
		s.trailers.add(md)
	}
	s.ServerStream.SetTrailer(md)
}

// done ends an admitted call's verdict, even if the client went away.
func done(ctx context.Context, v *engine.Verdict) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	v.Done(ctx)
}

// decision is what decide found: for an admitted call its verdict, Info
// and response header; for a refusal the trailer to send with its error.
type decision struct {
	v       *engine.Verdict
	info    *Info
	header  metadata.MD
	trailer metadata.MD
}

// decide asks the engine to decide the call to fullMethod
// (engine.Engine.Decide: its route is the method, its metadata are its
// headers). A non-nil error is the status the call ends with.
func (l *Limiter) decide(ctx context.Context, fullMethod string) (decision, error) {
	req := engine.Request{Front: engine.FrontGRPC, Method: "POST", Path: fullMethod, Header: header(ctx),
		RemoteAddr: remoteAddr(ctx), RequireRoute: l.opts.RequireRoute}
	v := l.engine.Decide(ctx, req)
	if v.Reason.OfRequest() {
		return decision{}, invalid(v)
	}
	var md metadata.MD
	c, reported := v.Reported()
	if f, ok := v.RateLimit(); ok {
		md = rateLimitMD(f)
	}
	if v.Outcome.Admitted() {
		dec := tollgate.Decision{Allowed: true}
		if reported {
			dec = c.Decision
		}
		return decision{v: v, header: md, info: &Info{Route: v.Call.Route, Subject: v.Identity, Decision: dec}}, nil
	}
	if md == nil {
		md = metadata.MD{}
	}
	return decision{trailer: md}, refusal(ctx, v.Call, v, md)
}

// remoteAddr returns the call's peer as host:port, "" unless it is a
// TCP peer.
func remoteAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if _, isTCP := p.Addr.(*net.TCPAddr); isTCP {
			return p.Addr.String()
		}
	}
	return ""
}

// invalid returns the status of a call the engine refused as presented
// (engine.Reason.OfRequest).
func invalid(v *engine.Verdict) error {
	switch v.Reason {
	case engine.ReasonNoRoute:
		return status.Error(codes.Unimplemented, "no route matches this method")
	case engine.ReasonUnsupported:
		return status.Error(codes.FailedPrecondition, "login guards are not supported over gRPC")
	case engine.ReasonMalformedUser:
		return status.Error(codes.InvalidArgument, "the user id metadata is malformed")
	}
	return status.Error(codes.InvalidArgument, v.Detail)
}

// refusal returns the status of a call the engine did not admit, adding
// the pushback to md (its trailer) where a retry may succeed.
func refusal(ctx context.Context, call engine.Call, v *engine.Verdict, md metadata.MD) error {
	if err := finalRefusal(ctx, call, v); err != nil {
		return err
	}
	retry := v.RetryDelay()
	code, msg := retryableRefusal(call, v)
	ms := int64((retry + time.Millisecond - 1) / time.Millisecond)
	md.Set(PushbackKey, strconv.FormatInt(ms, 10))
	st, err := status.New(code, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// finalRefusal returns the status of a refusal that trying again cannot
// cure (an invalid key, a cost no limit admits, a misconfigured route, a
// canceled call), nil for one a retry may.
func finalRefusal(ctx context.Context, call engine.Call, v *engine.Verdict) error {
	switch v.Reason {
	case engine.ReasonInvalidKey:
		msg := "the API key is not valid"
		if call.Key == engine.KeyMalformed {
			msg = "the API key is malformed"
		}
		return status.Error(codes.Unauthenticated, msg)
	case engine.ReasonCostExceedsBurst:
		return status.Error(codes.InvalidArgument, "the call costs more than its rate limit could ever admit")
	case engine.ReasonMisconfigured:
		return status.Error(codes.Internal, "the rate limit for this method is misconfigured")
	case engine.ReasonCanceled:
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		return status.Error(codes.Canceled, "the call was canceled")
	}
	return nil
}

// retryableRefusal returns the code and message of a refusal a retry may
// get past, which is sent with a pushback.
func retryableRefusal(call engine.Call, v *engine.Verdict) (codes.Code, string) {
	switch v.Reason {
	case engine.ReasonRate:
		c, _ := v.Reported()
		return codes.ResourceExhausted, fmt.Sprintf("the %q limit of %d per %v is used up", c.Budget.Name, c.Budget.Limit.Rate, c.Budget.Limit.Period)
	case engine.ReasonConcurrency:
		return codes.ResourceExhausted, fmt.Sprintf("at most %d calls may be in flight here at once", call.Route.Concurrency.Limit)
	case engine.ReasonInvalidKeys:
		return codes.ResourceExhausted, "too many calls with invalid API keys from this address"
	case engine.ReasonUnavailable:
		return codes.Unavailable, "the rate limiter is unavailable and this method does not proceed without it"
	case engine.ReasonKeysUnavailable:
		return codes.Unavailable, "the bearer token cannot be checked: the identity provider's keys are unavailable"
	case engine.ReasonOverload:
		return codes.Unavailable, "the service is at its concurrency limit, which follows its latency"
	}
	// login reasons: login routes are refused before the engine
	return codes.ResourceExhausted, "refused"
}

// header returns the call's incoming metadata as HTTP headers, so that
// the identity package reads it exactly as it reads a request's. Binary
// (-bin) keys and pseudo-headers are left out.
func header(ctx context.Context) http.Header {
	md, _ := metadata.FromIncomingContext(ctx)
	h := make(http.Header, len(md))
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin") {
			continue
		}
		ck := http.CanonicalHeaderKey(k)
		h[ck] = append(h[ck], vs...)
	}
	return h
}

// rateLimitMD returns the RateLimit and RateLimit-Policy fields of v as
// metadata.
func rateLimitMD(f engine.RateLimitFields) metadata.MD {
	return metadata.Pairs("ratelimit-policy", f.Policy, "ratelimit", f.Limit)
}
