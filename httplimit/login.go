package httplimit

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/policy"
)

// readLogin reads a login request's body, which it forwards re-encoded in
// the form it read (see readLoginBody), and returns the pseudonym of the
// account it names, for the engine's login guard. On failure it has
// answered the request, and nothing is held and no store asked.
func (m *middleware) readLogin(w http.ResponseWriter, r *http.Request, lg *policy.Login, sub Subject) (string, bool) {
	lb, err := readLoginBody(r, lg.AccountField, lg.MaxBody)
	if err != nil && !errors.Is(err, errBadLogin) {
		// The body did not arrive (in time, or at all).
		m.engine.Count("login_body", "login", "-", "unread")
		w.Header().Set("Connection", "close")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			WriteProblem(w, Problem{Type: ProblemBodyTimeout, Status: http.StatusRequestTimeout, Detail: "the request body did not arrive in time"})
		} else {
			// Malformed chunking, a client gone: never an empty 200.
			WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: "the request body could not be read"})
		}
		return "", false
	}
	if err != nil {
		m.engine.Count("login_body", "login", "-", "bad_request")
		m.engine.Log(r.Context(), slog.LevelInfo, "refused: unreadable login request", sub.Subject, "login_body", "login", slog.String("reason", err.Error()))
		WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), errBadLogin.Error()+": ")})
		return "", false
	}
	r.Body = io.NopCloser(bytes.NewReader(lb.body))
	r.ContentLength = int64(len(lb.body))
	r.Header.Set("Content-Length", strconv.Itoa(len(lb.body)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	return m.engine.Pseudonym("acct", accountKey(lb.account)), true
}

// loginElsewhere returns the login route whose path r names under
// another method than the route's, when r could carry a login attempt
// there (a method other than GET, HEAD and OPTIONS, a body, or the
// account field in the query string), or nil. A service's login handler
// may answer any method (a Go handler that does not check r.Method, a PHP
// script, Express's app.all), so such a request, which another route
// (or none) would pass on unguarded, is refused; the login page (a GET
// with neither) is not. route is the route rr matched.
func loginElsewhere(p *policy.Policy, r *http.Request, rr policy.RouteRequest, route *policy.Route) *policy.Route {
	if route != nil && route.Login != nil {
		return nil
	}
	bodiless := r.ContentLength == 0 && len(r.TransferEncoding) == 0
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	if safe && bodiless && r.URL.RawQuery == "" {
		return nil // the usual case: no attempt to carry
	}
	for _, lr := range p.Routes {
		if lr.Login == nil || lr.Method == "" || lr.Method == r.Method {
			continue
		}
		other := rr
		other.Method = lr.Method
		if o, _ := p.MatchRequest(other); o == nil || o.Login == nil {
			continue
		} else if !safe || !bodiless || checkQuery(r.URL.RawQuery, o.Login.AccountField) != nil {
			return o
		}
	}
	return nil
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
