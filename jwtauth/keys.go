package jwtauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrKeysUnavailable is wrapped by the errors of Verify for a token that
// cannot be checked because its JWKS cannot be fetched (no connection,
// no answer in time, an error status, a body that is no key set) and
// the keys fetched before, if any, do not decide it. It is not
// ErrInvalid: the token may be good, and trying again later may verify
// it.
var ErrKeysUnavailable = errors.New("the identity provider's keys are unavailable")

// fetchWait bounds how long a request waits for the JWKS: for the first
// fetch of a URL, and for a fetch a token asks for (Verifier.refresh).
// Once the first fetch has failed, or fetchWait has passed since the URL
// was registered without an answer, a token the keys at hand cannot
// check is refused at once.
const fetchWait = 3 * time.Second

// logEvery is the least time between two lines logged about one URL's
// failed fetches; the next line counts those left out.
const logEvery = 10 * time.Second

// maxJWKSSize bounds the JWKS document read.
const maxJWKSSize = 1 << 20

// Keys is a cache of JWKS documents by URL, refreshed in the background
// (github.com/lestrrat-go/jwx's jwk.Cache): one per process is enough,
// shared by every policy a gateway loads, so a reload keeps the keys. It
// keeps each URL's last fetch's outcome (FetchError), logs failed fetches
// (sampled per URL) and counts them: it is a [prometheus.Collector] of
// tollgate_jwks_fetch_errors_total.
type Keys struct {
	cache  *jwk.Cache
	client *http.Client
	cancel context.CancelFunc
	log    *slog.Logger
	now    func() time.Time

	fetchErrors atomic.Uint64
	descErrors  *prometheus.Desc

	mu   sync.Mutex
	urls map[string]*source
}

// source is one JWKS URL's bookkeeping.
type source struct {
	url string

	refreshing  sync.Mutex // held while a refresh a token asked for runs
	lastRefresh time.Time  // the last refresh a token asked for (under refreshing)

	// settled is closed once the first fetch has ended, or fetchWait has
	// passed since registration without one.
	settled chan struct{}
	timer   *time.Timer // that closes settled after fetchWait

	mu         sync.Mutex // guards the fields below
	isSettled  bool
	err        error     // the last fetch's failure, wrapping ErrKeysUnavailable; nil once one succeeds
	logged     time.Time // when a failure was last logged
	suppressed int64     // failures not logged since
}

// KeysOptions configures a Keys; the zero value is the default.
type KeysOptions struct {
	// HTTPClient fetches the JWKS (default: a client with a 10s timeout).
	HTTPClient *http.Client
	// Logger receives the failed fetches (default: slog.Default()).
	Logger *slog.Logger
	// Now is the clock of the log's sampling and of the refreshes
	// tokens ask for (default: time.Now).
	Now func() time.Time
}

// NewKeys starts a JWKS cache; Close stops it.
func NewKeys(opts KeysOptions) (*Keys, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cache, err := jwk.NewCache(ctx, httprc.NewClient())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("starting the JWKS cache: %w", err)
	}
	k := &Keys{cache: cache, client: opts.HTTPClient, cancel: cancel, log: opts.Logger, now: opts.Now, urls: map[string]*source{},
		descErrors: prometheus.NewDesc("tollgate_jwks_fetch_errors_total",
			"Failed fetches of a JWKS (no connection, no answer in time, an error status, a body that is no key set).", nil, nil)}
	if k.client == nil {
		k.client = &http.Client{Timeout: 10 * time.Second}
	}
	if k.log == nil {
		k.log = slog.Default()
	}
	if k.now == nil {
		k.now = time.Now
	}
	return k, nil
}

// Close stops the cache's background refreshes.
func (k *Keys) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = k.cache.Shutdown(ctx)
	k.cancel()
}

var (
	sharedOnce sync.Once
	shared     *Keys
	sharedErr  error
)

// Shared returns the process's JWKS cache, started on first use and
// never closed.
func Shared() (*Keys, error) {
	sharedOnce.Do(func() { shared, sharedErr = NewKeys(KeysOptions{}) })
	return shared, sharedErr
}

// Describe implements [prometheus.Collector].
func (k *Keys) Describe(ch chan<- *prometheus.Desc) { ch <- k.descErrors }

// Collect implements [prometheus.Collector].
func (k *Keys) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(k.descErrors, prometheus.CounterValue, float64(k.fetchErrors.Load()))
}

// FetchError returns why the JWKS at url cannot be fetched: the error
// of its last fetch (wrapping ErrKeysUnavailable), or that its first
// fetch has not answered within fetchWait; nil if the last fetch
// succeeded, none has ended yet, or url is not registered.
func (k *Keys) FetchError(url string) error {
	k.mu.Lock()
	s := k.urls[url]
	k.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.fetchError()
}

