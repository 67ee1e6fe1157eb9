package httplimit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// loginAttempt is a login request on its way to the service behind: the
// account it names and the places it holds, in the client address's
// failure budget and in the account's allowance, until its outcome is
// known.
type loginAttempt struct {
	m       *middleware
	guard   *policy.Login
	account string // pseudonym
	ip      tollgate.Request
	hold    tollgate.Hold
	settled bool
}

// loginBegin reads the login body, which it forwards re-encoded in the
// form it read (see readLoginBody), and holds a place for the attempt:
// first in the client address's failure budget, then (only if that
// admits it, so that an address over its budget creates no state for
// the accounts it names) in the account's allowance before its lock. An
// attempt that cannot hold both is refused, and so, however many attempts
// arrive at once, across gateways too, no more reach the service than one
// at a time would. It fails closed. On refusal it has answered the
// request and returns false.
func (m *middleware) loginBegin(w http.ResponseWriter, r *http.Request, lg *policy.Login, sub Subject) (*loginAttempt, bool) {
	lb, err := readLoginBody(r, lg.AccountField, lg.MaxBody)
	if err != nil && !errors.Is(err, errBadLogin) {
		// The body did not arrive (in time, or at all): nothing is held,
		// no store is asked.
		m.count("login_body", "login", "-", "unread")
		w.Header().Set("Connection", "close")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			WriteProblem(w, Problem{Type: ProblemBodyTimeout, Status: http.StatusRequestTimeout, Detail: "the request body did not arrive in time"})
		} else {
			// Malformed chunking, a client gone: never an empty 200.
			WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: "the request body could not be read"})
		}
		return nil, false
	}
	if err != nil {
		m.count("login_body", "login", "-", "bad_request")
		m.logSampled(r.Context(), slog.LevelInfo, "refused: unreadable login request", sub, "login_body", "login", slog.String("reason", err.Error()))
		WriteProblem(w, Problem{Type: ProblemBadLogin, Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), errBadLogin.Error()+": ")})
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(lb.body))
	r.ContentLength = int64(len(lb.body))
	r.Header.Set("Content-Length", strconv.Itoa(len(lb.body)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	a := &loginAttempt{m: m, guard: lg, account: m.hasher.Hash("acct", accountKey(lb.account)),
		ip:   tollgate.Request{Policy: lg.IPFailures.StoreName, Subject: sub.Client, Limit: lg.IPFailures.Limit, Cost: 1, Now: m.clockTime()},
		hold: tollgate.Hold{ID: newLeaseID(), TTL: m.holdTTL}}
	unavailable := func(err error) (*loginAttempt, bool) {
		m.logSampled(r.Context(), slog.LevelError, "login guard unavailable, refusing", sub, lg.IPFailures.Name, "login", slog.String("error", err.Error()))
		m.fallback("login", "fail_closed")
		WriteProblem(w, Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, RetryAfter: 1,
			Detail: "login is unavailable while the rate limiter is"})
		return nil, false
	}
	rs, ok1 := m.opts.Store.(tollgate.Reserver)
	g, ok2 := m.opts.Store.(tollgate.Guard)
	if !ok1 || !ok2 {
		return unavailable(errors.New("the store keeps no login-guard state"))
	}
	d, err := rs.Reserve(r.Context(), a.ip, a.hold)
	if err != nil {
		return unavailable(err)
	}
	if !d.Allowed {
		retry := max(1, ceilSeconds(d.RetryAfter))
		m.count(lg.IPFailures.Name, "login", "-", "refused")
		m.logSampled(r.Context(), slog.LevelWarn, "refused: too many failed logins from this address", sub, lg.IPFailures.Name, "login")
		WriteProblem(w, Problem{Type: ProblemTooManyFailed, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("Too many failed logins from this address; retry after %d s.", retry)})
		return nil, false
	}
	res, err := g.Lockout(r.Context(), algo.LockoutRequest{Policy: lg.StoreName, Subject: a.account, Rule: lg.Rule,
		Op: algo.LockReserve, Hold: a.hold, Now: a.ip.Now})
	if err != nil || !res.Reserved {
		a.settleIP(r.Context(), false)
	}
	switch {
	case err != nil:
		return unavailable(err)
	case res.Locked:
		retry := max(1, ceilSeconds(time.Duration(res.RetryAfter)*time.Millisecond))
		m.count("login_lock", "login", "-", "refused")
		m.logSampled(r.Context(), slog.LevelWarn, "refused: account locked", Subject{Kind: "account", ID: a.account}, "login_lock", "login",
			slog.Int64("retry_after_s", retry), slog.Int64("level", res.Level))
		WriteProblem(w, Problem{Type: ProblemLoginLocked, Status: http.StatusTooManyRequests, RetryAfter: retry,
			Detail: fmt.Sprintf("This account is locked after repeated failed logins; retry after %d s.", retry)})
		return nil, false
	case !res.Reserved:
		m.count("login_lock", "login", "-", "refused")
		m.logSampled(r.Context(), slog.LevelWarn, "refused: too many login attempts in progress", Subject{Kind: "account", ID: a.account}, "login_lock", "login",
			slog.Int64("held", res.Held), slog.Int64("failures", res.Failures))
		WriteProblem(w, Problem{Type: ProblemLoginBusy, Status: http.StatusTooManyRequests, RetryAfter: 1,
			Detail: "Too many login attempts for this account are in progress; retry after 1 s."})
		return nil, false
	}
	return a, true
}

