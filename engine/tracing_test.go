package engine_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/engine"
)

// traced returns f's engine again with a tracer recording every span.
func (f *harness) traced(t testing.TB, sampler sdktrace.Sampler) (*tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	tracer := tp.Tracer("test")
	var err error
	f.e, err = engine.New(engine.Options{Policy: f.p, Store: f.store, Now: func() time.Time { return f.now }, Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	return rec, tracer
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestStoreSpans: every store call of a check is a span under the
// caller's: the decision, the concurrency lease and its release, the
// login guard's holds and their settling.
func TestStoreSpans(t *testing.T) {
	f := newFixture(t)
	rec, tracer := f.traced(t, sdktrace.AlwaysSample())
	ctx, parent := tracer.Start(context.Background(), "request")

	for range 4 { // the plan's 3 a minute, then refused
		f.e.Check(ctx, f.call("/", "a")).Done(ctx)
	}
	v := f.e.Check(ctx, f.call("/slow", "b"))
	v.Done(ctx)
	lg := f.call("/login", "c")
	lg.Account = "acct"
	v = f.e.Check(ctx, lg)
	v.Answered(ctx, 401)
	v.Done(ctx)
	parent.End()

	var names []string
	for _, s := range rec.Ended() {
		if s.Name() == "request" {
			continue
		}
		names = append(names, s.Name())
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("%s: not a child of the caller's span", s.Name())
		}
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v", s.Name(), s.SpanKind())
		}
	}
	// Each admitted call's shadow budget (free.trial) is decided once it
	// is done.
	want := []string{
		"tollgate.store Allow", "tollgate.store Allow", "tollgate.store Allow", "tollgate.store Allow",
		"tollgate.store Allow", "tollgate.store Allow", "tollgate.store Allow",
		"tollgate.store Acquire", "tollgate.store Allow", "tollgate.store Release", "tollgate.store Allow",
		"tollgate.store Reserve", "tollgate.store Lockout", "tollgate.store Allow",
		"tollgate.store Settle", "tollgate.store Lockout", "tollgate.store Allow",
	}
	if len(names) != len(want) {
		t.Fatalf("spans %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("spans %q, want %q", names, want)
		}
	}
	first, shadow, fourth := spanAttrs(rec.Ended()[0]), spanAttrs(rec.Ended()[1]), spanAttrs(rec.Ended()[6])
	if first["tollgate.budget"].AsString() != "free.minute" || first["tollgate.requests"].AsInt64() != 1 || first["tollgate.outcome"].AsString() != "allowed" {
		t.Errorf("first decision's span: %v", first)
	}
	if shadow["tollgate.budget"].AsString() != "free.trial" {
		t.Errorf("shadow decision's span: %v", shadow)
	}
	if fourth["tollgate.budget"].AsString() != "free.minute" || fourth["tollgate.outcome"].AsString() != "refused" {
		t.Errorf("fourth decision's span: %v", fourth)
	}
}

// TestStoreSpansFollowSampling: an unsampled caller records no store
// spans.
func TestStoreSpansFollowSampling(t *testing.T) {
	f := newFixture(t)
	rec, tracer := f.traced(t, sdktrace.ParentBased(sdktrace.NeverSample()))
	ctx, parent := tracer.Start(context.Background(), "request")
	f.e.Check(ctx, f.call("/", "a")).Done(ctx)
	parent.End()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded, none sampled", n)
	}
}

// BenchmarkCheckTracing: a check's cost with tracing off (no tracer), on
// but not sampled, and on and sampled (spans recorded in memory).
func BenchmarkCheckTracing(b *testing.B) {
	for _, mode := range []string{"off", "unsampled", "sampled"} {
		b.Run(mode, func(b *testing.B) {
			f := newFixture(b)
			f.p.AnonymousPlan.Limits[0].Limit.Rate = 1 << 40
			ctx := context.Background()
			var tracer trace.Tracer
			switch mode {
			case "unsampled":
				_, tracer = f.traced(b, sdktrace.NeverSample())
			case "sampled":
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
				tracer = tp.Tracer("bench")
				f.e, _ = engine.New(engine.Options{Policy: f.p, Store: f.store, Now: func() time.Time { return f.now }, Tracer: tracer})
			}
			call := f.call("/", "a")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				c := ctx
				var span trace.Span
				if tracer != nil {
					c, span = tracer.Start(ctx, "request")
				}
				f.e.Check(c, call).Done(c)
				if span != nil {
					span.End()
				}
			}
		})
	}
}
