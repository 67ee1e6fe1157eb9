package httplimit

import (
	"net/http"

	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// readLogin reads the login r makes (identity.ReadLogin) and forwards its
// body re-encoded in the form it was read in.
func readLogin(r *http.Request, lg *policy.Login) (*identity.Login, error) {
	l, err := identity.ReadLogin(identity.LoginRequest{Header: r.Header, RawQuery: r.URL.RawQuery, Body: r.Body, Length: r.ContentLength},
		lg.AccountField, lg.MaxBody)
	if err != nil {
		return nil, err
	}
	putBody(r, l.Body)
	return l, nil
}

// statusRecorder remembers the status the handler behind wrote, and,
// once armed (the request passed on), calls onStatus with it before the
// status goes out.
type statusRecorder struct {
	http.ResponseWriter
	status   int
	armed    bool
	onStatus func(int)
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
		if s.onStatus != nil && s.armed {
			s.onStatus(code)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
