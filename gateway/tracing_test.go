package gateway_test

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/policy"
)

// receiver is an OTLP/HTTP collector in the test process: it decodes
// every ExportTraceServiceRequest posted to /v1/traces.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("receiver: %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("receiver: %v", err)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Errorf("receiver: %v", err)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("receiver: decoding: %v", err)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.Resource.GetAttributes() {
				if a.Key == "service.name" {
					rc.services = append(rc.services, a.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) all() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

// named returns the spans named name.
func named(spans []*tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s *tracepb.Span) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes {
		m[kv.Key] = value(kv.Value)
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	}
	return v.String()
}

// traced is the quickstart policy sending traces to rc, with edits.
func traced(t *testing.T, up string, rc *receiver, tracing string, edits ...string) *policy.Policy {
	t.Helper()
	return quickstart(t, up, append([]string{"version: quickstart-1", "version: quickstart-1\ntracing: {endpoint: \"" + rc.URL + "\"" + tracing + "}"}, edits...)...)
}

// stop stops r's gateway and closes it, flushing its spans.
func stop(r *running) {
	client.CloseIdleConnections()
	r.cancel()
	err := <-r.done
	r.done <- err // for the cleanup
	r.g.Close()
}

// traceparent returns the trace and parent ids of a traceparent header.
func traceparent(t *testing.T, h string) (trace, parent string) {
	t.Helper()
	parts := strings.Split(h, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("traceparent %q", h)
	}
	return parts[1], parts[2]
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

// TestTracingSpans: a request is a server span with the decision, a child
// span for its store call and a client span around the upstream call,
// whose trace context the upstream receives; the access log names the
// trace. Identities appear as pseudonyms only.
func TestTracingSpans(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			up, rc := newUpstream(t), newReceiver(t)
			redisURL := ""
			if store == "redis" {
				flushShared(t)
				redisURL = "redis://" + srv.Addr + "/0"
			}
			r := start(t, traced(t, up.URL, rc, ", service_name: edge-gw"), redisURL)
			resp := get(t, r.public+"/api/items", "X-API-Key", proKey, "Tracestate", "client=secret")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			upTrace, upParent := traceparent(t, up.lastHeader().Get("Traceparent"))
			if ts := up.lastHeader().Get("Tracestate"); ts != "" {
				t.Errorf("upstream got the client's tracestate %q", ts)
			}
			stop(r)

			spans := rc.all()
			servers := named(spans, "HTTP GET api")
			if len(servers) != 1 {
				t.Fatalf("%d server spans in %v", len(servers), spans)
			}
			sv := servers[0]
			if sv.Kind != tracepb.Span_SPAN_KIND_SERVER || len(sv.ParentSpanId) != 0 {
				t.Errorf("server span kind %v parent %x", sv.Kind, sv.ParentSpanId)
			}
			a := attrs(sv)
			for k, want := range map[string]any{"http.request.method": "GET", "http.route": "api", "http.response.status_code": int64(200),
				"tollgate.route_group": "api", "tollgate.outcome": "allowed", "tollgate.budget": "pro", "tollgate.subject_kind": "key"} {
				if a[k] != want {
					t.Errorf("server span %s = %v, want %v", k, a[k], want)
				}
			}
			for _, s := range spans {
				for _, kv := range s.Attributes {
					if kv.Key != "tollgate.upstream" && (strings.Contains(kv.Value.String(), proKey) || strings.Contains(kv.Value.String(), "127.0.0.1")) {
						t.Errorf("span %s holds a raw identity in %s", s.Name, kv.Key)
					}
				}
			}
			stores := named(spans, "tollgate.store Allow")
			if len(stores) != 1 {
				t.Fatalf("%d store spans", len(stores))
			}
			st := stores[0]
			if !bytes.Equal(st.TraceId, sv.TraceId) || !bytes.Equal(st.ParentSpanId, sv.SpanId) {
				t.Errorf("store span in trace %x under %x; server span %x/%x", st.TraceId, st.ParentSpanId, sv.TraceId, sv.SpanId)
			}
			if a := attrs(st); a["tollgate.budget"] != "pro" || a["tollgate.requests"] != int64(1) || a["tollgate.outcome"] != "allowed" {
				t.Errorf("store span attributes %v", a)
			}
			clients := named(spans, "HTTP GET")
			if len(clients) != 1 || clients[0].Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Fatalf("client spans %v", clients)
			}
			cl := clients[0]
			if !bytes.Equal(cl.ParentSpanId, sv.SpanId) || attrs(cl)["http.response.status_code"] != int64(200) {
				t.Errorf("client span %v", cl)
			}
			if upTrace != hexOf(sv.TraceId) || upParent != hexOf(cl.SpanId) {
				t.Errorf("upstream traceparent %s-%s; trace %x, client span %x", upTrace, upParent, sv.TraceId, cl.SpanId)
			}
			rc.mu.Lock()
			if len(rc.services) == 0 || rc.services[0] != "edge-gw" {
				t.Errorf("service names %v", rc.services)
			}
			rc.mu.Unlock()
			lines := accessLines(t, r)
			if len(lines) != 1 || lines[0]["trace_id"] != hexOf(sv.TraceId) {
				t.Errorf("access lines %v, want trace_id %x", lines, sv.TraceId)
			}
		})
	}
}

