package resilience

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	if err := s.checkCalendars(reqs); err != nil {
		return nil, err
	}
	now := s.now(reqs[0].Now)
	local := make([]algo.Request, len(reqs))
	for i := range reqs {
		share := Share(reqs[i].Limit, s.opts.Instances)
		if reqs[i].Cost > share.Capacity() {
			return s.overShare(reqs, i, share.Period), nil
		}
		var err error
		if local[i], err = s.fallbackRequest(ctx, &reqs[i], share, now); err != nil {
			return nil, err
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

// checkCalendars refuses a group holding a calendar quota that fails
// closed: with CalendarFallback other than CalendarShare, or without the
// memo of the store's decisions to start it from.
func (s *Store) checkCalendars(reqs []algo.Request) error {
	for _, r := range reqs {
		if r.Limit.Calendar != algo.NoCalendar && (s.opts.CalendarFallback != CalendarShare || s.memo == nil) {
			return fmt.Errorf("deciding locally: %w: %s is a calendar quota, which fails closed", ErrUnavailable, r.Name)
		}
	}
	return nil
}

// overShare is the group's decisions when the cost of reqs[i] is more
// than its share holds: it is refused for its share's period, and the
// others are not charged.
func (s *Store) overShare(reqs []algo.Request, i int, period time.Duration) []algo.Decision {
	ds := make([]algo.Decision, len(reqs))
	for j := range ds {
		ds[j] = algo.Decision{Allowed: j != i, Quota: Share(reqs[j].Limit, s.opts.Instances).Capacity()}
	}
	ds[i].RetryAfter, ds[i].ResetAfter = period, period
	return ds
}

// fallbackRequest is req as the fallback decides it at now: under this
// instance's share of its limit and, with the memo, from the store's last
// decision for its key (the local state seeded with it when fresh).
func (s *Store) fallbackRequest(ctx context.Context, req *algo.Request, share algo.Limit, now time.Time) (algo.Request, error) {
	if s.memo == nil {
		r := *req
		r.Limit = share
		return r, nil
	}
	r, err := s.memo.local(req, &share, now.UnixMilli(), req.Limit.Calendar != algo.NoCalendar, func(seed algo.Request) error {
		_, err := s.local.Allow(ctx, seed)
		return err
	})
	if errors.Is(err, errUnknown) {
		return algo.Request{}, fmt.Errorf("deciding locally: %w: %s is a calendar quota this instance knows nothing of yet, which fails closed", ErrUnavailable, req.Name)
	}
	if err != nil {
		return algo.Request{}, fmt.Errorf("deciding locally: starting from the last decision: %w", err)
	}
	return r, nil
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
