package memory

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/algo"
)

// TakePlace implements [tollgate.Shaper]: it decides req as Allow does
// and, when it charges a shaping limit, reports the place the charge took.
func (s *Store) TakePlace(ctx context.Context, req algo.Request) (algo.Decision, algo.Place, error) {
	pl, prefix, err := s.shaping(ctx, &req)
	if err != nil {
		return algo.Decision{}, algo.Place{}, fmt.Errorf("taking a place in memory: %w", err)
	}
	var at algo.Place
	taking := pl.Taking(&at)
	k := keyOf(&req)
	var d algo.Decision
	if err := s.decide(&req, &k, prefix, &taking, &d); err != nil {
		return algo.Decision{}, algo.Place{}, err
	}
	return d, at, nil
}

// GiveBack implements [tollgate.Shaper]: it gives the place at, taken by
// req's cost, back if it is still the last in the queue.
func (s *Store) GiveBack(ctx context.Context, req algo.Request, at algo.Place) (bool, error) {
	pl, prefix, err := s.shaping(ctx, &req)
	if err == nil {
		pl, err = pl.GivingBack(at)
	}
	if err != nil {
		return false, fmt.Errorf("giving back in memory: %w", err)
	}
	if req.Cost == 0 {
		return false, nil
	}
	k := keyOf(&req)
	var d algo.Decision
	if err := s.decide(&req, &k, prefix, &pl, &d); err != nil {
		return false, err
	}
	return d.Allowed, nil
}

// shaping returns req's prepared limit (with its queue threshold) and key
// prefix, checking that the limit shapes and the cost fits.
func (s *Store) shaping(ctx context.Context, req *algo.Request) (algo.Prepared, []byte, error) {
	if err := ctx.Err(); err != nil {
		return algo.Prepared{}, nil, err
	}
	pl, prefix, err := prepared(req)
	if err != nil {
		return pl, nil, err
	}
	if req.Limit.Algorithm != algo.LeakyBucket || req.Limit.MaxDelay <= 0 {
		return pl, nil, fmt.Errorf("%w: places are taken in a shaping limit's queue (leaky_bucket with max_delay), not %v", algo.ErrInvalidRequest, req.Limit)
	}
	if err := req.Limit.CheckCost(req.Cost); err != nil {
		return pl, nil, err
	}
	w, err := pl.Within(req.Within)
	return w, prefix, err
}