// register makes sure url is in the cache, refreshed between min and
// max (as its Cache-Control asks, within those bounds), without waiting
// for the first fetch.
func (k *Keys) register(ctx context.Context, url string, minInterval, maxInterval time.Duration) (*source, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.urls[url]; ok {
		return s, nil
	}
	s := &source{url: url, settled: make(chan struct{})}
	s.timer = time.AfterFunc(fetchWait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.isSettled {
			s.err = fmt.Errorf("%w: the JWKS did not answer within %v", ErrKeysUnavailable, fetchWait)
			s.settle()
		}
	})
	err := k.cache.Register(ctx, url,
		jwk.WithMinInterval(minInterval), jwk.WithMaxInterval(maxInterval),
		jwk.WithHTTPClient(&fetcher{k: k, s: s}), jwk.WithWaitReady(false))
	if err != nil {
		s.timer.Stop()
		return nil, fmt.Errorf("registering the JWKS: %w", err)
	}
	k.urls[url] = s
	return s, nil
}

// set returns the keys of s, waiting (up to ctx) for its first fetch;
// the error wraps ErrKeysUnavailable. Keys fetched before are returned
// while later fetches fail.
func (k *Keys) set(ctx context.Context, s *source) (jwk.Set, error) {
	select {
	case <-s.settled:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for the JWKS: %w", ErrKeysUnavailable, ctx.Err())
	}
	r, err := k.cache.LookupResource(ctx, s.url)
	if err != nil {
		return nil, fmt.Errorf("%w: looking up the JWKS: %w", ErrKeysUnavailable, err)
	}
	if set := r.Resource(); set != nil {
		return set, nil
	}
	if err := s.fetchError(); err != nil {
		return nil, err
	}
	// The first fetch succeeded: its keys are being stored.
	if err := r.Ready(ctx); err != nil {
		return nil, fmt.Errorf("%w: waiting for the JWKS: %w", ErrKeysUnavailable, err)
	}
	return r.Resource(), nil
}

// refresh fetches the JWKS of s again because a token asked (a key id
// it does not hold, or no keys at all), at most once per minInterval
// whatever the tokens ask, and never while such a refresh runs; it
// reports whether it fetched, successfully or not.
func (k *Keys) refresh(ctx context.Context, s *source, minInterval time.Duration) bool {
	if !s.refreshing.TryLock() {
		return false // tokens do not queue behind a JWKS slow to answer
	}
	defer s.refreshing.Unlock()
	now := k.now()
	if !s.lastRefresh.IsZero() && now.Sub(s.lastRefresh) < minInterval {
		return false
	}
	s.lastRefresh = now
	_, _ = k.cache.Refresh(ctx, s.url) // the fetcher keeps the outcome
	return true
}

// fetchError returns the last fetch's failure, nil if it succeeded.
func (s *source) fetchError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// settle records that the first fetch has ended, or that fetchWait has
// passed without. s.mu is held.
func (s *source) settle() {
	if !s.isSettled {
		s.isSettled = true
		close(s.settled)
	}
}

// observe records the outcome of a fetch of s: err is its failure, nil
// for a success. A failure is counted and logged, at most once per
// logEvery (the next line says how many were left out); the first
// success after failures is logged too.
func (k *Keys) observe(s *source, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer.Stop()
	s.settle()
	attrs := []slog.Attr{slog.String("url", logURL(s.url))}
	if s.suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", s.suppressed))
	}
	if err == nil {
		if s.err != nil {
			k.log.LogAttrs(context.Background(), slog.LevelInfo, "fetching the JWKS succeeded again", attrs...)
		}
		s.err, s.logged, s.suppressed = nil, time.Time{}, 0
		return
	}
	k.fetchErrors.Add(1)
	s.err = fmt.Errorf("%w: fetching the JWKS: %w", ErrKeysUnavailable, err)
	now := k.now()
	if !s.logged.IsZero() && now.Sub(s.logged) < logEvery {
		s.suppressed++
		return
	}
	k.log.LogAttrs(context.Background(), slog.LevelWarn, "fetching the JWKS failed",
		append(attrs, slog.String("error", err.Error()))...)
	s.logged, s.suppressed = now, 0
}

// logURL is u as logged: without user information or query, which might
// hold a secret.
func logURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable)"
	}
	p.User, p.RawQuery, p.ForceQuery = nil, "", false
	return p.String()
}

// fetcher is the HTTP client a source's JWKS is fetched with, in the
// background and on a token's refresh alike: it fails a fetch whose
// answer is no key set (a status other than 200, a body jwk.Parse
// refuses), so that the cache keeps the keys it has, and reports every
// fetch's outcome to its Keys.
type fetcher struct {
	k *Keys
	s *source
}

// Do implements [httprc.HTTPClient].
func (f *fetcher) Do(req *http.Request) (*http.Response, error) {
	res, err := f.fetch(req)
	f.k.observe(f.s, err)
	return res, err
}

// fetch makes req and returns its answer, its body read and checked to
// be a key set.
func (f *fetcher) fetch(req *http.Request) (*http.Response, error) {
	res, err := f.k.client.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSSize+1))
	res.Body.Close()
	switch {
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("the JWKS answered %s", res.Status)
	case err != nil:
		return nil, fmt.Errorf("reading the JWKS: %w", err)
	case len(body) > maxJWKSSize:
		return nil, fmt.Errorf("the JWKS is larger than %d bytes", maxJWKSSize)
	}
	if _, err := jwk.Parse(body); err != nil {
		return nil, fmt.Errorf("parsing the JWKS: %w", err)
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}
