package engine

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/policy"
)

// Call is one request to decide.
type Call struct {
	// Route is the route the request matched; nil for none (the subject's
	// plan applies at cost 1, in route group "unmatched").
	Route *policy.Route
	// Subject is who the request is charged to.
	Subject Subject
	// Key says whether the request presented an API key (or a bearer
	// JWT) and what became of it; the zero value is none.
	Key KeyStatus
	// JWT says the credential was a bearer JWT (Key says what became of
	// it): an invalid one is charged as an invalid key is.
	JWT bool
	// Cost overrides the route's cost when positive.
	Cost int64
	// Account is the pseudonym of the account a login names; required
	// on a route with a login guard.
	Account string
	// Spelling tells apart the ways the login spelt Account (see
	// Engine.spelling and algo.LockoutRequest.Spelling); zero when the
	// caller does not tell.
	Spelling uint32
	// Claims are a verified bearer JWT's claims that route limits are
	// counted per (policy.JWT.KeyClaims), as the token has them: raw
	// values, never logged. Nil without a token.
	Claims map[string]string
	// Tokens, on a token route (policy.Route.Tokens), is what the call
	// is estimated to use, read from its request; nil elsewhere.
	Tokens *Tokens
	// LimitKey is the pseudonym the route's limit is counted per when
	// the route has a policy.Route.LimitKey (see Engine.LimitKey); ""
	// counts it per subject.
	LimitKey string
}

// failsClosed reports whether the call's route refuses it while the store
// cannot decide (on_store_failure: fail_closed).
func (c Call) failsClosed() bool { return c.Route != nil && c.Route.FailClosed }

// KeyStatus is what became of the API key a request presented.
type KeyStatus uint8

// The key statuses.
const (
	KeyNone      KeyStatus = iota // no key presented
	KeyValid                      // a configured key: the Subject is its
	KeyUnknown                    // well formed, but no configured key
	KeyMalformed                  // not a key at all
	// KeyUnchecked: a bearer JWT that cannot be checked, its identity
	// provider's keys unavailable (jwtauth.ErrKeysUnavailable).
	KeyUnchecked
)

// Subject is who a call is charged to.
type Subject struct {
	Kind string // "key", "jwt", "user", "ip" or "custom"
	// ID is the pseudonym used in store keys and logs.
	ID string
	// Plan is the subject's plan (nil for a request refused before one
	// applied).
	Plan *policy.Plan
	// Tenant is the pseudonym of the key's tenant ("" if none).
	Tenant string
	// Client is the pseudonym of the client address's group: what the
	// invalid-key limit and the login guard's failure budget count.
	Client string
	// Unlimited subjects (an unlimited plan, the allowlist) are counted
	// and never refused by a rate limit or quota; the guards still apply.
	Unlimited bool
}

// Group returns the call's route group: "unmatched" without a route.
func (c Call) Group() string { return c.group() }

func (c Call) group() string {
	if c.Route == nil {
		return "unmatched"
	}
	return c.Route.Group
}

func (c Call) cost() int64 {
	switch {
	case c.Cost > 0:
		return c.Cost
	case c.Route != nil:
		return c.Route.Cost
	}
	return 1
}

// planName is p's name for metrics, "-" for none.
func planName(p *policy.Plan) string {
	if p == nil {
		return "-"
	}
	return p.Name
}

// Outcome is what became of a call.
type Outcome uint8

// The outcomes.
const (
	// Refused: a check refused the call (see Reason); nothing was
	// charged.
	Refused Outcome = iota
	// Allowed: every check admitted the call, and it was charged.
	Allowed
	// FailOpen: the store could not decide and the route proceeds
	// without it (no local fallback decided either).
	FailOpen
	// FailClosed: the store could not decide and the route (or the
	// budget) does not proceed without it; or a bearer JWT cannot be
	// checked, its identity provider's keys unavailable
	// (ReasonKeysUnavailable).
	FailClosed
	// Invalid: the call cannot be decided as made: an invalid API key,
	// a cost no limit could admit, or a limit the store refuses (see
	// Reason).
	Invalid
)

