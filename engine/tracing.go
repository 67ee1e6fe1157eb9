package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// storeSpan starts the span of one store call named name (a constant:
// "tollgate.store Allow", ...) charging n requests, the first under
// budget, as a child of the span in ctx, and returns the context to call
// the store with. Without a tracer it returns ctx and a nil span, and
// costs nothing.
func (e *Engine) storeSpan(ctx context.Context, name, budget string, n int) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	return e.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("tollgate.budget", budget), attribute.Int("tollgate.requests", n)))
}

// endStoreSpan ends span (nil: none) with the call's outcome (allowed,
// refused, done), or error and the error when the store failed.
func endStoreSpan(span trace.Span, outcome string, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetAttributes(attribute.String("tollgate.outcome", "error"))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("tollgate.outcome", outcome))
	}
	span.End()
}

// allowedOr is "allowed" if ok, else "refused".
func allowedOr(ok bool) string {
	if ok {
		return "allowed"
	}
	return "refused"
}
