package client

import (
	"sync"
	"time"
)

// backoff returns the delay before retry number attempt (0 for the first
// retry): capped exponential backoff with full jitter, r in [0, 1), on top
// of what the server asked for, if anything:
//
//	window = min(maxDelay, max(base·2^attempt, asked))
//	delay  = min(maxDelay, asked + r·window)
//
// so a herd told "retry after 1 s" spreads over the second after it
// instead of returning together, and never comes back earlier than asked.
// The caller gives up instead when asked is beyond maxDelay.
func backoff(attempt int, base, maxDelay, asked time.Duration, r float64) time.Duration {
	w := base
	for i := 0; i < attempt && w < maxDelay; i++ {
		w *= 2
	}
	w = min(maxDelay, max(w, asked))
	return min(maxDelay, asked+time.Duration(r*float64(w)))
}

// retryBudget limits retries to a share of requests, so that a struggling
// server is not sent more retries than traffic: each request adds ratio
// tokens, each retry takes one; perSecond tokens a second come back on
// their own, so a quiet client can still retry; tokens never exceed
// burst.
type retryBudget struct {
	mu        sync.Mutex
	tokens    float64
	last      time.Time
	ratio     float64
	perSecond float64
	burst     float64
}

func newRetryBudget(ratio, perSecond float64, burst int) *retryBudget {
	return &retryBudget{ratio: ratio, perSecond: perSecond, burst: float64(burst), tokens: float64(burst)}
}

func (b *retryBudget) refill(now time.Time) {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.perSecond)
	}
	b.last = now
}

// request records a first attempt.
func (b *retryBudget) request(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens = min(b.burst, b.tokens+b.ratio)
}

// retry takes a token for a retry, reporting whether there was one.
func (b *retryBudget) retry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