var outcomeNames = [...]string{"refused", "allowed", "fail_open", "fail_closed", "invalid"}

func (o Outcome) String() string { return outcomeNames[o] }

// Admitted reports whether the call goes on to the service.
func (o Outcome) Admitted() bool { return o == Allowed || o == FailOpen }

// Reason says which check refused a call, or why it could not be decided.
type Reason uint8

// The reasons.
const (
	ReasonNone             Reason = iota
	ReasonRate                    // a rate budget: Charges[Report]
	ReasonConcurrency             // the route's concurrency limit
	ReasonLoginAddress            // too many failed logins from the client address
	ReasonLoginLocked             // the account is locked
	ReasonLoginBusy               // too many attempts for the account in progress
	ReasonInvalidKey              // an unknown or malformed API key
	ReasonInvalidKeys             // too many invalid API keys from the client address
	ReasonUnavailable             // the store (or the login guard) is unavailable
	ReasonCostExceedsBurst        // the call's cost is more than a limit could ever admit
	ReasonMisconfigured           // the store refused a limit as invalid
	ReasonCanceled                // the caller went away before a decision
	ReasonKeysUnavailable         // a bearer JWT cannot be checked: its JWKS cannot be fetched
	ReasonOverload                // the upstream's adaptive concurrency limit (Route.Adaptive)

	// The reasons of requests refused as presented, before any check
	// (Outcome Invalid; see Engine.Decide).
	ReasonBadRequest      // the request cannot be read as one route: Detail says why
	ReasonNoClientAddress // no client address can be determined
	ReasonMalformedUser   // the user header holds no acceptable id
	ReasonNoRoute         // no route matches, and one is required
	ReasonLoginElsewhere  // a login route's path by another method (Allow)
	ReasonUnsupported     // the front cannot serve the route: Detail says why
	ReasonBadLogin        // a login request another parser could read otherwise: Detail
	ReasonUnreadable      // the front could not read the request: Err
)

// OfRequest reports whether r refuses a request as presented, before any
// check (see Engine.Decide): a front answers it as a bad request of its
// own, not as a refusal.
func (r Reason) OfRequest() bool { return r >= ReasonBadRequest }

// Final reports whether trying a call refused for r again cannot cure
// it: a request refused as presented (OfRequest), an invalid key, a cost
// no limit admits, a misconfigured route or a call canceled. A front
// tells the caller when to retry only a refusal that is not final.
func (r Reason) Final() bool {
	switch r {
	case ReasonInvalidKey, ReasonCostExceedsBurst, ReasonMisconfigured, ReasonCanceled:
		return true
	}
	return r.OfRequest()
}

// Charge is one budget a call was decided under, and its decision.
type Charge struct {
	Budget   *policy.Budget
	Decision tollgate.Decision
}

