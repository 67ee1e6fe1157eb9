package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/policy"
)

// bodyState records that a request's body did not arrive in time.
type bodyState struct{ timedOut atomic.Bool }

type bodyStateKey struct{}

// bodyTimedOut reports whether the body of the request with ctx did not
// arrive before its deadline.
func bodyTimedOut(ctx context.Context) bool {
	st, _ := ctx.Value(bodyStateKey{}).(*bodyState)
	return st != nil && st.timedOut.Load()
}

// timedBody is a request body read under a deadline; it notes when the
// deadline passes.
type timedBody struct {
	io.ReadCloser
	st      *bodyState
	counted prometheus.Counter
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && b.st.timedOut.CompareAndSwap(false, true) {
		b.counted.Inc()
	}
	return n, err
}

// bounded puts every request of h under the slow-client deadlines: its
// body must arrive within BodyTimeout of the end of its headers (on every
// route, whether or not anything reads it: net/http reads what is left
// after the handler under the same deadline), and each write of its
// response must be taken in by the client within SendTimeout. Either
// failure closes the connection. listener names the metrics' listener.
func bounded(h http.Handler, cl policy.ConnLimits, m *connMetrics, listener string) http.Handler {
	bodyTimeouts, sendTimeouts := m.timeouts.WithLabelValues(listener, "body"), m.timeouts.WithLabelValues(listener, "send")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// The write deadline of the connection's previous response must
		// not fail this one (nor the 100 Continue net/http may send).
		rc.SetWriteDeadline(time.Time{})
		sw := &sendWriter{ResponseWriter: w, rc: rc, timeout: cl.SendTimeout, counted: sendTimeouts}
		if r.Body != nil && r.Body != http.NoBody {
			// Once the body is read to its end, net/http clears this
			// deadline itself; until then it covers every read of it.
			sw.bodyDeadline = time.Now().Add(cl.BodyTimeout)
			rc.SetReadDeadline(sw.bodyDeadline)
			st := &bodyState{}
			r = r.WithContext(context.WithValue(r.Context(), bodyStateKey{}, st))
			r.Body = &timedBody{ReadCloser: r.Body, st: st, counted: bodyTimeouts}
		}
		h.ServeHTTP(sw, r)
	})
}

// sendWriter gives every write of a response a deadline of its own: a
// client that stops taking the response in is cut off, however long the
// response, while one that keeps reading is not.
type sendWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	counted  prometheus.Counter
	timedOut atomic.Bool
	// bodyDeadline is the request body's deadline (zero without a body).
	// Before writing a response net/http reads what is left of the body
	// (up to 256 KiB), so a write's deadline starts no earlier than it.
	bodyDeadline time.Time
}

func (s *sendWriter) arm() {
	d := time.Now()
	if d.Before(s.bodyDeadline) {
		d = s.bodyDeadline
	}
	s.rc.SetWriteDeadline(d.Add(s.timeout))
}

func (s *sendWriter) check(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && s.timedOut.CompareAndSwap(false, true) {
		s.counted.Inc()
	}
}

func (s *sendWriter) WriteHeader(code int) {
	s.arm()
	s.ResponseWriter.WriteHeader(code)
}

func (s *sendWriter) Write(b []byte) (int, error) {
	s.arm()
	n, err := s.ResponseWriter.Write(b)
	s.check(err)
	return n, err
}

// FlushError flushes under a fresh deadline (http.ResponseController.Flush
// calls it).
func (s *sendWriter) FlushError() error {
	s.arm()
	err := s.rc.Flush()
	s.check(err)
	return err
}

func (s *sendWriter) Flush() { s.FlushError() }

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *sendWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
