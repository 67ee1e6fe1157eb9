package engine

import (
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/policy"
)

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

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
