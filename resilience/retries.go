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

// releaseLater retries the release of req until the store answers.
func (s *Store) releaseLater(req algo.LeaseRequest) {
	s.retryLater("lease release", req.TTL, func(ctx context.Context) error { return s.primary.Release(ctx, req) })
}

// SettleAll passes a settlement to the store behind the breaker and the
// deadline; there is no fallback (a reservation the fallback admitted is
// owed to the store behind, as its decisions are, and settled there). A
// settle that fails (other than as invalid) is retried in the background,
// with its age grown, until the store answers or its TTL ends, when the
// estimate stands: a settle is applied once per ID, so a retry of one the
// store did apply changes nothing. The error still says it failed.
func (s *Store) SettleAll(ctx context.Context, st algo.Settlement) (algo.Settled, error) {
	at := time.Now()
	out, err := guarded(s, ctx, func(ctx context.Context) (algo.Settled, error) { return s.primary.SettleAll(ctx, st) })
	if err != nil && !algo.IsInvalid(err) {
		s.retryLater("settle", st.TTL, func(ctx context.Context) error {
			again := st
			again.Age += time.Since(at)
			if again.Expired() {
				return nil
			}
			_, err := s.primary.SettleAll(ctx, again)
			return err
		})
	}
	return out, err
}

// MaxPending bounds the lease releases and settles a Store keeps
// retrying; beyond it, a lease is left to expire by its TTL, and a
// reservation at its estimate.
const MaxPending = 100_000

// retryEvery is how often pending calls are tried while the store does
// not answer. A try through the open breaker costs nothing; once the
// breaker lets a probe through, a pending call may be that probe.
const retryEvery = 25 * time.Millisecond

// pendingCalls is the calls the store has not confirmed, oldest first,
// and the goroutine retrying them (running while there are any). A call
// is done when it returns nil or an invalid-request error.
type pendingCalls struct {
	mu      sync.Mutex
	queue   []func(ctx context.Context) error
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// retryLater queues call (what it does, for the log, and ttl, after which
// it has no effect) and starts retrying if no one is.
func (s *Store) retryLater(what string, ttl time.Duration, call func(ctx context.Context) error) {
	p := &s.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.queue) >= MaxPending {
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "too many calls pending for the store: this one is left to expire",
			slog.String("call", what), slog.Duration("ttl", ttl))
		return
	}
	p.queue = append(p.queue, call)
	if !p.running {
		p.running = true
		p.wg.Add(1)
		go s.retryPending()
	}
}

// retryPending makes the queued calls in order, waiting retryEvery
// whenever the store does not answer, until none is left or the store is
// closed; then it makes one last pass while the store answers.
func (s *Store) retryPending() {
	p := &s.pending
	defer p.wg.Done()
	t := time.NewTimer(retryEvery)
	defer t.Stop()
	stopping := false
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		call := p.queue[0]
		p.mu.Unlock()
		_, err := guarded(s, context.Background(), func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
		if err == nil || algo.IsInvalid(err) {
			p.mu.Lock()
			p.queue[0] = nil
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
		t.Reset(retryEvery)
		select {
		case <-t.C:
		case <-p.stop:
			stopping = true
		}
	}
}

// close stops the retries after their last pass.
func (p *pendingCalls) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
