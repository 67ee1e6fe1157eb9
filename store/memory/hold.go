package memory

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/algo"
)

// What holdOp does with a hold.
const (
	opReserve = iota
	opGiveBack
	opCharge
)

// Reserve implements [tollgate.Reserver]: under the key's shard lock, it
// admits the attempt only if the limit could take the cost of every
// attempt held and this one, and then holds it, in the key's entry beside
// its state.
func (s *Store) Reserve(ctx context.Context, req algo.Request, h algo.Hold) (algo.Decision, error) {
	d, err := s.holdOp(ctx, &req, h, opReserve)
	if err != nil {
		return d, fmt.Errorf("reserving in memory: %w", err)
	}
	return d, nil
}

// Settle implements [tollgate.Reserver]: it ends the hold and, with
// charge, charges the request as [Store.Allow] would.
func (s *Store) Settle(ctx context.Context, req algo.Request, h algo.Hold, charge bool) (algo.Decision, error) {
	op := opGiveBack
	if charge {
		op = opCharge
	}
	d, err := s.holdOp(ctx, &req, h, op)
	if err != nil {
		return d, fmt.Errorf("settling in memory: %w", err)
	}
	return d, nil
}

func (s *Store) holdOp(ctx context.Context, req *algo.Request, h algo.Hold, op int) (algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, err
	}
	if err := h.Validate(); err != nil {
		return algo.Decision{}, err
	}
	pl, err := req.Limit.Prepare()
	if err != nil {
		return algo.Decision{}, err
	}
	if err := req.Limit.CheckCost(req.Cost); err != nil {
		return algo.Decision{}, err
	}
	ms := s.msOf(req.Now)
	k := keyOf(req)
	hash, sh := s.hashes(&k, nil)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.find(sh, hash, kb)
	var locked []*entry
	if e != nil {
		defer e.mu.Unlock()
		locked = []*entry{e}
	}
	live := e != nil && !e.ghost && e.expire > ms
	var st algo.State
	holds := algo.Holds{}
	if live {
		st = e.st
		if e.ext != nil && e.ext.leases != nil {
			holds = e.ext.leases
		}
	}
	held := holds.Live(ms)
	var r algo.Result
	changed := false
	expire := ms
	switch op {
	case opReserve:
		_, again := holds[h.ID]
		if again {
			held--
		}
		if err := pl.Reserve(&r, &st, held, ms, req.Cost); err != nil {
			return algo.Decision{}, err
		}
		if r.Allowed && !again {
			holds[h.ID] = ms + h.TTL.Milliseconds()
			changed = true
		}
	default:
		if _, ok := holds[h.ID]; ok {
			delete(holds, h.ID)
			changed = true
		}
		cost := int64(0)
		if op == opCharge {
			cost = req.Cost
		}
		ttl, err := pl.DecideInto(&r, &st, ms, cost)
		if err != nil {
			return algo.Decision{}, err
		}
		if r.Allowed && cost > 0 {
			changed = true
			expire = ms + ttl
		}
	}
	if !changed {
		return r.Decision(), nil
	}
	expire = max(expire, ms+holds.Until(ms))
	if live {
		expire = max(expire, e.expire)
	}
	if e == nil || e.ghost {
		if expire <= ms {
			return r.Decision(), nil
		}
		if !s.reserve(sh, ms, locked) {
			s.overflows.Add(1)
			return algo.Decision{}, fmt.Errorf("%w (%d keys)", ErrFull, s.maxKeys)
		}
		if e != nil {
			e.ghost = false
		} else {
			e = s.insert(sh, hash, kb)
			defer e.mu.Unlock()
		}
	}
	e.st, e.expire = st, expire
	if len(holds) > 0 {
		if e.ext == nil {
			e.ext = &entryExt{}
		}
		e.ext.leases = holds
	} else if e.ext != nil {
		e.ext.leases = nil
	}
	return r.Decision(), nil
}
