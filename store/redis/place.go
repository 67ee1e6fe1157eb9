package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tollgate/tollgate/algo"
)

// TakePlace implements [tollgate.Shaper]: one call of place.lua decides
// req as Allow does (never coalesced) and, when it charges a shaping
// limit, answers the place the charge took.
func (s *Store) TakePlace(ctx context.Context, req algo.Request) (algo.Decision, algo.Place, error) {
	if err := checkShaping(&req); err != nil {
		return algo.Decision{}, algo.Place{}, fmt.Errorf("taking a place in redis: %w", err)
	}
	v, err := s.placeOp(ctx, req, 1, algo.Place{}, 7)
	if err != nil {
		return algo.Decision{}, algo.Place{}, fmt.Errorf("taking a place in redis: %w", err)
	}
	d := algo.Result{Allowed: v[0] == 1, Quota: req.Limit.Capacity(), Remaining: v[1], ResetAfter: v[2], RetryAfter: v[3], Delay: v[4]}.Decision()
	return d, algo.Place{Level: v[5], Last: v[6]}, nil
}

// GiveBack implements [tollgate.Shaper]: one call of place.lua gives the
// place back if it is still the last in the queue.
func (s *Store) GiveBack(ctx context.Context, req algo.Request, p algo.Place) (bool, error) {
	if err := checkShaping(&req); err != nil {
		return false, fmt.Errorf("giving back in redis: %w", err)
	}
	pl, err := req.Limit.Prepare()
	if err == nil {
		_, err = pl.GivingBack(p)
	}
	if err != nil {
		return false, fmt.Errorf("giving back in redis: %w", err)
	}
	v, err := s.placeOp(ctx, req, 2, p, 5)
	if err != nil {
		return false, fmt.Errorf("giving back in redis: %w", err)
	}
	return v[0] == 1, nil
}

// checkShaping validates req as Allow does, and that its limit shapes.
func checkShaping(req *algo.Request) error {
	if err := checkRequest(req); err != nil {
		return err
	}
	if req.Limit.Algorithm != algo.LeakyBucket || req.Limit.MaxDelay <= 0 {
		return fmt.Errorf("%w: places are taken in a shaping limit's queue (leaky_bucket with max_delay), not %v", algo.ErrInvalidRequest, req.Limit)
	}
	return nil
}

// placeOp runs place.lua's operation op and returns the k integers of its
// answer.
func (s *Store) placeOp(ctx context.Context, req algo.Request, op int, p algo.Place, k int) ([]int64, error) {
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return nil, err
	}
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	var packed [reqSize]byte
	appendRequest(packed[:0], req)
	res := s.exec(ctx, c, s.place, []string{KeyFor(req)}, []string{now, slack, string(packed[:]), strconv.Itoa(op),
		strconv.FormatInt(p.Level, 10), strconv.FormatInt(p.Last, 10)})
	b, err := res.ToString()
	if err != nil {
		return nil, err
	}
	if len(b) != 8*k {
		return nil, fmt.Errorf("script answered %d bytes, want %d", len(b), 8*k)
	}
	v := make([]int64, k)
	if err := decodeInts(b, v); err != nil {
		return nil, err
	}
	return v, nil
}
