package httplimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
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
		w.Header().Set("Connection", "close")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			WriteProblem(w, Problem{Type: ProblemBodyTimeout, Status: http.StatusRequestTimeout, Detail: "the request body did not arrive in time"})
		} else {
			// Malformed chunking, a client gone: never an empty 200.
			WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: "the request body could not be read"})
		}
		return false
	}
	if err != nil {
		m.engine.Count("login_body", "login", "-", "bad_request")
		m.engine.Log(r.Context(), slog.LevelInfo, "refused: unreadable login request", sub.Subject, "login_body", "login", slog.String("reason", err.Error()))
		WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), errBadLogin.Error()+": ")})
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(lb.body))
	r.ContentLength = int64(len(lb.body))
	r.Header.Set("Content-Length", strconv.Itoa(len(lb.body)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	call.Account, call.Spelling = m.engine.Pseudonym("acct", accountKey(lb.account)), m.engine.Spelling(lb.account)
	return true
}

// loginElsewhere returns why r may reach a login route's handler by
// another way than that route, carrying an attempt the guard would not
// see, with the status to refuse it with, or "". A service's login
// handler may answer any method (a Go handler that does not check
// r.Method, a PHP script, Express's app.all: 405), Rails serves a path
// with a format extension ("/login.json") as the path without it, and
// Symfony and Laravel one under their front controller
// ("/index.php/login") as the path after it (400). r could carry an attempt unless it is a GET, HEAD or OPTIONS
// with no body and no account field in its query string (the login
// page). route is the route rr matched; another route (or none) would
// pass r on unguarded. A 405 comes with the method to Allow.
func loginElsewhere(p *policy.Policy, r *http.Request, rr policy.RouteRequest, route *policy.Route) (why string, status int, allow string) {
	if route != nil && route.Login != nil {
		return "", 0, ""
	}
	bodiless := r.ContentLength == 0 && len(r.TransferEncoding) == 0
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	if safe && bodiless && r.URL.RawQuery == "" {
		return "", 0, "" // the usual case: no attempt to carry
	}
	paths := []string{rr.Path}
	if s := withoutFront(rr.Path); s != "" {
		paths = append(paths, s)
	}
	for _, path := range paths {
		if s := withoutFormat(path); s != "" {
			paths = append(paths, s)
		}
	}
	for _, lr := range p.Routes {
		if lr.Login == nil {
			continue
		}
		for i, path := range paths {
			if i == 0 && (lr.Method == "" || lr.Method == r.Method) {
				continue // matched as it is
			}
			other := rr
			other.Path = path
			if lr.Method != "" {
				other.Method = lr.Method
			}
			o, _ := p.MatchRequest(other)
			if o == nil || o.Login == nil || safe && bodiless && checkQuery(r.URL.RawQuery, o.Login.AccountField) == nil {
				continue
			}
			if i > 0 {
				return "a login route's path with a format extension or under a front controller (Rails serves /login.json, Symfony /index.php/login as /login) is not accepted for a login attempt", http.StatusBadRequest, ""
			}
			return fmt.Sprintf("this path is a login route for %s: a login attempt by another method is not accepted", o.Method), http.StatusMethodNotAllowed, o.Method
		}
	}
	return "", 0, ""
}

// withoutFront returns path without a first segment naming a PHP front
// controller ("/index.php/login" is "/login"), or "" if it has none.
func withoutFront(path string) string {
	first, rest, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok || len(first) <= len(".php") || !strings.EqualFold(first[len(first)-len(".php"):], ".php") {
		return ""
	}
	return "/" + rest
}

// withoutFormat returns path with the format extension of its last
// segment removed ("/login.json/" is "/login"), or "" if it has none.
func withoutFormat(path string) string {
	p := strings.TrimSuffix(path, "/")
	slash := strings.LastIndexByte(p, '/')
	dot := strings.LastIndexByte(p, '.')
	if dot <= slash+1 || dot == len(p)-1 {
		return ""
	}
	return p[:dot]
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
