package gateway

import (
	crand "crypto/rand"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
)

// requestIDPattern is what an X-Request-ID from a client may look like to
// be kept: short, and nothing a log or a header could be made to say
// more with.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:/+=-]{1,128}$`)

// requestMetrics are the public listener's request metrics, by route
// group (bounded by the policy).
type requestMetrics struct {
	duration, upstream *prometheus.HistogramVec
	responses          *prometheus.CounterVec
	dropped            prometheus.Counter
}

func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &requestMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tollgate_request_duration_seconds", Help: "Public requests from the first byte read to the last written, by route group.",
			Buckets: buckets}, []string{"route_group"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tollgate_upstream_duration_seconds", Help: "Time the upstream took to answer admitted requests, by route group.",
			Buckets: buckets}, []string{"route_group"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_responses_total", Help: "Public responses by route group and status class (2xx, 4xx, …).",
		}, []string{"route_group", "code"}),
	}
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_access_log_dropped_total", Help: "Access log lines dropped over logging.access_per_second.",
	})
	reg.MustRegister(m.duration, m.upstream, m.responses, m.dropped)
	return m
}

// prime makes every route group's series of p exist at zero.
func (m *requestMetrics) prime(p *policy.Policy) {
	groups := map[string]bool{"unmatched": true}
	for _, r := range p.Routes {
		groups[r.Group] = true
	}
	for g := range groups {
		for _, c := range []string{"2xx", "3xx", "4xx", "5xx"} {
			m.responses.WithLabelValues(g, c)
		}
	}
}

// observe wraps the public handler: it gives each request an id (the
// client's X-Request-ID if it is a plain short token, else a new one),
// forwarded to the upstream (responses are left as the upstream made
// them: a policy in shadow answers exactly as a plain proxy); counts and times
// it by route group; and writes the access log line, for the policy's
// share of requests.
func (g *Gateway) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := requestID(r)
		var span trace.Span
		if g.tracer != nil {
			r, span = g.startServerSpan(r, id)
		}
		rec := &httplimit.Record{Group: "unmatched"}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(httplimit.WithRecord(r.Context(), rec)))
		d := time.Since(start)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		if span != nil {
			endServerSpan(span, r.Method, rec, status)
		}
		m := g.requests
		m.duration.WithLabelValues(rec.Group).Observe(d.Seconds())
		m.responses.WithLabelValues(rec.Group, strconv.Itoa(status/100)+"xx").Inc()
		if rec.Upstream > 0 {
			m.upstream.WithLabelValues(rec.Group).Observe(rec.Upstream.Seconds())
		}
		g.logAccess(r, id, rec, span, status, d, sw.bytes)
	})
}

// requestID returns r's id, the client's X-Request-Id when it sent one
// that is a plain short token; else a new one, which it sets on r for the
// upstream.
func requestID(r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	if len(r.Header.Values("X-Request-Id")) != 1 || !requestIDPattern.MatchString(id) {
		id = newRequestID()
		r.Header.Set("X-Request-Id", id)
	}
	return id
}

// logAccess writes the access log line of request r (its id, its record,
// its span when traced, its status, duration and bytes written) for the
// policy's share of requests, at most the policy's lines a second: those
// over are counted as dropped.
func (g *Gateway) logAccess(r *http.Request, id string, rec *httplimit.Record, span trace.Span, status int, d time.Duration, bytes int64) {
	lg := g.Policy().Log
	if lg.AccessSample <= 0 || lg.AccessSample < 1 && rand.Float64() >= lg.AccessSample {
		return
	}
	if !g.accessLimit(lg.AccessPerSecond).Allow() {
		g.requests.dropped.Inc()
		return
	}
	var buf [16]slog.Attr
	attrs := append(buf[:0],
		slog.String("request_id", id),
		slog.String("method", r.Method),
		slog.String("route", rec.Route),
		slog.String("route_group", rec.Group),
		slog.Int("status", status),
		slog.String("outcome", rec.Outcome),
		slog.String("budget", rec.Budget),
		slog.String("subject", rec.Subject),
		slog.String("subject_kind", rec.SubjectKind),
		slog.Float64("duration_ms", ms(d)),
		slog.Float64("decision_ms", ms(rec.Decision)),
		slog.Float64("upstream_ms", ms(rec.Upstream)),
		slog.Int64("bytes", bytes))
	if span != nil {
		if sc := span.SpanContext(); sc.HasTraceID() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
	}
	g.access.LogAttrs(r.Context(), slog.LevelInfo, "access", attrs...)
}

// accessLimit returns the limiter of access log lines at perSecond a
// second (burst the same), made anew when a reload changes the rate.
func (g *Gateway) accessLimit(perSecond int) *rate.Limiter {
	l := g.accessLines.Load()
	if l == nil || l.Burst() != perSecond {
		l = rate.NewLimiter(rate.Limit(perSecond), perSecond)
		g.accessLines.Store(l)
	}
	return l
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// newRequestID returns 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	cryptoRead(b[:])
	return hex.EncodeToString(b[:])
}

var cryptoRead = func(b []byte) { crand.Read(b) }

// statusWriter remembers the status and counts the body bytes written.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
