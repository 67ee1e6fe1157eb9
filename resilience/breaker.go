package resilience

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/tollgate/tollgate/algo"
)

// guarded runs f against the store behind the breaker and the deadline,
// wrapping unavailability in ErrUnavailable; invalid requests and the
// caller's own cancellation are returned as they are. Every store call of
// the wrapper goes through it.
func guarded[T any](s *Store, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var v T
	_, err := s.cb.Execute(func() (struct{}, error) {
		s.calls.Add(1)
		var err error
		v, err = within(ctx, s.opts.Timeout, f)
		if err != nil && ctx.Err() == nil && !algo.IsInvalid(err) {
			// A failure the breaker counts: say why (sampled), and keep
			// it as the cause to log if it opens the breaker.
			s.lastErr.Store(err.Error())
			s.log.LogAttrs(ctx, slog.LevelWarn, "store call failed", slog.String("error", err.Error()))
		}
		return struct{}{}, err
	})
	if err != nil && ctx.Err() == nil && !algo.IsInvalid(err) {
		return v, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return v, err
}

// within runs f with a deadline of timeout and returns at the deadline
// whether or not f has: the deadline is the wrapper's promise, not the
// store client's (rueidis v1.0.79 makes a call wait, past its context,
// for a connection being dialled). A call given up on runs on in its own
// goroutine until the client returns it, and what it then returns is
// dropped; the store may still have applied it, as it may any call that
// misses its deadline. A panic in f is raised again in the caller while
// it waits.
func within[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	type result struct {
		v     T
		err   error
		panic any
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	done := make(chan result, 1)
	go func() {
		defer cancel()
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panic = p
			}
			done <- r
		}()
		r.v, r.err = f(cctx)
	}()
	var r result
	select {
	case r = <-done:
	case <-cctx.Done():
		select {
		case r = <-done: // answered as the deadline passed
		default:
			var zero T
			return zero, fmt.Errorf("calling the store: %w", cctx.Err())
		}
	}
	if r.panic != nil {
		panic(r.panic)
	}
	return r.v, r.err
}

// Degraded reports whether the breaker is not closed: decisions are
// failing over or being probed.
func (s *Store) Degraded() bool { return s.cb.State() != gobreaker.StateClosed }

// State returns the breaker state: "closed", "half-open" or "open".
func (s *Store) State() string { return s.cb.State().String() }

// Stats is a snapshot of the store's counters.
type Stats struct {
	Calls     uint64 // calls made to the shared store
	Fallbacks uint64 // decisions made by Fallback
	// Pending is how many lease releases and settles wait for the store
	// to answer again.
	Pending int
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.pending.mu.Lock()
	pending := len(s.pending.queue)
	s.pending.mu.Unlock()
	return Stats{Calls: s.calls.Load(), Fallbacks: s.fallbacks.Load(), Pending: pending}
}

// logStateChange logs the breaker's change of state from from to to: a
// warning, with the failure that opened it, or, closing, an info.
func (s *Store) logStateChange(_ string, from, to gobreaker.State) {
	level := slog.LevelWarn
	if to == gobreaker.StateClosed {
		level = slog.LevelInfo
	}
	attrs := []slog.Attr{slog.String("from", from.String()), slog.String("to", to.String())}
	if to == gobreaker.StateOpen {
		if cause, _ := s.lastErr.Load().(string); cause != "" {
			attrs = append(attrs, slog.String("cause", cause))
		}
	}
	s.log.LogAttrs(context.Background(), level, "store circuit breaker "+to.String(), attrs...)
}

// Describe implements [prometheus.Collector].
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.descState
	ch <- s.descCalls
}

// Collect implements [prometheus.Collector].
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.descState, prometheus.GaugeValue, float64(s.cb.State()))
	ch <- prometheus.MustNewConstMetric(s.descCalls, prometheus.CounterValue, float64(s.calls.Load()))
}
