package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// loginAttempt is a login call on its way to the service behind: the
// account it names and the places it holds, in the client address's
// failure budget and in the account's allowance, until its outcome is
// known.
type loginAttempt struct {
	e       *Engine
	guard   *policy.Login
	account string // pseudonym
	spelt   uint32 // Call.Spelling
	ip      tollgate.Request
	hold    tollgate.Hold
	once    sync.Once
}

// loginBegin holds a place for the attempt: first in the client
// address's failure budget, then (only if that admits it, so that an
// address over its budget creates no state for the accounts it names) in
// the account's allowance before its lock. An attempt that cannot hold
// both is refused, and so, however many attempts arrive at once, across
// gateways too, no more reach the service than one at a time would. It
// fails closed. On refusal the verdict is final and it returns false.
func (e *Engine) loginBegin(ctx context.Context, v *Verdict, c Call) bool {
	lg := c.Route.Login
	sub := c.Subject
	if c.Account == "" {
		v.Outcome, v.Reason, v.Err = Invalid, ReasonMisconfigured, errors.New("checking a login: the call names no account")
		return false
	}
	a := &loginAttempt{e: e, guard: lg, account: c.Account, spelt: c.Spelling,
		ip:   lg.IPFailures.Request(sub.Client, "", 1),
		hold: tollgate.Hold{ID: newLeaseID(), TTL: e.holdTTL}}
	a.ip.Now = e.clockTime()
	unavailable := func(err error) bool {
		e.logSampled(ctx, slog.LevelError, "login guard unavailable, refusing", sub, lg.IPFailures.Name, "login", slog.String("error", err.Error()))
		e.countFallback("login", "fail_closed")
		v.Outcome, v.Reason, v.Err, v.RetryAfter = FailClosed, ReasonUnavailable, err, time.Second
		return false
	}
	sctx, span := e.storeSpan(ctx, "tollgate.store Reserve", lg.IPFailures.Name, 1)
	d, err := e.store.Reserve(sctx, a.ip, a.hold)
	endStoreSpan(span, allowedOr(d.Allowed), err)
	if err != nil {
		return unavailable(err)
	}
	if !d.Allowed {
		e.count(lg.IPFailures.Name, "login", "-", "refused")
		e.logSampled(ctx, slog.LevelWarn, "refused: too many failed logins from this address", sub, lg.IPFailures.Name, "login")
		v.Outcome, v.Reason, v.RetryAfter = Refused, ReasonLoginAddress, d.RetryAfter
		return false
	}
	sctx, span = e.storeSpan(ctx, "tollgate.store Lockout", "login_lock", 1)
	res, err := e.store.Lockout(sctx, algo.LockoutRequest{Name: lg.StoreName, Subject: a.account, Rule: lg.Rule,
		Op: algo.LockReserve, Hold: a.hold, Spelling: a.spelt, Now: a.ip.Now})
	endStoreSpan(span, allowedOr(res.Reserved), err)
	if err != nil || !res.Reserved {
		a.settleIP(ctx, false)
	}
	account := Subject{Kind: "account", ID: a.account}
	switch {
	case err != nil:
		return unavailable(err)
	case res.Locked:
		e.count("login_lock", "login", "-", "refused")
		retry := time.Duration(res.RetryAfter) * time.Millisecond
		e.logSampled(ctx, slog.LevelWarn, "refused: account locked", account, "login_lock", "login",
			slog.Int64("retry_after_s", retrySeconds(retry)), slog.Int64("lock_level", res.Level))
		v.Outcome, v.Reason, v.RetryAfter, v.Lock = Refused, ReasonLoginLocked, retry, res.Level
		return false
	case !res.Reserved:
		e.count("login_lock", "login", "-", "refused")
		e.logSampled(ctx, slog.LevelWarn, "refused: too many login attempts in progress", account, "login_lock", "login",
			slog.Int64("held", res.Held), slog.Int64("failures", res.Failures))
		v.Outcome, v.Reason, v.RetryAfter, v.Held, v.Failures = Refused, ReasonLoginBusy, time.Second, res.Held, res.Failures
		return false
	}
	v.login = a
	return true
}

// finish settles the attempt by the service's answer: a failure status
// charges the address's failure budget and counts towards the account's
// lock, a success gives back the address's place and clears the
// account's count, anything else (an error, no answer: status 0) gives
// both back. It runs once.
func (a *loginAttempt) finish(ctx context.Context, status int) {
	a.once.Do(func() {
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
		sctx, span := a.e.storeSpan(ctx, "tollgate.store Lockout", "login_lock", 1)
		_, err := a.e.store.Lockout(sctx, algo.LockoutRequest{Name: a.guard.StoreName, Subject: a.account, Rule: a.guard.Rule,
			Op: op, Hold: a.hold, Spelling: a.spelt, Now: a.e.clockTime()})
		endStoreSpan(span, "done", err)
		if err != nil {
			a.e.logSampled(ctx, slog.LevelError, "recording a login outcome (the attempt's hold expires by itself)", Subject{Kind: "account", ID: a.account},
				"login_lock", "login", slog.String("error", err.Error()))
		}
	})
}

// settleIP ends the attempt's hold on the address's failure budget,
// charging it for a failure.
func (a *loginAttempt) settleIP(ctx context.Context, charge bool) {
	ip := a.ip
	ip.Now = a.e.clockTime()
	sctx, span := a.e.storeSpan(ctx, "tollgate.store Settle", a.guard.IPFailures.Name, 1)
	_, err := a.e.store.Settle(sctx, ip, a.hold, charge)
	endStoreSpan(span, "done", err)
	if err != nil {
		a.e.logSampled(ctx, slog.LevelError, "recording a login outcome for the address (the attempt's hold expires by itself)", Subject{Kind: "ip", ID: ip.Subject},
			a.guard.IPFailures.Name, "login", slog.String("error", err.Error()))
	}
}
