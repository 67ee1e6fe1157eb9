// Package client is the client side of rate limiting: an http.RoundTripper
// that honours what any server (not only Tollgate) says about its limits.
//
// It retries 429 and 503 responses of idempotent requests, and of others
// when the response proves the request never reached the service, waiting
// for Retry-After (delay-seconds or an HTTP-date) plus capped exponential
// backoff with full jitter, within a retry budget, and never past the
// request's deadline: when the wait would outlast it, the response is
// returned as it came, body intact. It also paces ahead: when a response
// says, in the RateLimit field (draft-ietf-httpapi-ratelimit-headers, or
// the older spellings, see ParseResponse), that a policy has nothing left
// for t seconds, further requests under that policy wait until then (or
// fail fast with ErrPaced; so does one that would wait past MaxDelay)
// instead of being sent to be refused.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"sync"
	"time"
)

// Options configures a Transport; the zero value is the default.
type Options struct {
	// MaxRetries is how many times a request is retried (default 3;
	// negative: never).
	MaxRetries int
	// BaseDelay is the first retry's backoff window (default 100ms); it
	// doubles each retry.
	BaseDelay time.Duration
	// MaxDelay caps every wait (default 30s). A server asking for a longer
	// wait than this gets its response returned instead of a retry, and
	// a request its policy would hold back longer fails with ErrPaced
	// instead of waiting.
	MaxDelay time.Duration
	// RetryRatio is the retry budget: retries may be at most this share
	// of requests (default 0.2), beyond RetryPerSecond (default 5) retries
	// a second always allowed, saved up to RetryBurst (default 10).
	// Negative RetryRatio: no budget.
	RetryRatio     float64
	RetryPerSecond float64
	RetryBurst     int
	// NotProcessed reports whether a 429 or 503 response proves the
	// request never reached the service, which makes a request that is
	// not idempotent safe to retry. Nil means DefaultNotProcessed; use
	// Never to retry idempotent requests only. It may read the body
	// (which the Transport restores after, up to 64 KiB is read).
	NotProcessed func(*http.Response) bool
	// FailFast makes a request the server has said would be refused fail
	// at once, with an error wrapping ErrPaced, instead of waiting.
	FailFast bool
	// NoPacing turns pacing off: every request is sent.
	NoPacing bool
	// Now, Sleep and Rand are seams for tests: the clock (default
	// time.Now), a sleep that ends early with ctx's error (default a
	// timer), and a float64 in [0, 1) for jitter (default math/rand/v2).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

// Transport is an http.RoundTripper that retries and paces requests by what
// servers say of their rate limits. Its zero value sends through
// http.DefaultTransport with the default Options; it must not be copied
// after first use.
type Transport struct {
	// Base sends each attempt (nil: http.DefaultTransport).
	Base http.RoundTripper
	Options

	once   sync.Once
	budget *retryBudget
	pace   *pacer
}

// New returns a Transport sending through base with opts.
func New(base http.RoundTripper, opts Options) *Transport {
	return &Transport{Base: base, Options: opts}
}

// init sets the defaults of the options left zero, once, and makes the
// retry budget and the pacer.
func (t *Transport) init() {
	t.once.Do(func() {
		t.Options.retryDefaults()
		t.Options.hookDefaults()
		if t.RetryRatio > 0 {
			t.budget = newRetryBudget(t.RetryRatio, t.RetryPerSecond, t.RetryBurst)
		}
		t.pace = newPacer()
	})
}

// retryDefaults sets the retries, delays and retry budget left zero (or,
// for the delays, negative) to their defaults.
func (o *Options) retryDefaults() {
	if o.MaxRetries == 0 {
		o.MaxRetries = 3
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 100 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 30 * time.Second
	}
	if o.RetryRatio == 0 {
		o.RetryRatio = 0.2
	}
	if o.RetryPerSecond == 0 {
		o.RetryPerSecond = 5
	}
	if o.RetryBurst == 0 {
		o.RetryBurst = 10
	}
}

// hookDefaults sets the functions left nil (NotProcessed and the test
// seams) to their defaults.
func (o *Options) hookDefaults() {
	if o.NotProcessed == nil {
		o.NotProcessed = DefaultNotProcessed
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
}

// base is what sends each attempt: Base, or http.DefaultTransport.
func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// idempotent reports whether req may be sent twice with the effect of
// once: its method is (RFC 9110), or it carries an Idempotency-Key (as
// net/http takes it).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// rewindable reports whether req's body can be sent again.
func rewindable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// RoundTrip sends req, waiting first while its policy has nothing left,
// and retries a 429 or 503 as the package documentation describes.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.init()
	ctx := req.Context()
	host := req.URL.Host
	path := req.URL.Path
	canRetry := rewindable(req) && t.MaxRetries > 0
	if t.budget != nil {
		t.budget.request(t.Now())
	}
	var prev *http.Response // the refusal being retried
	for attempt := 0; ; attempt++ {
		tk, err := t.waitTurn(ctx, host, path)
		if err != nil {
			return giveUp(req, prev, err)
		}
		if prev != nil {
			drain(prev.Body)
			prev = nil
		}
		resp, info, now, err := t.send(req, attempt, tk)
		if err != nil {
			return nil, err
		}
		d, again := t.retryAfter(req, resp, info, now, attempt, canRetry)
		if !again {
			return resp, nil
		}
		if err := t.Sleep(ctx, d); err != nil {
			// The caller gave up while we waited: the response is theirs.
			return resp, nil
		}
		prev = resp
	}
}

// waitTurn waits while the policy of host and path has nothing left (see
// pacer.acquire); with NoPacing it returns at once, with no ticket.
func (t *Transport) waitTurn(ctx context.Context, host, path string) (ticket, error) {
	if t.NoPacing {
		return ticket{}, nil
	}
	return t.pace.acquire(ctx, host, path, t.Now, t.FailFast, t.MaxDelay, t.Sleep)
}

// giveUp ends a RoundTrip of req whose next attempt cannot go (err): the
// refusal being retried, prev, is the answer; with none, err is, and
// req's body is closed, as a RoundTripper closes it even on errors.
func giveUp(req *http.Request, prev *http.Response, err error) (*http.Response, error) {
	if prev != nil {
		return prev, nil
	}
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, err
}

// send sends attempt of req (a clone with its body again after the
// first) under the pacing ticket tk, and records the answer's limits as
// of now, the time it arrived.
func (t *Transport) send(req *http.Request, attempt int, tk ticket) (resp *http.Response, info Info, now time.Time, err error) {
	host, path := req.URL.Host, req.URL.Path
	send := req
	if attempt > 0 {
		send = req.Clone(req.Context())
		if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				t.pace.record(tk, host, path, nil, t.Now())
				return nil, Info{}, now, err
			}
			send.Body = body
		}
	}
	resp, err = t.base().RoundTrip(send)
	if err != nil {
		t.pace.record(tk, host, path, nil, t.Now())
		return nil, Info{}, now, err
	}
	now = t.Now()
	info = ParseResponse(resp.Header, now)
	t.pace.record(tk, host, path, &info, now)
	return resp, info, now, nil
}

