package httplimit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// loginAttempt is what the guard knows of a login request before the
// upstream answers.
type loginAttempt struct {
	guard   *policy.Login
	account string // pseudonym; "" when the body named none
	client  string // client IP pseudonym
}

// loginCheck reads the account from the body (leaving the body intact for
// the upstream) and refuses the attempt if the account is locked or the
// client IP is over its failure budget. It fails closed. On refusal it has
// answered the request and returns false.
func (m *middleware) loginCheck(w http.ResponseWriter, r *http.Request, lg *policy.Login, sub Subject) (*loginAttempt, bool) {
	a := &loginAttempt{guard: lg, client: sub.Client}
	if acct := readAccount(r, lg); acct != "" {
		a.account = m.hasher.Hash("acct", acct)
	}
	now := m.clockTime()
	unavailable := func(err error) (*loginAttempt, bool) {
		m.log.LogAttrs(r.Context(), slog.LevelError, "login guard unavailable, refusing", slog.String("error", err.Error()))
		m.fallback("login", "fail_closed")
		WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, RetryAfter: 1,
			Detail: "login is unavailable while the rate limiter is"})
		return nil, false
	}
	ipReq := []tollgate.Request{{Policy: lg.IPFailures.StoreName, Subject: a.client, Limit: lg.IPFailures.Limit, Now: now}}
	ds, err := m.decideAll(r.Context(), ipReq)
	if err != nil {
		return unavailable(err)
	}
	if ds[0].Remaining == 0 {
		retry := max(1, ceilSeconds(ds[0].ResetAfter))
		m.count(lg.IPFailures.Name, "login", "-", "refused")
		m.logSampled(r.Context(), slog.LevelWarn, "refused: too many failed logins from this address", sub, lg.IPFailures.Name, "login")
		WriteProblem(w, Problem{Type: ProblemTooManyFailed, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("Too many failed logins from this address; retry after %d s.", retry)})
		return nil, false
	}
	if a.account != "" {
		g, ok := m.opts.Store.(tollgate.Guard)
		if !ok {
			return unavailable(fmt.Errorf("the store keeps no login-guard state"))
		}
		res, err := g.Lockout(r.Context(), algo.LockoutRequest{Policy: lg.StoreName, Subject: a.account, Rule: lg.Rule, Op: algo.LockCheck, Now: now})
		if err != nil {
			return unavailable(err)
		}
		if res.Locked {
			retry := max(1, ceilSeconds(time.Duration(res.RetryAfter)*time.Millisecond))
			m.count("login_lock", "login", "-", "refused")
			m.logSampled(r.Context(), slog.LevelWarn, "refused: account locked", Subject{Kind: "account", ID: a.account}, "login_lock", "login",
				slog.Int64("retry_after_s", retry), slog.Int64("level", res.Level))
			WriteProblem(w, Problem{Type: ProblemLoginLocked, Status: http.StatusTooManyRequests, RetryAfter: retry,
				Detail: fmt.Sprintf("This account is locked after repeated failed logins; retry after %d s.", retry)})
			return nil, false
		}
	}
	return a, true
}

// loginRecord records the upstream's verdict on an attempt.
func (m *middleware) loginRecord(ctx context.Context, a *loginAttempt, status int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	now := m.clockTime()
	var op algo.LockOp
	switch {
	case a.guard.FailureStatuses[status]:
		op = algo.LockFail
		req := []tollgate.Request{{Policy: a.guard.IPFailures.StoreName, Subject: a.client, Limit: a.guard.IPFailures.Limit, Cost: 1, Now: now}}
		if _, err := m.decideAll(ctx, req); err != nil {
			m.log.LogAttrs(ctx, slog.LevelError, "recording a failed login", slog.String("error", err.Error()))
		}
	case status >= 200 && status < 300:
		op = algo.LockSucceed
	default:
		return
	}
	if a.account == "" {
		return
	}
	if g, ok := m.opts.Store.(tollgate.Guard); ok {
		if _, err := g.Lockout(ctx, algo.LockoutRequest{Policy: a.guard.StoreName, Subject: a.account, Rule: a.guard.Rule, Op: op, Now: now}); err != nil {
			m.log.LogAttrs(ctx, slog.LevelError, "recording a login outcome", slog.String("error", err.Error()))
		}
	}
}

// readAccount returns the normalised account named by the request body's
// field, reading at most MaxBody bytes and leaving the body whole for the
// upstream. It returns "" when there is none.
func readAccount(r *http.Request, lg *policy.Login) string {
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, lg.MaxBody+1))
	rest := r.Body
	r.Body = readCloser{io.MultiReader(bytes.NewReader(head), rest), rest}
	if err != nil || int64(len(head)) > lg.MaxBody {
		return ""
	}
	var acct string
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/x-www-form-urlencoded" {
		if v, err := url.ParseQuery(string(head)); err == nil {
			acct = v.Get(lg.AccountField)
		}
	} else {
		var body map[string]any
		if json.Unmarshal(head, &body) == nil {
			acct, _ = body[lg.AccountField].(string)
		}
	}
	acct = strings.ToLower(strings.TrimSpace(acct))
	if len(acct) > 256 || !utf8.ValidString(acct) {
		return ""
	}
	return acct
}

type readCloser struct {
	io.Reader
	io.Closer
}

// statusRecorder remembers the status the handler behind wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// leaseIDs numbers this process's leases; the prefix is random per process
// so that instances sharing Redis never collide.
var (
	leasePrefix = func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b)
	}()
	leaseSeq atomic.Uint64
)

// acquireSlot takes a concurrency slot for the request. It returns a
// release function, or false when it has answered the request itself.
func (m *middleware) acquireSlot(w http.ResponseWriter, r *http.Request, route *policy.Route, sub Subject) (func(), bool) {
	k := route.Concurrency
	l, ok := m.opts.Store.(tollgate.Leaser)
	if !ok {
		return func() {}, true
	}
	subject := sub.ID
	if k.PerRoute {
		subject = "route"
	}
	req := algo.LeaseRequest{Policy: k.StoreName, Subject: subject, ID: fmt.Sprintf("%s-%d", leasePrefix, leaseSeq.Add(1)),
		Limit: k.Limit, TTL: k.LeaseTTL, Now: m.clockTime()}
	got, err := l.Acquire(r.Context(), req)
	if err != nil {
		if route.FailClosed {
			m.fallback("concurrency."+route.Group, "fail_closed")
			WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, RetryAfter: 1,
				Detail: "the rate limiter is unavailable and this route does not proceed without it"})
			return nil, false
		}
		m.fallback("concurrency."+route.Group, "fail_open")
		return func() {}, true
	}
	if !got {
		m.count("concurrency."+route.Group, route.Group, sub.Plan.Name, "refused")
		WriteProblem(w, Problem{Type: ProblemTooManyInFlight, Status: http.StatusTooManyRequests, RetryAfter: 1,
			Detail: fmt.Sprintf("At most %d requests may be in flight here at once; retry shortly.", k.Limit)})
		return nil, false
	}
	return func() {
		// Released when the handler returns: the response is complete, the
		// client went away, or it panicked. The request's context may be
		// canceled by then.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
		defer cancel()
		if err := l.Release(ctx, req); err != nil {
			m.log.LogAttrs(ctx, slog.LevelWarn, "releasing a concurrency slot (it will expire)", slog.String("error", err.Error()))
		}
	}, true
}
