package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrPaced is wrapped by the error a request gets instead of being sent
// when the server has said its policy has nothing left and either
// Options.FailFast is set or the wait would outlast the request's
// deadline.
var ErrPaced = errors.New("rate limit exhausted")

// PacedError is the error a paced request fails with.
type PacedError struct {
	Host, Policy string
	// Wait is how long until the server said the policy has room again.
	Wait time.Duration
}

func (e *PacedError) Error() string {
	return fmt.Sprintf("pacing %s: policy %q has nothing left for %v: %v", e.Host, e.Policy, e.Wait, ErrPaced)
}

func (e *PacedError) Unwrap() error { return ErrPaced }

// pacer holds what servers last said of each policy, per host and policy
// name, and holds requests back while a policy has nothing left.
//
// A request is paced under the policy its path last answered with, or,
// for a path not seen yet, the policy the host last answered with (paths
// with ids share their route's policy). A host that has sent no
// rate-limit fields is not paced at all.
//
// Concurrent requests must not all go on one stale "r=5", and answers
// arrive in another order than the server counted them, so the estimate
// is conservative: of the answers since requests in flight last were
// none (a batch), the smallest r is the one the server counted last
// (refills aside), and r minus the requests still in flight may be sent.
// When a response says r=0 for t, requests wait until then; after it, one
// probe goes alone and its answer sets how many follow (the others wait
// for it, up to probeTimeout).
//
// What it keeps is bounded (maxPaths, maxHosts, maxPolicies): a client
// calling paths with ids in them, or a server naming a new policy in each
// answer, would otherwise grow it without end. When full, it forgets a
// path or host at random (a path forgotten goes under its host's last
// policy again) and, of a few policies no request is waiting on, the one
// whose reset is earliest.
type pacer struct {
	mu       sync.Mutex
	policies map[paceKey]*paceState
	byPath   map[string]string // host+" "+path: the policy it answered with
	byHost   map[string]string // host: the policy it last answered with
}

// The pacer's bounds.
const (
	maxPaths    = 4096
	maxHosts    = 1024
	maxPolicies = 1024
	// policySample is how many policies a full pacer looks at to pick
	// one to forget.
	policySample = 8
)

// probeTimeout is how long requests wait for a probe's answer before
// another request may probe (a slow request should not hold up the rest
// for long).
const probeTimeout = time.Second

// paceKey names a policy: the host's, by the name it gives.
type paceKey struct{ host, policy string }

// paceState is what the pacer knows of one policy. It is guarded by
// the pacer's mu.
type paceState struct {
	remaining int64 // the estimate of what is left; -1: unknown (probe)
	batchMin  int64 // the smallest r answered in this batch; -1: none yet
	inflight  int64 // requests sent under this policy, not answered
	resetAt   time.Time
	probing   bool
	probeAt   time.Time
	changed   chan struct{}
}

// newPacer returns a pacer that knows no policy yet.
func newPacer() *pacer {
	return &pacer{policies: map[paceKey]*paceState{}, byPath: map[string]string{}, byHost: map[string]string{}}
}

// ticket is a request let through: the policy it was sent under (none:
// the host has no policy known).
type ticket struct {
	key   paceKey
	paced bool
	probe bool
}

// acquire waits until a request to host and path may be sent; sleep waits
// for a reset the server reported (the Options.Sleep seam), at most
// maxWait: a reset further off, which the server chose and may have set
// centuries ahead, fails the request as failFast does; waits for answers
// to requests in flight use real time.
func (p *pacer) acquire(ctx context.Context, host, path string, now func() time.Time, failFast bool, maxWait time.Duration, sleep func(context.Context, time.Duration) error) (ticket, error) {
	for {
		p.mu.Lock()
		k, s := p.stateFor(host, path)
		if s == nil {
			p.mu.Unlock()
			return ticket{}, nil
		}
		t := now()
		if probe, ok := s.grant(t); ok {
			p.mu.Unlock()
			return ticket{key: k, paced: true, probe: probe}, nil
		}
		if s.remaining == 0 {
			wait := s.resetAt.Sub(t)
			p.mu.Unlock()
			if failsPaced(ctx, t, wait, failFast, maxWait) {
				return ticket{}, &PacedError{Host: host, Policy: k.policy, Wait: wait}
			}
			if err := sleep(ctx, wait); err != nil {
				return ticket{}, err
			}
			continue
		}
		// What the estimate allows is in flight (or the probe is): wait
		// for an answer, or for the reset the server reported (a probe:
		// probeTimeout).
		ch, until := s.changed, s.answerDeadline()
		p.mu.Unlock()
		if err := p.awaitAnswer(ctx, s, ch, until, t, now); err != nil {
			return ticket{}, err
		}
	}
}

// stateFor is the policy a request to host and path goes under, and its
// state: the one the path last answered with, else the host's; nil when
// none is known, or it was forgotten (see maxPolicies). The caller holds
// p.mu.
func (p *pacer) stateFor(host, path string) (paceKey, *paceState) {
	name, ok := p.byPath[host+" "+path]
	if !ok {
		name, ok = p.byHost[host]
	}
	if !ok {
		return paceKey{}, nil
	}
	k := paceKey{host, name}
	return k, p.policies[k]
}