// Verdict is the engine's answer to a call.
type Verdict struct {
	Outcome Outcome
	Reason  Reason
	// Local reports that the store was unavailable and the decisions are
	// the local fallback's.
	Local bool
	// Queried, for an RLS call, says every charge was decided at cost 0
	// (a limit that admits nothing was hit, or a charge exceeds its
	// budget's capacity), so that each descriptor's hits are judged
	// against what is left.
	Queried bool
	// done says Done was called (under mu). It sits beside the flags,
	// which pack into one word of a verdict, allocated per call.
	done bool
	// Charges lists every enforced budget decided for the call, in the
	// order of RateLimit-Policy; empty when a check before them refused
	// the call, or when the store could not decide.
	Charges []Charge
	// Report is the index in Charges of the budget to report (the most
	// restrictive), or -1.
	Report int
	// RetryAfter, for a refusal or a failure closed, is how long until
	// the call could be admitted.
	RetryAfter time.Duration
	// Delay, for an admitted call, is how long a shaping limit asks it to
	// wait before it proceeds.
	Delay time.Duration
	// Err is the store's error, for a call not decided by it; or, for
	// ReasonUnreadable and ReasonBadLogin, the front's reader's; or, for
	// ReasonKeysUnavailable, jwtauth.ErrKeysUnavailable.
	Err error
	// Detail says why a request was refused as presented (see
	// ReasonBadRequest); Allow, for ReasonLoginElsewhere, is the method
	// the login route takes.
	Detail, Allow string

	// What Engine.Decide found: the call decided, who makes it, and the
	// cleaned path its route was matched on.
	Call     Call
	Identity Identity
	Path     string
	// Lock, for ReasonLoginLocked, is the lock's level; Held and
	// Failures, for ReasonLoginBusy, are the account's attempts in
	// progress and its failures.
	Lock, Held, Failures int64
	// Descriptors, for an RLS call (FrontRLS), are what each of its
	// descriptors came to, in its order.
	Descriptors []DescriptorVerdict

	e      *Engine
	group  string
	plan   string
	shadow []shadowCharge
	lease  *lease
	login  *loginAttempt
	global *globalHold
	// adaptive is the call's slot in its upstream's adaptive limit.
	adaptive *adaptiveSlot
	tokens   *tokenHold // a token call's reservation, settled by Done
	mu       sync.Mutex
	recSeq   uint64 // the call's record in the engine's recording, if any
}

// Reported returns the budget to report and its decision, if any.
func (v *Verdict) Reported() (Charge, bool) {
	if v.Report < 0 {
		return Charge{}, false
	}
	return v.Charges[v.Report], true
}

// Budgets returns the budgets of Charges, in order.
func (v *Verdict) Budgets() []*policy.Budget {
	bs := make([]*policy.Budget, len(v.Charges))
	for i, c := range v.Charges {
		bs[i] = c.Budget
	}
	return bs
}

// Answered settles the call's login attempt by the service's status, as
// soon as it is known (before the client sees it, so that a lock the
// failure earns is in place before the client can try again), and takes
// the adaptive limit's latency sample: the time to the status. A status
// of zero means no answer. It does nothing for calls without a login
// guard or an adaptive limit, and after the first call.
func (v *Verdict) Answered(ctx context.Context, status int) {
	if s := v.adaptive; s != nil {
		now := v.e.now()
		v.mu.Lock()
		s.answer(status, v.Delay, now)
		v.mu.Unlock()
	}
	if v.login != nil {
		v.login.finish(ctx, status)
		v.recordAnswer(ctx, status)
	}
}

// Deferred reports whether Done has store calls to make (shadow budgets
// to evaluate), so that a front can finish its response first.
func (v *Verdict) Deferred() bool {
	return v.Outcome == Allowed && (len(v.shadow) > 0 || v.tokens.charged())
}

// Done ends an admitted call: it settles a login attempt the service did
// not answer, settles a token call's budgets at the usage its response
// reported (Used; at the estimate without) and notes it in the call's
// record, if the recording holds one, releases the concurrency
// slots (the adaptive one with the latency Answered measured), and
// evaluates the shadow budgets. Its caller calls it once the
// response is complete (or the client went away); calling it again does
// nothing.
func (v *Verdict) Done(ctx context.Context) {
	v.mu.Lock()
	done := v.done
	v.done = true
	v.mu.Unlock()
	if done {
		return
	}
	if h := v.tokens; h != nil {
		v.mu.Lock()
		h.settled = true // Used records no more
		v.mu.Unlock()
		v.recordSettle(h.usage)
		if h.charged() {
			h.settle(ctx, v.group, v.plan)
		}
	}
	v.giveBack(ctx)
	if v.Outcome == Allowed && len(v.shadow) > 0 {
		v.e.evalShadow(ctx, v.shadow, v.group)
	}
}

