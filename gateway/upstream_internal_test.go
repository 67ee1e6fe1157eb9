package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// failOnce answers its first request with err, and the others 200,
// recording the bodies it was sent.
type failOnce struct {
	err    error
	calls  int
	bodies []string
}

func (f *failOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls++
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		f.bodies = append(f.bodies, string(b))
	}
	if f.calls == 1 {
		return nil, f.err
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// TestReplayCanceled: a request that failed as canceled by another's
// cancellation, not its own, is sent once more if it can be; no other is.
func TestReplayCanceled(t *testing.T) {
	canceled := context.Background() // the request's own context lives on
	ownCtx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		why     string
		req     func() *http.Request
		err     error
		calls   int
		replied bool
	}{
		{"a GET canceled by another request's cancellation", func() *http.Request {
			r, _ := http.NewRequestWithContext(canceled, "GET", "http://up/x", nil)
			return r
		}, context.Canceled, 2, true},
		{"its own client went away", func() *http.Request {
			r, _ := http.NewRequestWithContext(ownCtx, "GET", "http://up/x", nil)
			return r
		}, context.Canceled, 1, false},
		{"a POST may not be sent twice", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://up/x", strings.NewReader("a=1"))
			return r
		}, context.Canceled, 1, false},
		{"a POST with an Idempotency-Key and its body again", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://up/x", strings.NewReader("a=1"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, context.Canceled, 2, true},
		{"another failure is the upstream's", func() *http.Request {
			r, _ := http.NewRequest("GET", "http://up/x", nil)
			return r
		}, errors.New("connection refused"), 1, false},
	} {
		f := &failOnce{err: c.err}
		resp, err := replayCanceled{f}.RoundTrip(c.req())
		if f.calls != c.calls || (err == nil) != c.replied {
			t.Errorf("%s: %d calls, error %v; want %d calls, answered %v", c.why, f.calls, err, c.calls, c.replied)
		}
		if resp != nil {
			resp.Body.Close()
		}
		if c.calls == 2 && len(f.bodies) == 2 && f.bodies[0] != f.bodies[1] {
			t.Errorf("%s: sent %q, then %q", c.why, f.bodies[0], f.bodies[1])
		}
	}
}
