package httplimit_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/decidetest"
)

// TestDecideTable runs the engine's table (internal/decidetest) through
// the middleware and through forward-auth: each call as an HTTP request,
// each answer read back from the response, the same as the engine's.
func TestDecideTable(t *testing.T) {
	t.Run("middleware", func(t *testing.T) {
		decidetest.Run(t, decidetest.Cases, decidetest.MemoryStore, func(t *testing.T, f decidetest.Front) (func(decidetest.Call) decidetest.Answer, func()) {
			return httpFront(t, newFront(t, f), false)
		})
	})
	t.Run("forward-auth", func(t *testing.T) {
		var cases []decidetest.Case
		for _, c := range decidetest.Cases {
			if !c.SeesEnd && !c.Direct {
				cases = append(cases, c)
			}
		}
		decidetest.Run(t, cases, decidetest.MemoryStore, func(t *testing.T, f decidetest.Front) (func(decidetest.Call) decidetest.Answer, func()) {
			return httpFront(t, newFront(t, f), true)
		})
	})
}

func newFront(t *testing.T, df decidetest.Front) *httplimit.Front {
	f, err := httplimit.New(httplimit.Options{Policy: df.Policy, Store: df.Store, Now: decidetest.Clock, RequireRoute: df.RequireRoute})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// httpFront answers the table's calls through f's middleware, or its
// forward-auth endpoint asked by a trusted proxy (10.9.9.9) describing
// the call.
func httpFront(t *testing.T, f *httplimit.Front, forwardAuth bool) (func(decidetest.Call) decidetest.Answer, func()) {
	release := make(chan struct{})
	var status int
	var kind string
	entered := make(chan struct{}, 1)
	hold := false
	mw := f.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, _ := httplimit.FromContext(r.Context())
		kind = info.Subject.Kind
		st := status
		if hold {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(st)
	}))
	fa := f.ForwardAuth(httplimit.ForwardAuthOptions{})
	call := func(c decidetest.Call) decidetest.Answer {
		method := c.Method
		if method == "" {
			method = http.MethodGet
		}
		target := c.Path
		if c.RawQuery != "" {
			target += "?" + c.RawQuery
		}
		r := httptest.NewRequest(method, target, strings.NewReader(c.Body))
		r.RemoteAddr = c.RemoteAddr
		for k, v := range c.Header {
			r.Header.Set(k, v)
		}
		if c.Body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		kind, status, hold = "", max(c.Status, http.StatusOK), c.Hold
		rec := httptest.NewRecorder()
		if forwardAuth {
			d := httptest.NewRequest(http.MethodGet, "/auth", nil)
			d.RemoteAddr = "10.9.9.9:1"
			d.Header = r.Header.Clone()
			host, _, _ := net.SplitHostPort(c.RemoteAddr)
			d.Header.Set("X-Forwarded-For", strings.TrimPrefix(r.Header.Get("X-Forwarded-For")+", "+host, ", "))
			d.Header.Set("X-Forwarded-Method", method)
			d.Header.Set("X-Forwarded-Uri", target)
			fa.ServeHTTP(rec, d)
			if rec.Code == http.StatusOK {
				// Forward-auth tells the proxy yes, not whom: the kind
				// is not compared.
				kind = c.Want.Kind
			}
		} else if c.Hold {
			// Held in the handler until the case ends; a refusal never
			// reaches it.
			served := make(chan struct{})
			go func() {
				mw.ServeHTTP(rec, r)
				close(served)
			}()
			select {
			case <-entered:
			case <-served:
			}
		} else {
			mw.ServeHTTP(rec, r)
		}
		return httpAnswer(rec, kind)
	}
	return call, func() { close(release) }
}

// httpAnswer reads the table's answer off a response: admitted when the
// handler (or, for forward-auth, the proxy) was let through, the refusal
// from its problem type, the budget from its RateLimit header, the wait
// from its Retry-After.
func httpAnswer(rec *httptest.ResponseRecorder, kind string) decidetest.Answer {
	a := decidetest.Answer{Admitted: kind != ""}
	if a.Admitted {
		a.Kind = kind
	}
	if rl := rec.Header().Get("RateLimit"); rl != "" {
		name, rest, _ := strings.Cut(strings.TrimPrefix(rl, `"`), `";r=`)
		r, _, _ := strings.Cut(rest, ";")
		a.Budget = name
		a.Remaining, _ = strconv.ParseInt(r, 10, 64)
	}
	if a.Admitted {
		return a
	}
	a.RetryAfter, _ = strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
	var p httplimit.Problem
	json.Unmarshal(rec.Body.Bytes(), &p)
	switch {
	case p.Type == httplimit.ProblemRateLimited:
		a.Refusal = decidetest.Rate
	case p.Type == httplimit.ProblemTooManyInFlight:
		a.Refusal = decidetest.Concurrency
	case p.Type == httplimit.ProblemInvalidKey, p.Type == httplimit.ProblemInvalidToken:
		a.Refusal = decidetest.InvalidKey
	case p.Type == httplimit.ProblemTooManyFailed && strings.Contains(p.Detail, "invalid API keys"):
		a.Refusal = decidetest.InvalidKeys
	case p.Type == httplimit.ProblemLoginLocked:
		a.Refusal = decidetest.LoginLocked
	case p.Type == httplimit.ProblemBadRequest:
		a.Refusal = decidetest.BadRequest
	case p.Type == httplimit.ProblemBadLogin && p.Status == http.StatusMethodNotAllowed:
		a.Refusal = decidetest.LoginElsewhere
	case p.Type == httplimit.ProblemBadLogin:
		a.Refusal = decidetest.BadLogin
	case p.Type == httplimit.ProblemUnavailable && p.Status == http.StatusServiceUnavailable:
		a.Refusal = decidetest.Unavailable
	case p.Type == httplimit.ProblemKeysUnavailable && p.Status == http.StatusServiceUnavailable:
		a.Refusal = decidetest.KeysUnavailable
	case p.Type == httplimit.ProblemNotFound && p.Status == http.StatusNotFound:
		a.Refusal = decidetest.NoRoute
	default:
		a.Refusal = decidetest.Other
	}
	return a
}
