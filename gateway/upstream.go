package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
)

// transport returns the upstream transport for a response-header timeout,
// made once and shared by every policy (and reload) that uses the timeout,
// so reloads reuse its connection pool. Builds run one at a time.
func (g *Gateway) transport(timeout time.Duration) *http.Transport {
	if t, ok := g.transports[timeout]; ok {
		return t
	}
	t := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	if g.transports == nil {
		g.transports = map[time.Duration]*http.Transport{}
	}
	g.transports[timeout] = t
	g.closers = append(g.closers, t.CloseIdleConnections)
	return t
}

// copyBuffers lends every proxy the buffers it copies response bodies
// through, where each response would allocate its own 32 KiB.
var copyBuffers = new(bufferPool)

// bufferPool is an httputil.BufferPool of 32 KiB buffers.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}

func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// upstreams returns the handler that sends an admitted request to its
// route's upstream.
func (g *Gateway) upstreams(p *policy.Policy) (http.Handler, error) {
	proxies, err := g.proxies(p)
	if err != nil {
		return nil, err
	}
	echo := Echo()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := httplimit.FromContext(r.Context())
		if !ok || info.Route == nil {
			httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemNotFound, Status: http.StatusNotFound})
			return
		}
		if info.Route.Upstream == policy.BuiltinEcho {
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath = info.Path, ""
			echo.ServeHTTP(w, r2)
			return
		}
		start := time.Now()
		if g.tracer != nil {
			var span trace.Span
			r, span = g.startUpstreamSpan(r, info.Route.Upstream)
			defer span.End()
		}
		proxies[info.Route.Upstream].ServeHTTP(w, r)
		if rec, ok := httplimit.RecordFrom(r.Context()); ok {
			rec.Upstream = time.Since(start)
		}
	}), nil
}

// issues is a list of issues as one error's text.
func issues(list []policy.Issue) string {
	s := make([]string, len(list))
	for i, is := range list {
		s[i] = is.String()
	}
	return strings.Join(s, "; ")
}

// proxies returns the reverse proxy of each upstream p's routes name
// (builtin:echo aside), one per upstream however many routes share it. A
// route without an upstream, or with one that is no URL, is an error.
func (g *Gateway) proxies(p *policy.Policy) (map[string]http.Handler, error) {
	transport := g.transport(p.UpstreamTimeout)
	proxies := map[string]http.Handler{}
	if len(p.GatewayIssues) > 0 {
		return nil, fmt.Errorf("creating gateway: %v", issues(p.GatewayIssues))
	}
	for _, r := range p.Routes {
		if r.Upstream == "" {
			return nil, fmt.Errorf("creating gateway: route %s has no upstream (only the middleware serves routes without one)", r.Name)
		}
		if r.Upstream == policy.BuiltinEcho || proxies[r.Upstream] != nil {
			continue
		}
		target, err := url.Parse(r.Upstream)
		if err != nil {
			return nil, fmt.Errorf("creating gateway: route %s: %w", r.Name, err)
		}
		proxies[r.Upstream] = g.newProxy(target, transport)
	}
	return proxies, nil
}

// newProxy returns the reverse proxy to target over transport. It sends
// the path the middleware matched, the client it charged (and the chain
// that vouched for it) as X-Forwarded-For and X-Real-Ip, and, when
// tracing, the trace context.
func (g *Gateway) newProxy(target *url.URL, transport *http.Transport) *httputil.ReverseProxy {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if info, ok := httplimit.FromContext(pr.In.Context()); ok {
				pr.Out.URL.Path, pr.Out.URL.RawPath = info.Path, ""
				// The client charged, and the chain vouched for; the
				// peer is appended below.
				if ff := info.Subject.ForwardedFor(); ff != "" {
					pr.Out.Header.Set("X-Forwarded-For", ff)
				}
				if a := info.Subject.Addr; a.IsValid() {
					pr.Out.Header.Set("X-Real-Ip", a.String())
				}
			}
			pr.SetURL(target)
			pr.SetXForwarded()
			if g.tracer != nil {
				injectTraceContext(pr.In.Context(), pr.Out.Header)
			}
		},
		Transport:    replayCanceled{transport},
		ErrorHandler: g.upstreamError,
		ErrorLog:     g.proxyLog,
		BufferPool:   copyBuffers,
	}
	if g.tracer != nil {
		proxy.ModifyResponse = upstreamStatus
	}
	return proxy
}

func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if bodyTimedOut(r.Context()) {
		// The client, not the upstream, was too slow: its body did not
		// arrive in time. (net/http has cancelled the request's context.)
		w.Header().Set("Connection", "close")
		httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemBodyTimeout, Status: http.StatusRequestTimeout,
			Detail: "the request body did not arrive in time"})
		return
	}
	if r.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemUpstreamSlow, Status: http.StatusGatewayTimeout,
			Detail: "the upstream did not answer in time"})
		return
	}
	trace.SpanFromContext(r.Context()).SetStatus(codes.Error, err.Error())
	g.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream failed", slog.String("error", err.Error()))
	httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemBadGateway, Status: http.StatusBadGateway,
		Detail: "the upstream could not be reached"})
}

// replayCanceled is an upstream transport that sends a request once more
// when it failed as canceled though its own context was not: another
// request's cancellation reached it (net/http hands a waiting request a
// connection dialed under another request's context, and a held request
// cancelled by its client took a later one with it, answered 502). Only
// a request that can be sent twice is: one the Transport itself would
// retry (GET, HEAD, OPTIONS, TRACE, or with an Idempotency-Key) without
// a body, or with one it can get again.
type replayCanceled struct{ next http.RoundTripper }

func (t replayCanceled) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil || !errors.Is(err, context.Canceled) || r.Context().Err() != nil || !replayable(r) {
		return resp, err
	}
	if r.Body != nil && r.Body != http.NoBody {
		body, gerr := r.GetBody()
		if gerr != nil {
			return resp, err
		}
		r = r.Clone(r.Context())
		r.Body = body
	}
	return t.next.RoundTrip(r)
}

// replayable reports whether r may be sent twice, by net/http's rule.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		if r.Header.Get("Idempotency-Key") == "" && r.Header.Get("X-Idempotency-Key") == "" {
			return false
		}
	}
	return r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
}
