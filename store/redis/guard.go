package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// Lockout implements [tollgate.Guard] with one script call. The account's
// state and its held attempts are two keys of one hash slot.
func (s *Store) Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error) {
	if err := req.Validate(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: %w", err)
	}
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return algo.LockoutResult{}, err
	}
	c, err := s.conn()
	if err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: %w", err)
	}
	r := req.Rule
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	key, held := lockKeys(req.Name, req.Subject)
	vals, err := s.lockout.Exec(ctx, c, []string{key, held}, []string{now, slack, strconv.Itoa(int(req.Op)),
		strconv.FormatInt(r.Threshold, 10), ms(r.Lock), ms(r.MaxLock), ms(r.Window), ms(r.Memory),
		req.Hold.ID, ms(req.Hold.TTL), strconv.FormatUint(uint64(req.Spelling), 10)}).AsIntSlice()
	if err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: %w", err)
	}
	if len(vals) != 6 {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in redis: script returned %d values, want 6", len(vals))
	}
	return algo.LockoutResult{Locked: vals[0] == 1, RetryAfter: vals[1], Failures: vals[2], Level: vals[3],
		Reserved: vals[4] == 1, Held: vals[5]}, nil
}

// Reserve implements [tollgate.Reserver] with one script call: it admits
// the attempt only if the limit could take the cost of every attempt held
// and this one, and then holds it. The limit's state and its holds are two
// keys of one hash slot.
func (s *Store) Reserve(ctx context.Context, req algo.Request, h algo.Hold) (algo.Decision, error) {
	d, err := s.holdOp(ctx, req, h, 1)
	if err != nil {
		return d, fmt.Errorf("reserving in redis: %w", err)
	}
	return d, nil
}

// Settle implements [tollgate.Reserver]: it ends the hold and, with
// charge, charges the request as [Store.Allow] would, in one script call.
func (s *Store) Settle(ctx context.Context, req algo.Request, h algo.Hold, charge bool) (algo.Decision, error) {
	op := 2
	if charge {
		op = 3
	}
	d, err := s.holdOp(ctx, req, h, op)
	if err != nil {
		return d, fmt.Errorf("settling in redis: %w", err)
	}
	return d, nil
}

func (s *Store) holdOp(ctx context.Context, req algo.Request, h algo.Hold, op int) (algo.Decision, error) {
	if err := checkRequest(&req); err != nil {
		return algo.Decision{}, err
	}
	if err := h.Validate(); err != nil {
		return algo.Decision{}, err
	}
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return algo.Decision{}, err
	}
	c, err := s.conn()
	if err != nil {
		return algo.Decision{}, err
	}
	var packed [reqSize]byte
	appendRequest(packed[:0], req)
	res := s.exec(ctx, c, s.reserve, []string{KeyFor(req), heldKey(req)}, []string{now, slack, string(packed[:]),
		strconv.Itoa(op), h.ID, strconv.FormatInt(h.TTL.Milliseconds(), 10)})
	outs, err := outcomes(res, 1)
	if err != nil {
		return algo.Decision{}, err
	}
	if outs[0].err != nil {
		return algo.Decision{}, outs[0].err
	}
	return outs[0].decision(req.Limit), nil
}

// Acquire implements [tollgate.Leaser] with one script call. If ctx ends
// first, Acquire returns its error and the lease may still be taken, as
// Redis runs the call whenever it reads it: a caller that does not know
// whether it holds the lease releases it (see [Store.Release]).
func (s *Store) Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error) {
	if err := req.Validate(); err != nil {
		return false, fmt.Errorf("acquiring a lease in redis: %w", err)
	}
	v, err := s.leaseOp(ctx, req, 1)
	if err != nil {
		return false, fmt.Errorf("acquiring a lease in redis: %w", err)
	}
	return v == 1, nil
}

// Release implements [tollgate.Leaser]. A lease that is not held (its
// acquire has not reached Redis yet, or was refused, or the lease expired)
// is remembered as released for req.TTL, in a sorted set beside the
// leases: an Acquire of req.ID that Redis runs meanwhile takes nothing, so
// a release and the acquire it cancels may reach Redis in either order.
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("releasing a lease in redis: %w", err)
	}
	if _, err := s.leaseOp(ctx, req, 2); err != nil {
		return fmt.Errorf("releasing a lease in redis: %w", err)
	}
	return nil
}

func (s *Store) leaseOp(ctx context.Context, req algo.LeaseRequest, op int) (int64, error) {
	now, slack, err := timeArgs(req.Now)
	if err != nil {
		return 0, err
	}
	c, err := s.conn()
	if err != nil {
		return 0, err
	}
	key := leaseKey(req.Name, req.Subject)
	vals, err := s.lease.Exec(ctx, c, []string{key, key + ":released"}, []string{now, slack, strconv.Itoa(op),
		strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.TTL.Milliseconds(), 10), req.ID}).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(vals) != 2 {
		return 0, fmt.Errorf("script returned %d values, want 2", len(vals))
	}
	return vals[0], nil
}
