package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tollgate/tollgate"
)

// Shaper is an http.RoundTripper for calling an API that enforces a hard
// rate limit (a payment provider at 100/s, a legacy system that falls
// over) from many instances at once without being refused by it: each
// request first takes a turn in a schedule kept in a shared store (a
// [tollgate.Limiter] on a shaping limit, a [tollgate.LeakyBucket] with
// MaxDelay), then sleeps until its turn and is sent. Instances sharing the
// store leave at the limit's rate together, with no central queue and no
// worker process: the store's decision is the queue.
//
// Requests carry a class (see [WithClass]); a class with a threshold in
// [ShaperOptions.Classes] takes a turn only while the schedule's backlog
// is shorter than it, so critical work keeps its latency while batch work
// saturates the provider. A request that cannot get a turn within its
// class's threshold (or [ShaperOptions.MaxWait]), or before its context's
// deadline, fails at once with an error wrapping
// [tollgate.ErrWouldExceedDeadline], having taken no turn.
//
// A 429 (or a 503 with Retry-After) from the provider pushes the shared
// schedule back by its Retry-After ([tollgate.Shaper]), for every instance:
// nothing then leaves before it ends. The response is returned; to retry
// it, put the Shaper under a [Transport] with NoPacing (the Shaper
// paces): New(shaper, Options{NoPacing: true}), whose retries go through
// the Shaper again and so take a turn after the push back. Turns taken
// before the push back reached the store (at most MaxDelay's worth) keep
// them; if they are refused too, their Retry-After pushes back to the
// same end.
//
// A request whose context ends while it sleeps for its turn returns the
// context's error and gives its turn back if it is still the last one in
// the schedule (see [tollgate.Limiter.Wait]); one that others queued
// behind stays spent, and the provider sees a gap there.
type Shaper struct {
	base    http.RoundTripper
	limiter *tollgate.Limiter
	opts    ShaperOptions
}

// ShaperOptions configures a [Shaper]. The zero value is the default.
type ShaperOptions struct {
	// Key returns the schedule a request joins (the limiter's subject):
	// by default its URL's host, one schedule per provider host.
	Key func(*http.Request) string
	// Cost returns what a request spends of the limit: by default 1. A
	// cost above the limit's burst is an error; zero sends at once.
	Cost func(*http.Request) int64
	// Class returns a request's class: by default the one its context
	// carries ([WithClass]), or "" (the default class).
	Class func(*http.Request) string
	// Classes maps a class to its queue threshold: a request of the class
	// takes a turn only if it comes within it (see
	// [tollgate.WaitOptions.Within]). A class not listed (the default one
	// included) may queue up to the limit's MaxDelay; a threshold of zero
	// means MaxDelay too. Each threshold must be at most MaxDelay.
	Classes map[string]time.Duration
	// MaxWait, when positive, bounds how long a request waits for a turn
	// in all, refusals included: a request whose class's queue is full
	// waits for room while that fits in MaxWait. By default a request
	// waits no longer than its turn: one whose class's queue is full fails
	// at once.
	MaxWait time.Duration
	// Tolerance is how late after its turn a call may wake and still be
	// sent (see [tollgate.WaitOptions.Tolerance]): a call whose process
	// stalled past its turn takes a new one rather than leave with every
	// turn missed meanwhile, a burst the provider would refuse. By default
	// one turn's worth (Period / Rate), at least 5 ms; negative: it is
	// sent however late it wakes.
	Tolerance time.Duration
	// PushBack is how long a 429 without Retry-After pushes the schedule
	// back: by default one second; negative: a 429 without Retry-After
	// pushes nothing back. A 503 pushes back only with a Retry-After.
	PushBack time.Duration
	// MaxPushBack caps how far one response's Retry-After pushes the
	// schedule back, for every instance: by default ten minutes, so a
	// provider (or whoever answers for a host) cannot stop the fleet's
	// calls for days with one header.
	MaxPushBack time.Duration
	// Now is the clock that Retry-After dates are read against: by
	// default time.Now.
	Now func() time.Time
}

// ErrUnknownClass is wrapped by the error of a request whose class is
// not in [ShaperOptions.Classes] when that is not empty and the class is
// not "".
var ErrUnknownClass = errors.New("unknown request class")

// ShapeError is the error of a request the Shaper did not send.
type ShapeError struct {
	Key, Class string
	Err        error
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("shaping a call to %s (class %q): %v", e.Key, e.Class, e.Err)
}

// Unwrap returns the cause: an error wrapping
// [tollgate.ErrWouldExceedDeadline], [ErrUnknownClass], the context's
// error, or the store's.
func (e *ShapeError) Unwrap() error { return e.Err }

// classKey is the context key of a request's class.
type classKey struct{}

// WithClass returns ctx carrying a request class for [Shaper] (e.g.
// "critical", "batch").
func WithClass(ctx context.Context, class string) context.Context {
	return context.WithValue(ctx, classKey{}, class)
}

