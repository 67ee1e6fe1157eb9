package resilience

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// FallbackAll decides a group in memory, all or nothing, with this
// instance's share of each limit, starting each key from the store's last
// decision for it (see the package documentation). A cost larger than a
// share is refused for a period rather than reported as an error, so a
// fail-open route stays available for cheaper requests. A group holding a
// calendar quota that fails closed (see [CalendarFallback]) is not
// decided: the error wraps [ErrUnavailable].
func (s *Store) FallbackAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
	s.fallbacks.Add(1)
	for _, r := range reqs {
		if r.Limit.Calendar != algo.NoCalendar && (s.opts.CalendarFallback != CalendarShare || s.memo == nil) {
			return nil, fmt.Errorf("deciding locally: %w: %s is a calendar quota, which fails closed", ErrUnavailable, r.Name)
		}
	}
	now := s.now(reqs[0].Now)
	local := make([]algo.Request, len(reqs))
	for i, r := range reqs {
		share := Share(r.Limit, s.opts.Instances)
		if r.Cost > share.Capacity() {
			ds := make([]algo.Decision, len(reqs))
			for j := range ds {
				ds[j] = algo.Decision{Allowed: j != i, Quota: Share(reqs[j].Limit, s.opts.Instances).Capacity()}
			}
			ds[i].RetryAfter, ds[i].ResetAfter = share.Period, share.Period
			return ds, nil
		}
		if s.memo == nil {
			r.Limit = share
			local[i] = r
			continue
		}
		var err error
		local[i], err = s.memo.local(&reqs[i], &share, now.UnixMilli(), r.Limit.Calendar != algo.NoCalendar, func(seed algo.Request) error {
			_, err := s.local.Allow(ctx, seed)
			return err
		})
		if errors.Is(err, errUnknown) {
			return nil, fmt.Errorf("deciding locally: %w: %s is a calendar quota this instance knows nothing of yet, which fails closed", ErrUnavailable, r.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("deciding locally: starting from the last decision: %w", err)
		}
	}
	for i := range local {
		local[i].Now = now
	}
	ds, err := s.local.AllowAll(ctx, local)
	if err == nil && s.memo != nil && tollgate.Admitted(ds) {
		at := now.UnixMilli()
		for i := range reqs {
			s.memo.owe(&reqs[i], &ds[i], at)
		}
	}
	return ds, err
}

// Fallback decides req in memory with this instance's share of its limit,
// as [Store.FallbackAll] decides a group of one. It is for fail-open
// policies while Allow reports [ErrUnavailable].
func (s *Store) Fallback(ctx context.Context, req algo.Request) (algo.Decision, error) {
	ds, err := s.FallbackAll(ctx, []algo.Request{req})
	if err != nil {
		return algo.Decision{}, err
	}
	return ds[0], nil
}

// Share returns the part of l one of n instances enforces alone: Rate and
// Burst divided by n, at least 1.
func Share(l algo.Limit, n int) algo.Limit {
	if n <= 1 {
		return l
	}
	wasRate := l.Burst == l.Rate
	l.Rate = max(1, l.Rate/int64(n))
	switch {
	case l.Burst == 0:
	case wasRate:
		l.Burst = l.Rate
	default:
		l.Burst = max(1, l.Burst/int64(n))
	}
	return l
}

// Owes reports whether req's key has admissions of the fallback that the
// store has not been charged for yet (see the package documentation): a
// refusal of such a key until they are is no answer about the store's own
// state, so the engine's deny cache does not keep it.
func (s *Store) Owes(req algo.Request) bool {
	return s.memo != nil && s.memo.owes(&req, s.now(req.Now).UnixMilli())
}
