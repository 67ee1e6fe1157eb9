package engine

import (
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/overload"
	"github.com/tollgate/tollgate/policy"
)

// Limiters keeps the adaptive concurrency limits of the upstreams
// (policy.Adaptive, package overload) across the engines a gateway builds
// as its policy changes: a reload that keeps an upstream's settings keeps
// its limit, its measured minimum RTT and its requests in flight, instead
// of starting again from min_limit. It is safe for concurrent use.
type Limiters struct {
	mu    sync.Mutex
	limit map[string]*limiter // by policy.Adaptive.Upstream
}

// NewLimiters returns an empty set of limits.
func NewLimiters() *Limiters { return &Limiters{limit: map[string]*limiter{}} }

// limiter is one upstream's limit, and its gauges (nil without metrics).
type limiter struct {
	mu                     sync.Mutex
	l                      *overload.Limiter
	spec                   policy.Adaptive // what it was made for
	limit, minRTT, current prometheus.Gauge
}

// get returns the limit of a's upstream: the one kept, if it was made for
// the same settings, else a new one in its place.
func (ls *Limiters) get(a *policy.Adaptive, now time.Time, m *Metrics) *limiter {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.limit[a.Upstream]; l != nil && reflect.DeepEqual(l.spec, *a) {
		return l
	}
	cfg := a.Config
	cfg.Seed = rand.Uint64() // gateways measure their minimum RTTs apart
	l := &limiter{l: overload.New(cfg, now), spec: *a}
	if m != nil {
		l.limit = m.AdaptiveLimit.WithLabelValues(a.Upstream)
		l.minRTT = m.AdaptiveMinRTT.WithLabelValues(a.Upstream)
		l.current = m.AdaptiveInFlight.WithLabelValues(a.Upstream)
		l.publish()
	}
	ls.limit[a.Upstream] = l
	return l
}

// acquire takes a slot for a call of plan (forced in shadow), and
// reports whether it was within the limit.
func (l *limiter) acquire(plan string, shadow bool, now time.Time) (overload.Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.l.Acquire(l.spec.Class(plan), shadow, now)
	l.publish()
	return s, ok
}

func (l *limiter) release(s overload.Slot, latency time.Duration, sampled bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l.Release(s, latency, sampled, now)
	l.publish()
}

// publish sets the gauges, under l.mu.
func (l *limiter) publish() {
	if l.limit != nil {
		l.limit.Set(float64(l.l.Limit()))
		l.minRTT.Set(l.l.MinRTT().Seconds())
		l.current.Set(float64(l.l.InFlight()))
	}
}

// adaptiveSlot is a call's slot in its upstream's adaptive limit, held
// until the call ends (Done). Its latency sample is the upstream's time
// to its response's status (Answered), from when the call was admitted
// and its shaping delay waited out: the time to the headers is what a
// queue in the upstream lengthens, and a streamed response (an LLM's
// tokens, a download) that takes minutes to its end is not a slow
// upstream. The slot itself is held to the end, while the upstream still
// works on it.
type adaptiveSlot struct {
	lim      *limiter
	slot     overload.Slot
	start    time.Time
	latency  time.Duration
	sampled  bool // Answered with a status that says how long the upstream took
	done     bool // answered
	released bool
}

// acquireAdaptive takes a slot of the route's adaptive limit for the
// call. A call past the limit is refused at once (ReasonOverload), or in
// shadow counted and admitted. On refusal the verdict is final and it
// returns false.
func (e *Engine) acquireAdaptive(v *Verdict, c Call) bool {
	a := c.Route.Adaptive
	now := e.now()
	lim := e.limiters.get(a, now, e.metrics)
	slot, ok := lim.acquire(v.plan, a.Shadow, now)
	budget := "adaptive." + c.Route.Group
	if a.Shadow {
		if mt := e.metrics; mt != nil {
			mt.Shadow.WithLabelValues(budget, v.group, allowedOr(ok)).Inc()
		}
	} else if !ok {
		e.count(budget, v.group, v.plan, "refused")
		v.Outcome, v.Reason, v.RetryAfter = Refused, ReasonOverload, time.Second
		return false
	}
	v.adaptive = &adaptiveSlot{lim: lim, slot: slot, start: now}
	return true
}

// answered notes the upstream's status at now, for a call whose shaping
// delay was delay. A status that says nothing of the upstream's queue is
// no sample: a 5xx but 504 is an error answered at once (a refused
// connection, the upstream's own shedding), while a 504 is a deadline
// passed, as slow as it got.
func (s *adaptiveSlot) answer(status int, delay time.Duration, now time.Time) {
	if s.done {
		return
	}
	s.done = true
	s.latency = now.Sub(s.start) - delay
	s.sampled = status > 0 && (status < 500 || status == 504)
}

// release gives the slot back, with the call's sample if it was answered.
func (s *adaptiveSlot) release(now time.Time) {
	if s == nil || s.released {
		return
	}
	s.released = true
	s.lim.release(s.slot, max(0, s.latency), s.sampled, now)
}
