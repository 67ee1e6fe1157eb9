package resilience

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/tollgate/tollgate/algo"
)

// Acquire passes a lease request to the store behind the breaker and the
// deadline. When it fails and the store may still take the lease (the
// call was sent: it timed out, the connection failed, the caller gave
// up), the lease is the Store's to give back: it releases req.ID in the
// background as soon as the store answers again, and the store's Release
// frees the slot whether the late acquire reaches it before or after (see
// [tollgate.Leaser]). The caller treats the lease as not held.
func (s *Store) Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error) {
	got, err := guarded(s, ctx, func(ctx context.Context) (bool, error) { return s.primary.Acquire(ctx, req) })
	if err != nil && !algo.IsInvalid(err) && !errors.Is(err, gobreaker.ErrOpenState) && !errors.Is(err, gobreaker.ErrTooManyRequests) {
		s.releaseLater(req)
	}
	return got, err
}

// Release passes a lease release to the store behind the breaker and the
// deadline. A release that fails (other than as invalid) is retried in the
// background until the store answers; the error still says it failed.
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	_, err := guarded(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.primary.Release(ctx, req) })
	if err != nil && !algo.IsInvalid(err) {
		s.releaseLater(req)
	}
	return err
}

// MaxPendingReleases bounds the releases a Store keeps retrying; beyond
// it, a lease is left to expire by its TTL.
const MaxPendingReleases = 100_000

// releaseRetry is how often pending releases are tried while the store
// does not answer. A try through the open breaker costs nothing; once the
// breaker lets a probe through, a release may be that probe.
const releaseRetry = 25 * time.Millisecond

// pendingReleases is the releases the store has not confirmed, oldest
// first, and the goroutine retrying them (running while there are any).
type pendingReleases struct {
	mu      sync.Mutex
	queue   []algo.LeaseRequest
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// releaseLater queues the release of req and starts retrying if no one
// is.
func (s *Store) releaseLater(req algo.LeaseRequest) {
	p := &s.releases
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.queue) >= MaxPendingReleases {
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "too many lease releases pending: this one is left to expire",
			slog.Duration("ttl", req.TTL))
		return
	}
	p.queue = append(p.queue, req)
	if !p.running {
		p.running = true
		p.wg.Add(1)
		go s.retryReleases()
	}
}

// retryReleases releases the queued leases in order, waiting releaseRetry
// whenever the store does not answer, until none is left or the store is
// closed; then it makes one last pass while the store answers.
func (s *Store) retryReleases() {
	p := &s.releases
	defer p.wg.Done()
	t := time.NewTimer(releaseRetry)
	defer t.Stop()
	stopping := false
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		req := p.queue[0]
		p.mu.Unlock()
		_, err := guarded(s, context.Background(), func(ctx context.Context) (struct{}, error) { return struct{}{}, s.primary.Release(ctx, req) })
		if err == nil || algo.IsInvalid(err) {
			p.mu.Lock()
			p.queue[0] = algo.LeaseRequest{}
			p.queue = p.queue[1:]
			p.mu.Unlock()
			continue
		}
		if stopping {
			p.mu.Lock()
			p.queue, p.running = nil, false
			p.mu.Unlock()
			return
		}
		t.Reset(releaseRetry)
		select {
		case <-t.C:
		case <-p.stop:
			stopping = true
		}
	}
}

// close stops the retries after their last pass.
func (p *pendingReleases) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