// giveBack ends everything the verdict holds: a login attempt not
// answered is settled as no answer, the concurrency slots released (the
// adaptive one with its sample), a place held in a global budget and not
// charged given back.
func (v *Verdict) giveBack(ctx context.Context) {
	if v.adaptive != nil {
		now := v.e.now()
		v.mu.Lock()
		v.adaptive.release(now)
		v.mu.Unlock()
	}
	if v.login != nil {
		v.login.finish(ctx, 0)
	}
	v.global.giveBack(ctx)
	if v.lease != nil {
		v.lease.release(ctx)
	}
}

// Wait waits out the verdict's Delay, what a shaping limit asks of an
// admitted call before it goes on (holding its slot, if it took one: it
// is in flight), and reports false if ctx ends first. Without a Delay it
// returns at once.
func (v *Verdict) Wait(ctx context.Context) bool {
	if v.Delay <= 0 {
		return true
	}
	t := time.NewTimer(v.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// RateLimitFields are the IETF RateLimit and RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers, structured fields) of a verdict,
// for any front to send:
//
//	RateLimit-Policy: "free.second";q=10;w=1, "free.hour";q=1000;w=3600
//	RateLimit: "free.second";r=7;t=1
type RateLimitFields struct {
	Policy, Limit string
	// Quota, Remaining and Reset are the reported budget's q, r and t: t
	// is the seconds until the full quota is back for an admitted call,
	// and until this call would be admitted for a refusal, so that a
	// Retry-After is never earlier than t.
	Quota, Remaining, Reset int64
}

// RateLimit returns v's RateLimit fields: RateLimit-Policy lists every
// budget charged, RateLimit reports the most restrictive. ok is false when
// no budget was decided.
func (v *Verdict) RateLimit() (f RateLimitFields, ok bool) {
	c, ok := v.Reported()
	if !ok {
		return f, false
	}
	if len(v.Charges) == 1 {
		f.Policy = v.e.policyItem(c.Budget)
	} else {
		var sb strings.Builder
		for i, x := range v.Charges {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(v.e.policyItem(x.Budget))
		}
		f.Policy = sb.String()
	}
	d := c.Decision
	f.Quota, f.Remaining, f.Reset = c.Budget.Limit.Rate, d.Remaining, ceilSeconds(d.ResetAfter)
	if !d.Allowed {
		f.Reset = retrySeconds(d.RetryAfter)
	}
	f.Limit = `"` + c.Budget.Name + `";r=` + strconv.FormatInt(f.Remaining, 10) + ";t=" + strconv.FormatInt(f.Reset, 10)
	return f, true
}

// policyItem returns b as one RateLimit-Policy item, "name";q=rate;w=seconds:
// made when the engine was, for the policy's budgets (names are plan,
// limit or group names, which the policy restricts to token characters).
func (e *Engine) policyItem(b *policy.Budget) string {
	if s, ok := e.items[b]; ok {
		return s
	}
	return makePolicyItem(b)
}

func makePolicyItem(b *policy.Budget) string {
	return `"` + b.Name + `";q=` + strconv.FormatInt(b.Limit.Rate, 10) + ";w=" + strconv.FormatInt(ceilSeconds(b.Limit.Period), 10)
}

// RetryDelay returns how long a front tells a refused caller to wait
// before it retries (Retry-After, a gRPC pushback): RetryAfter, or 1 s
// where the refusal names no time; 0 for an admitted call or a final
// refusal (Reason.Final).
func (v *Verdict) RetryDelay() time.Duration {
	if v.Outcome.Admitted() || v.Reason.Final() {
		return 0
	}
	if v.RetryAfter <= 0 {
		return time.Second
	}
	return v.RetryAfter
}

// RetrySeconds is RetryDelay in whole seconds, rounded up: a
// Retry-After field's value, 0 for none.
func (v *Verdict) RetrySeconds() int64 { return ceilSeconds(v.RetryDelay()) }

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