// retryAfter returns how long to wait before retrying req, whose attempt
// resp answered, or false when resp is the answer: it is no 429 or 503,
// retries are used up (or impossible), a non-idempotent request may
// have been processed, the server asks for longer than MaxDelay, the
// wait would pass the deadline, or the retry budget is spent.
func (t *Transport) retryAfter(req *http.Request, resp *http.Response, info Info, now time.Time, attempt int, canRetry bool) (time.Duration, bool) {
	if !t.mayRetry(req, resp, attempt, canRetry) {
		return 0, false
	}
	asked := askedWait(info)
	if asked > t.MaxDelay {
		return 0, false
	}
	d := backoff(attempt, t.BaseDelay, t.MaxDelay, asked, t.Rand())
	if dl, ok := req.Context().Deadline(); ok && now.Add(d).After(dl) {
		return 0, false
	}
	if t.budget != nil && !t.budget.retry(now) {
		return 0, false
	}
	return d, true
}

// mayRetry reports whether req, whose attempt resp answered, may be
// tried again at all: resp is a 429 or 503, retries are left and
// possible, and it is safe to send again (safeToRetry).
func (t *Transport) mayRetry(req *http.Request, resp *http.Response, attempt int, canRetry bool) bool {
	return refusal(resp.StatusCode) && canRetry && attempt < t.MaxRetries && t.safeToRetry(req, resp)
}

