package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/identity"
)

// traceContext reads and writes W3C trace context (traceparent,
// tracestate) headers.
var traceContext propagation.TraceContext

// openTracing starts the tracer provider when the policy turns tracing on:
// spans are batched and posted to the collector (OTLP/HTTP, protobuf),
// never on a request's path; a collector that is down or slow costs
// dropped spans, not latency. Close flushes what is left.
func (g *Gateway) openTracing() error {
	t := g.pol.Tracing
	if !t.On() {
		return nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(t.URL))
	if err != nil {
		return fmt.Errorf("opening the trace exporter: %w", err)
	}
	version, _ := buildInfo(g.opts.Version)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", t.ServiceName), attribute.String("service.version", version))),
		// A trace continued from a trusted proxy follows its parent's
		// decision; a new one is recorded at the policy's share.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.Sample))))
	g.tracer = tp.Tracer("github.com/tollgate/tollgate/gateway")
	g.closers = append(g.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			g.log.Warn("flushing traces", "error", err.Error())
		}
	})
	return nil
}

// startServerSpan starts the span of a public request, continuing the
// trace context it carries only when its immediate peer is a trusted proxy
// (identity.trusted_proxies): any other client could otherwise choose
// which requests are recorded (a sampled flag on every request) and slip
// spans into traces that are not its own.
func (g *Gateway) startServerSpan(r *http.Request, id string) (*http.Request, trace.Span) {
	ctx := r.Context()
	if peer, ok := identity.PeerAddr(r); ok && g.Policy().Trusted.Contains(peer) {
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	method := spanMethod(r.Method)
	ctx, span := g.tracer.Start(ctx, "HTTP "+method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("tollgate.request_id", id)))
	return r.WithContext(ctx), span
}

// endServerSpan names the span after the route matched and ends it with
// the decision. Identities appear only as the subject's pseudonym.
func endServerSpan(span trace.Span, method string, rec *httplimit.Record, status int) {
	name := "HTTP " + spanMethod(method)
	if rec.Route != "" {
		name += " " + rec.Route
	}
	span.SetName(name)
	span.SetAttributes(
		attribute.String("http.route", rec.Route),
		attribute.Int("http.response.status_code", status),
		attribute.String("tollgate.route_group", rec.Group),
		attribute.String("tollgate.outcome", rec.Outcome),
		attribute.String("tollgate.budget", rec.Budget),
		attribute.String("tollgate.subject_kind", rec.SubjectKind),
		attribute.String("tollgate.subject", rec.Subject))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

// spanMethod is method if it is a standard one, else "_OTHER" (as
// OpenTelemetry's conventions say): span names stay few whatever clients
// send.
func spanMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "_OTHER"
}

// startUpstreamSpan starts the client span around the call to the
// upstream; the proxy sends its trace context (see injectTraceContext).
func (g *Gateway) startUpstreamSpan(r *http.Request, upstream string) (*http.Request, trace.Span) {
	method := spanMethod(r.Method)
	ctx, span := g.tracer.Start(r.Context(), "HTTP "+method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("tollgate.upstream", upstream)))
	return r.WithContext(ctx), span
}

// injectTraceContext replaces whatever trace context the client sent
// with the upstream span's in.
func injectTraceContext(ctx context.Context, out http.Header) {
	out.Del("Traceparent")
	out.Del("Tracestate")
	traceContext.Inject(ctx, propagation.HeaderCarrier(out))
}

// upstreamStatus records the upstream's status on its span.
func upstreamStatus(resp *http.Response) error {
	span := trace.SpanFromContext(resp.Request.Context())
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	return nil
}