// ClassOf returns the class ctx carries, or "".
func ClassOf(ctx context.Context) string {
	c, _ := ctx.Value(classKey{}).(string)
	return c
}

// NewShaper returns a Shaper sending through base (nil:
// http.DefaultTransport) once lim gives each request its turn. lim's
// limit must shape (a LeakyBucket with MaxDelay), and every class
// threshold must be at most its MaxDelay.
func NewShaper(base http.RoundTripper, lim *tollgate.Limiter, opts ShaperOptions) (*Shaper, error) {
	if lim == nil {
		return nil, errors.New("creating shaper: nil limiter")
	}
	l := lim.Limit()
	if err := checkShaping(l, opts); err != nil {
		return nil, fmt.Errorf("creating shaper: %w", err)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	opts.setDefaults(l)
	return &Shaper{base: base, limiter: lim, opts: opts}, nil
}

// checkShaping checks that l shapes (a LeakyBucket with MaxDelay) and
// that opts' class thresholds and max wait fit it.
func checkShaping(l tollgate.Limit, opts ShaperOptions) error {
	if l.Algorithm != tollgate.LeakyBucket || l.MaxDelay <= 0 {
		return fmt.Errorf("%w: limit %v does not shape (want leaky_bucket with max_delay)", tollgate.ErrInvalidLimit, l)
	}
	for c, d := range opts.Classes {
		if d < 0 || d > l.MaxDelay || d%time.Millisecond != 0 {
			return fmt.Errorf("class %q: threshold %v must be whole milliseconds between 0 and max_delay %v", c, d, l.MaxDelay)
		}
	}
	if opts.MaxWait < 0 {
		return fmt.Errorf("negative max wait %v", opts.MaxWait)
	}
	return nil
}

// setDefaults sets the options left zero to their defaults for a Shaper
// of the limit l.
func (o *ShaperOptions) setDefaults(l tollgate.Limit) {
	if o.Key == nil {
		o.Key = func(r *http.Request) string { return r.URL.Host }
	}
	if o.Cost == nil {
		o.Cost = func(*http.Request) int64 { return 1 }
	}
	if o.Class == nil {
		o.Class = func(r *http.Request) string { return ClassOf(r.Context()) }
	}
	if o.PushBack == 0 {
		o.PushBack = time.Second
	}
	if o.Tolerance == 0 {
		o.Tolerance = max(l.Period/time.Duration(l.Rate), 5*time.Millisecond)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// RoundTrip waits for req's turn in its schedule, sends it, and pushes
// the schedule back if the provider answers 429 (or 503 with
// Retry-After).
func (s *Shaper) RoundTrip(req *http.Request) (*http.Response, error) {
	key, class := s.opts.Key(req), s.opts.Class(req)
	fail := func(err error) (*http.Response, error) {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, &ShapeError{Key: key, Class: class, Err: err}
	}
	wo, err := s.waitOptions(class)
	if err != nil {
		return fail(err)
	}
	if err := s.limiter.WaitWith(req.Context(), key, s.opts.Cost(req), wo); err != nil {
		return fail(err)
	}
	resp, err := s.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if d, ok := s.pushBack(resp); ok {
		// The provider refused: no instance sends before d. The push back
		// is best effort; the response is the caller's either way.
		s.limiter.PushBack(context.WithoutCancel(req.Context()), key, d)
	}
	return resp, nil
}

// waitOptions are how a request of class waits for its turn: within its
// class's bound, for at most MaxWait, else that bound, else the limit's
// MaxDelay.
func (s *Shaper) waitOptions(class string) (tollgate.WaitOptions, error) {
	within, ok := s.opts.Classes[class]
	if !ok && class != "" && len(s.opts.Classes) > 0 {
		return tollgate.WaitOptions{}, ErrUnknownClass
	}
	maxWait := s.opts.MaxWait
	if maxWait == 0 {
		maxWait = cmp.Or(within, s.limiter.Limit().MaxDelay)
	}
	return tollgate.WaitOptions{Within: within, MaxWait: maxWait, Tolerance: max(s.opts.Tolerance, 0)}, nil
}

// defaultMaxPushBack is ShaperOptions.MaxPushBack's default.
const defaultMaxPushBack = 10 * time.Minute

// pushBack returns how long resp asks the schedule to be pushed back, at
// most MaxPushBack.
func (s *Shaper) pushBack(resp *http.Response) (time.Duration, bool) {
	if !refusal(resp.StatusCode) {
		return 0, false
	}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), resp.Header.Get("Date"), s.opts.Now()); ok {
		most := s.opts.MaxPushBack
		if most <= 0 {
			most = defaultMaxPushBack
		}
		return min(max(d, time.Millisecond), most), true
	}
	if resp.StatusCode == http.StatusTooManyRequests && s.opts.PushBack > 0 {
		return s.opts.PushBack, true
	}
	return 0, false
}