const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent = "00f067aa0ba902b7"
)

// TestTracingContinuesTrustedContext: a traceparent from a trusted proxy
// is continued, and its sampled flag honoured even at sample 0; from any
// other peer it is ignored (a new trace, at the policy's share) and the
// upstream gets the gateway's context, not the client's.
func TestTracingContinuesTrustedContext(t *testing.T) {
	t.Run("trusted", func(t *testing.T) {
		up, rc := newUpstream(t), newReceiver(t)
		r := start(t, traced(t, up.URL, rc, ", sample: 0"), "")
		get(t, r.public+"/api/items", "X-API-Key", proKey, "Traceparent", "00-"+clientTrace+"-"+clientParent+"-01")
		if tr, _ := traceparent(t, up.lastHeader().Get("Traceparent")); tr != clientTrace {
			t.Errorf("upstream trace %s, want the client's %s", tr, clientTrace)
		}
		stop(r)
		servers := named(rc.all(), "HTTP GET api")
		if len(servers) != 1 {
			t.Fatalf("%d server spans", len(servers))
		}
		if hexOf(servers[0].TraceId) != clientTrace || hexOf(servers[0].ParentSpanId) != clientParent {
			t.Errorf("server span %x under %x, want %s under %s", servers[0].TraceId, servers[0].ParentSpanId, clientTrace, clientParent)
		}
		if n := len(named(rc.all(), "tollgate.store Allow")); n != 1 {
			t.Errorf("%d store spans", n)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		up, rc := newUpstream(t), newReceiver(t)
		r := start(t, traced(t, up.URL, rc, "", `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: []"), "")
		get(t, r.public+"/api/items", "X-API-Key", proKey, "Traceparent", "00-"+clientTrace+"-"+clientParent+"-01")
		tr, _ := traceparent(t, up.lastHeader().Get("Traceparent"))
		stop(r)
		servers := named(rc.all(), "HTTP GET api")
		if len(servers) != 1 {
			t.Fatalf("%d server spans", len(servers))
		}
		if got := hexOf(servers[0].TraceId); got == clientTrace || len(servers[0].ParentSpanId) != 0 || tr != got {
			t.Errorf("server span %s under %x, upstream trace %s: want a new root trace", got, servers[0].ParentSpanId, tr)
		}
	})
}

// TestTracingSampleZero: at sample 0 no span is sent; the upstream still
// gets a (not sampled) trace context.
func TestTracingSampleZero(t *testing.T) {
	up, rc := newUpstream(t), newReceiver(t)
	r := start(t, traced(t, up.URL, rc, ", sample: 0"), "")
	for range 5 {
		get(t, r.public+"/api/items", "X-API-Key", proKey)
	}
	if h := up.lastHeader().Get("Traceparent"); !strings.HasSuffix(h, "-00") {
		t.Errorf("upstream traceparent %q, want one not sampled", h)
	}
	stop(r)
	if spans := rc.all(); len(spans) != 0 {
		t.Errorf("%d spans at sample 0", len(spans))
	}
}

// TestTracingOff: without an endpoint nothing is traced; a client's trace
// context reaches the upstream unchanged, and none is added.
func TestTracingOff(t *testing.T) {
	up := newUpstream(t)
	r := start(t, quickstart(t, up.URL), "")
	const tp = "00-" + clientTrace + "-" + clientParent + "-01"
	get(t, r.public+"/api/items", "X-API-Key", proKey, "Traceparent", tp, "Tracestate", "a=b")
	if h := up.lastHeader(); h.Get("Traceparent") != tp || h.Get("Tracestate") != "a=b" {
		t.Errorf("upstream trace context %q %q, want the client's", h.Get("Traceparent"), h.Get("Tracestate"))
	}
	get(t, r.public+"/api/items", "X-API-Key", proKey)
	if h := up.lastHeader().Get("Traceparent"); h != "" {
		t.Errorf("upstream got traceparent %q with tracing off", h)
	}
	for _, l := range accessLines(t, r) {
		if _, ok := l["trace_id"]; ok {
			t.Errorf("access line with a trace id: %v", l)
		}
	}
}

// TestTracingChangeNeedsRestart: a reload that changes the tracing
// settings is refused, as a changed store is: the tracer provider is made
// once, at start.
func TestTracingChangeNeedsRestart(t *testing.T) {
	up, rc := newUpstream(t), newReceiver(t)
	r := start(t, traced(t, up.URL, rc, ""), "")
	if err := r.g.Reload(traced(t, up.URL, rc, ", sample: 0.5")); err == nil || !strings.Contains(err.Error(), "tracing") {
		t.Fatalf("reload changing tracing.sample: %v", err)
	}
	if err := r.g.Reload(quickstart(t, up.URL)); err == nil {
		t.Fatal("reload turning tracing off was applied")
	}
	if err := r.g.Reload(traced(t, up.URL, rc, "", "version: quickstart-1", "version: quickstart-2")); err != nil {
		t.Fatalf("reload with the same tracing: %v", err)
	}
}