// finish settles the attempt by the service's answer: a failure status
// charges the address's failure budget and counts towards the account's
// lock, a success gives back the address's place and clears the
// account's count, anything else (an error, no answer) gives both back.
// It runs once, when the service's status is known (before the client
// sees it), or when the request ends without one.
func (a *loginAttempt) finish(ctx context.Context, status int) {
	if a.settled {
		return
	}
	a.settled = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	op := algo.LockRelease
	switch {
	case a.guard.FailureStatuses[status]:
		op = algo.LockFail
	case status >= 200 && status < 300:
		op = algo.LockSucceed
	}
	a.settleIP(ctx, op == algo.LockFail)
	g := a.m.opts.Store.(tollgate.Guard) // loginBegin checked
	if _, err := g.Lockout(ctx, algo.LockoutRequest{Policy: a.guard.StoreName, Subject: a.account, Rule: a.guard.Rule,
		Op: op, Hold: a.hold, Now: a.m.clockTime()}); err != nil {
		a.m.logSampled(ctx, slog.LevelError, "recording a login outcome (the attempt's hold expires by itself)", Subject{Kind: "account", ID: a.account},
			"login_lock", "login", slog.String("error", err.Error()))
	}
}

// settleIP ends the attempt's hold on the address's failure budget,
// charging it for a failure.
func (a *loginAttempt) settleIP(ctx context.Context, charge bool) {
	ip := a.ip
	ip.Now = a.m.clockTime()
	if _, err := a.m.opts.Store.(tollgate.Reserver).Settle(ctx, ip, a.hold, charge); err != nil {
		a.m.logSampled(ctx, slog.LevelError, "recording a login outcome for the address (the attempt's hold expires by itself)", Subject{Kind: "ip", ID: ip.Subject},
			a.guard.IPFailures.Name, "login", slog.String("error", err.Error()))
	}
}

// newLeaseID returns an id for a concurrency lease or a login attempt's
// holds, unique across gateways sharing a store.
func newLeaseID() string {
	return fmt.Sprintf("%s-%d", leasePrefix, leaseSeq.Add(1))
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
	req := algo.LeaseRequest{Policy: k.StoreName, Subject: subject, ID: newLeaseID(),
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
			m.log.LogAttrs(ctx, slog.LevelWarn, "releasing a concurrency slot (retried when the store is resilience's, else it expires)", slog.String("error", err.Error()))
		}
	}, true
}