// grant lets a request go under s at t if the estimate allows it: as the
// probe when nothing is known and no probe is out, or as one of what is
// left less what is in flight. The caller holds p.mu.
func (s *paceState) grant(t time.Time) (probe, ok bool) {
	if s.remaining == 0 && !t.Before(s.resetAt) {
		s.remaining = -1 // the quota is back by now, but how much of it?
	}
	switch {
	case s.remaining < 0 && !s.probing:
		s.probing, s.probeAt = true, t
		s.inflight++
		return true, true
	case s.remaining > 0 && s.inflight < s.remaining:
		s.inflight++
		return false, true
	}
	return false, false
}

// answerDeadline is how long requests wait for an answer under s before
// its estimate is dropped: until the reset the server reported or, while
// a probe is out, probeTimeout after it went. The caller holds p.mu.
func (s *paceState) answerDeadline() time.Time {
	if s.remaining < 0 {
		return s.probeAt.Add(probeTimeout)
	}
	return s.resetAt
}

// failsPaced reports whether a request must fail rather than wait from t
// for a reset wait away: failFast is set, or the wait is longer than
// maxWait or would outlast ctx's deadline.
func failsPaced(ctx context.Context, t time.Time, wait time.Duration, failFast bool, maxWait time.Duration) bool {
	if failFast || wait > maxWait {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && t.Add(wait).After(dl)
}

// awaitAnswer waits, from t, for s to change (see notify) from ch, or
// until until: then, if s has not changed meanwhile, its estimate is
// dropped (nothing is known: the next request probes). It returns ctx's
// error if ctx ends first. The caller does not hold p.mu.
func (p *pacer) awaitAnswer(ctx context.Context, s *paceState, ch chan struct{}, until, t time.Time, now func() time.Time) error {
	timer := time.NewTimer(max(until.Sub(t), time.Millisecond))
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		p.mu.Lock()
		if s.changed == ch && !now().Before(until) {
			s.remaining, s.batchMin, s.probing = -1, -1, false
		}
		p.mu.Unlock()
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// record takes into account what the response to a request sent with tk
// said (info; nil when the request got no response).
func (p *pacer) record(tk ticket, host, path string, info *Info, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.policies[tk.key]; tk.paced && s != nil {
		s.inflight = max(0, s.inflight-1)
		if tk.probe {
			s.probing = false
		}
		defer s.notify()
	}
	l, ok := paceLimit(info)
	if !ok {
		return
	}
	k := paceKey{host, l.Name}
	setBounded(p.byPath, host+" "+path, l.Name, maxPaths)
	setBounded(p.byHost, host, l.Name, maxHosts)
	s := p.state(k)
	s.answered(l.Remaining, resetAt(l, info, now))
	if !tk.paced || tk.key != k {
		s.notify()
	}
}

// paceLimit is the limit a response paces by: the one its info reports,
// or, for a refusal with Retry-After only, the host's as a whole, with
// nothing left until then. It is false when the response says nothing of
// what is left.
func paceLimit(info *Info) (Limit, bool) {
	switch {
	case info == nil:
		return Limit{}, false
	case info.HasLimit:
		return info.Limit, info.Limit.Remaining >= 0
	case info.HasRetryAfter:
		return Limit{Remaining: 0, Reset: info.RetryAfter}, true
	}
	return Limit{}, false
}

// resetAt is when an answer at now says l is back: at l's reset (without
// one, r=0 means a second, then a probe), or at its Retry-After when
// that is later and nothing is left.
func resetAt(l Limit, info *Info, now time.Time) time.Time {
	reset := now.Add(time.Second)
	if l.Reset >= 0 {
		reset = now.Add(l.Reset)
	}
	if info.HasRetryAfter && l.Remaining == 0 {
		if at := now.Add(info.RetryAfter); at.After(reset) {
			reset = at
		}
	}
	return reset
}

// state is the state of the policy k, made if there is none (first
// forgetting one when the pacer holds maxPolicies). The caller holds p.mu.
func (p *pacer) state(k paceKey) *paceState {
	s := p.policies[k]
	if s == nil {
		if len(p.policies) >= maxPolicies {
			p.forgetPolicy()
		}
		s = &paceState{batchMin: -1, changed: make(chan struct{})}
		p.policies[k] = s
	}
	return s
}

// answered takes into account an answer that left remaining until reset:
// of a batch's answers the smallest is the one the server counted last,
// and the latest reset of those is kept. The caller holds p.mu.
func (s *paceState) answered(remaining int64, reset time.Time) {
	switch {
	case s.batchMin < 0 || remaining < s.batchMin:
		s.batchMin, s.resetAt = remaining, reset
	case remaining == s.batchMin && reset.After(s.resetAt):
		s.resetAt = reset
	}
	s.remaining = s.batchMin
	if s.inflight == 0 {
		s.batchMin = -1 // every request is answered: the next answer is newer than all
	}
}

// setBounded sets m[k] to v, first deleting another key (the first the
// map's random order gives) if m holds limit keys and not k.
func setBounded(m map[string]string, k, v string, limit int) {
	if _, ok := m[k]; !ok && len(m) >= limit {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// forgetPolicy deletes, of up to policySample policies no request holds a
// ticket of (none in flight, no probe), the one whose reset is earliest;
// none if every one looked at is in use. The caller holds p.mu.
func (p *pacer) forgetPolicy() {
	var victim paceKey
	var found *paceState
	n := 0
	for k, s := range p.policies {
		if s.inflight == 0 && !s.probing && (found == nil || s.resetAt.Before(found.resetAt)) {
			victim, found = k, s
		}
		if n++; n == policySample {
			break
		}
	}
	if found != nil {
		delete(p.policies, victim)
	}
}

// notify wakes requests waiting on s.
func (s *paceState) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}
