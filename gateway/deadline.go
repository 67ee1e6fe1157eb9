package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/policy"
)

// A bodyClock is the deadline of one request's body. It starts when the
// body is first needed: read (when the gateway forwards it, or the login
// guard reads it), or when the response begins or the handler returns
// (then net/http reads what is left of it, up to 256 KiB). A request the
// gateway holds first, to shape it, is not charged for the wait.
type bodyClock struct {
	once     sync.Once
	rc       *http.ResponseController
	timeout  time.Duration
	deadline time.Time // set by start
	timedOut atomic.Bool
	counted  prometheus.Counter
}

// start starts the clock, once, and returns the deadline.
func (c *bodyClock) start() time.Time {
	c.once.Do(func() {
		c.deadline = time.Now().Add(c.timeout)
		// Once the body is read to its end, net/http clears this deadline
		// itself; until then it covers every read of it.
		c.rc.SetReadDeadline(c.deadline)
	})
	return c.deadline
}

type bodyClockKey struct{}

// bodyTimedOut reports whether the body of the request with ctx did not
// arrive before its deadline.
func bodyTimedOut(ctx context.Context) bool {
	c, _ := ctx.Value(bodyClockKey{}).(*bodyClock)
	return c != nil && c.timedOut.Load()
}

// timedBody is a request body read under its clock; it notes when the
// deadline passes.
type timedBody struct {
	io.ReadCloser
	c *bodyClock
}

func (b *timedBody) Read(p []byte) (int, error) {
	b.c.start()
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && b.c.timedOut.CompareAndSwap(false, true) {
		b.c.counted.Inc()
	}
	return n, err
}

// bounded puts every request of h under the slow-client deadlines: its
// body must arrive within BodyTimeout of when it is first needed (see
// bodyClock; on every route, whether or not anything reads it), and each
// write of its response must be taken in by the client within
// SendTimeout. Either failure closes the connection. listener names the
// metrics' listener.
func bounded(h http.Handler, cl policy.ConnLimits, m *connMetrics, listener string) http.Handler {
	bodyTimeouts, sendTimeouts := m.timeouts.WithLabelValues(listener, "body"), m.timeouts.WithLabelValues(listener, "send")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		sw := &sendWriter{ResponseWriter: w, rc: rc, timeout: cl.SendTimeout, counted: sendTimeouts}
		if r.Body != nil && r.Body != http.NoBody {
			sw.body = &bodyClock{rc: rc, timeout: cl.BodyTimeout, counted: bodyTimeouts}
			defer sw.body.start() // what is left is read after the handler
			r = r.WithContext(context.WithValue(r.Context(), bodyClockKey{}, sw.body))
			r.Body = &timedBody{ReadCloser: r.Body, c: sw.body}
		}
		h.ServeHTTP(sw, r)
	})
}

// sendWriter gives every write of a response a deadline of its own: a
// client that stops taking the response in is cut off, however long the
// response, while one that keeps reading is not. A write is given
// between 7/8 of the timeout and all of it: the deadline is moved only
// once an eighth of it has passed, not on each of a stream's many small
// writes and flushes.
type sendWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	counted  prometheus.Counter
	timedOut atomic.Bool
	deadline time.Time // the write deadline set last, or zero
	// body is the request body's clock (nil without a body). Before
	// writing a response net/http reads what is left of the body (up to
	// 256 KiB), so a write's deadline starts no earlier than the body's.
	body *bodyClock
}

// arm makes sure the next write has at least 7/8 of the timeout.
func (s *sendWriter) arm() {
	d := time.Now()
	if s.body != nil {
		if b := s.body.start(); d.Before(b) {
			d = b
		}
	}
	d = d.Add(s.timeout)
	if !s.deadline.IsZero() && d.Sub(s.deadline) < s.timeout/8 {
		return
	}
	s.deadline = d
	s.rc.SetWriteDeadline(d)
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
