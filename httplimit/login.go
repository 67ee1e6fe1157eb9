package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/policy"
)

// readLogin reads a login request's body, which it forwards re-encoded in
// the form it read (see readLoginBody), and sets call's Account to the
// pseudonym of the account it names and its Spelling to that of the
// name as written, for the engine's login guard. On failure it has
// answered the request, and nothing is held and no store asked.
func (m *middleware) readLogin(w http.ResponseWriter, r *http.Request, lg *policy.Login, sub Subject, call *engine.Call) bool {
	lb, err := readLoginBody(r, lg.AccountField, lg.MaxBody)
	if err != nil && !errors.Is(err, errBadLogin) {
		// The body did not arrive (in time, or at all).
		m.engine.Count("login_body", "login", "-", "unread")
		writeUnread(w, err)
		return false
	}
	if err != nil {
		m.engine.Count("login_body", "login", "-", "bad_request")
		m.engine.Log(r.Context(), slog.LevelInfo, "refused: unreadable login request", sub.Subject, "login_body", "login", slog.String("reason", err.Error()))
		WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), errBadLogin.Error()+": ")})
		return false
	}
	putBody(r, lb.body)
	call.Account, call.Spelling = m.engine.Pseudonym("acct", accountKey(lb.account)), m.engine.Spelling(lb.account)
	return true
}

// loginElsewhere returns why r may reach a login route's handler by
// another method than that route's, carrying an attempt the guard would
// not see (a Go handler that does not check r.Method, a PHP script,
// Express's app.all), with the method to Allow, or "": at its own path or
// one it reads as (others, see otherPaths: CodeIgniter's
// /index.php?/login). r could carry an attempt unless it is a GET, HEAD
// or OPTIONS with no body and no account field in its query string (the
// login page). route is the route rr matched; another route (or none)
// would pass r on unguarded. The path's other spellings (/login.json,
// /index.php/login) are the login route's own: they match it
// (policy.MatchKey).
func loginElsewhere(p *policy.Policy, r *http.Request, rr policy.RouteRequest, route *policy.Route, others []string) (why, allow string) {
	if route != nil && route.Login != nil {
		return "", ""
	}
	bodiless := r.ContentLength == 0 && len(r.TransferEncoding) == 0
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	if safe && bodiless && r.URL.RawQuery == "" && len(others) == 0 {
		return "", "" // the usual case: no attempt to carry
	}
	o := loginRouteAt(p, rr, others)
	if o == nil || safe && bodiless && checkQuery(r.URL.RawQuery, o.Login.AccountField) == nil {
		return "", ""
	}
	return fmt.Sprintf("this path is a login route for %s: a login attempt by another method is not accepted", o.Method), o.Method
}

// loginRouteAt returns the login route that rr's path, or one of others
// that it reads as, matches under the route's own method (whatever rr's
// method), or nil.
func loginRouteAt(p *policy.Policy, rr policy.RouteRequest, others []string) *policy.Route {
	for _, path := range append([]string{rr.Path}, others...) {
		for _, lr := range p.Routes {
			if lr.Login == nil {
				continue
			}
			other := rr
			other.Path = path
			if lr.Method != "" {
				other.Method = lr.Method
			}
			if o, _ := p.MatchRequest(other); o != nil && o.Login != nil {
				return o
			}
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