// safeToRetry reports whether req may be sent again after the refusal
// resp: it is idempotent, or NotProcessed takes resp as proof that it
// never reached the service (resp's body is restored after).
func (t *Transport) safeToRetry(req *http.Request, resp *http.Response) bool {
	if idempotent(req) {
		return true
	}
	notProcessed := false
	resp.Body, notProcessed = peek(resp, t.NotProcessed)
	return notProcessed
}

// refusal reports whether a status is one a request is retried on: 429
// or 503.
func refusal(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// askedWait is how long a response asks to wait: its Retry-After, else,
// when its limit has nothing left, until the limit resets; else zero.
func askedWait(info Info) time.Duration {
	if info.HasRetryAfter {
		return info.RetryAfter
	}
	if info.HasLimit && info.Limit.Remaining == 0 && info.Limit.Reset > 0 {
		return info.Limit.Reset
	}
	return 0
}

// drain reads a little of a body no one will read, so its connection can
// be reused, and closes it.
func drain(b io.ReadCloser) {
	io.CopyN(io.Discard, b, 4<<10)
	b.Close()
}

// peekLimit is how much of a refusal's body NotProcessed may see.
const peekLimit = 64 << 10

// peek lets f see resp with its body read up to peekLimit, then returns
// the body as it was, unread, and f's verdict.
func peek(resp *http.Response, f func(*http.Response) bool) (io.ReadCloser, bool) {
	orig := resp.Body
	buf, err := io.ReadAll(io.LimitReader(orig, peekLimit))
	restored := readCloser{io.MultiReader(bytes.NewReader(buf), orig), orig}
	if err != nil {
		return restored, false
	}
	resp.Body = io.NopCloser(bytes.NewReader(buf))
	ok := f(resp)
	return restored, ok
}

// readCloser reads from one source and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// Never is a NotProcessed that accepts nothing: requests that are not
// idempotent are never retried.
func Never(*http.Response) bool { return false }

// DefaultNotProcessed accepts as proof that a request never reached the
// service a 429 or 503 answered by a Tollgate gateway itself: an
// application/problem+json body whose type is Tollgate's rate-limited,
// too-many-in-flight, limiter-unavailable, login-locked,
// too-many-failures, login-attempts-in-progress or
// identity-provider-keys-unavailable problem, which the
// gateway answers before forwarding anything. Nothing else is accepted: a
// bare 429 or 503 from another server may have come after the work was
// done. (A service behind the gateway could forge such a body; the
// gateway's own answers are what it is meant for.)
func DefaultNotProcessed(resp *http.Response) bool {
	if !refusal(resp.StatusCode) {
		return false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return false
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.NewDecoder(resp.Body).Decode(&p) != nil {
		return false
	}
	switch p.Type {
	case "urn:tollgate:problem:rate-limited", "urn:tollgate:problem:too-many-in-flight",
		"urn:tollgate:problem:limiter-unavailable", "urn:tollgate:problem:login-locked",
		"urn:tollgate:problem:too-many-failures", "urn:tollgate:problem:login-attempts-in-progress",
		"urn:tollgate:problem:identity-provider-keys-unavailable":
		return true
	}
	return false
}
