package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgate/tollgate/algo"
)

// Acquire implements [tollgate.Leaser]: a lease is a hold on the
// subject's lease key (see updateHeld), granted while fewer than the limit
// are held, counting those in the subject's overflow slot, and unless its
// id was released first (see Release).
func (s *Store) Acquire(ctx context.Context, req algo.LeaseRequest) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	if err := req.Validate(); err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	ok := false
	err := s.leaseOp(req, func(ms int64, leases algo.Holds) bool {
		held, released := leaseHolds(req.ID)
		if _, ok := leases[released]; ok {
			return false
		}
		if heldLeases(leases) >= req.Limit {
			return false
		}
		leases[held] = ms + req.TTL.Milliseconds()
		ok = true
		return true
	})
	if errors.Is(err, errNoRoom) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquiring a lease in memory: %w", err)
	}
	return ok, nil
}

// heldLeases counts the leases held among a subject's holds (not those
// remembered as released).
func heldLeases(leases algo.Holds) int64 {
	n := int64(0)
	for id := range leases {
		if id[0] == leaseHeld {
			n++
		}
	}
	return n
}

// Release implements [tollgate.Leaser]. A lease that is not held is
// remembered as released for req.TTL, as the Redis store does, so that an
// Acquire of its id made afterwards takes nothing. (Here no Acquire runs
// after its caller has stopped waiting, so when the store is full and
// that memory would need room it is not kept.)
func (s *Store) Release(ctx context.Context, req algo.LeaseRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("releasing a lease in memory: %w", err)
	}
	err := s.leaseOp(req, func(ms int64, leases algo.Holds) bool {
		held, released := leaseHolds(req.ID)
		if _, ok := leases[held]; ok {
			delete(leases, held)
		} else {
			leases[released] = ms + req.TTL.Milliseconds()
		}
		return true
	})
	if err != nil && !errors.Is(err, errNoRoom) && !errors.Is(err, ErrFull) {
		return fmt.Errorf("releasing a lease in memory: %w", err)
	}
	return nil
}

// The leases of a subject are holds (see updateHeld) whose ids are the
// lease's id after a byte that says what it is: a lease held, or one
// released before it was acquired.
const (
	leaseHeld     = 'L'
	leaseReleased = 'R'
)

// leaseHolds returns the hold ids of lease id held and released.
func leaseHolds(id string) (held, released string) {
	return string(leaseHeld) + id, string(leaseReleased) + id
}

// leaseOp runs op on the live leases of req's subject at the request's
// time; op reports whether it changed them.
func (s *Store) leaseOp(req algo.LeaseRequest, op func(ms int64, leases algo.Holds) bool) error {
	ms := s.msOf(req.Now)
	k := &key{alg: leaseKind, name: req.Name, subject: req.Subject}
	h, sh := s.hashes(k)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	return s.updateHeld(sh, h, kb, func() []byte { return s.slotKey(leaseKind, req.Name, "", req.Subject, 0) }, algo.State{}, ms,
		func(_ *algo.State, leases algo.Holds) (bool, int64, bool) { return op(ms, leases), 0, false }, nil)
}
