package memory

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/algo"
)

// Held attempts (algo.Hold) are kept beside the state of the key they
// count against, in its entry's leases, so that a key holding attempts is
// pinned like one holding concurrency leases, and both are decided under
// one lock: the login guard's accounts (Lockout) and the rate limits it
// reserves places in (Reserve, Settle).

// A heldOp is an operation on a key's state and holds, given copies: it
// returns whether it changed either, the ms after now from which the
// state (holds aside) is equivalent to a fresh one, and whether the state
// now holds a refusal (see entryHeld).
type heldOp func(st *algo.State, holds algo.Holds) (changed bool, ttl int64, refusal bool)

// updateHeld runs op on the state and live holds of key kb (hash h) in
// sh, and stores what it changed. A key the shard does not hold starts
// from its overflow slot's state, if sk names one that holds some, and
// from fresh (with E from fresh, for a rate limit's scale) otherwise; it
// is added if op changed anything and room can be made, and else its slot
// takes the change, through inSlot if that is set (which may keep some of
// the slot's state, prev, that subjects sharing the slot must not undo).
// The caller holds nothing; updateHeld takes sh.mu.
func (s *Store) updateHeld(sh *shard, h uint64, kb []byte, sk func() []byte, fresh algo.State, ms int64, op heldOp, inSlot func(st *algo.State, prev algo.State)) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.findLocked(sh, h, kb)
	if e != nil {
		defer e.mu.Unlock()
	}
	st := fresh
	holds := algo.Holds{}
	var from uint8 // the log capacity charged for st's log
	var slot *entry
	if e != nil && !e.ghost() {
		if e.expire > ms {
			st, from = e.st, e.logShift
			st.Log = st.Log.Clone()
		} else {
			e.flags &^= entryHeld // the state is fresh
		}
		if e.ext != nil {
			holds = liveLeases(e.ext.leases, ms)
		}
	} else if sh.slots.Load() > 0 {
		// A new key starts from its overflow slot's state: a subject
		// decided there regains nothing when room is made for it.
		if slot = s.findSlot(sh, sk(), e); slot != nil {
			defer slot.mu.Unlock()
			from = inherit(&st, slot, ms)
			if !slot.ghost() && slot.ext != nil {
				holds = liveLeases(slot.ext.leases, ms)
			}
		}
	}
	if holds == nil {
		holds = algo.Holds{}
	}
	prev := st
	changed, ttl, refusal := op(&st, holds)
	if !changed {
		return nil
	}
	expire := ms + max(ttl, holds.Until(ms))
	shift := logShiftOf(st.Log, from)
	need := heldBytes(len(kb), shift, holds)
	switch {
	case e != nil && !e.ghost():
		expire = max(expire, e.expire)
	case e != nil && s.room(sh, ms, need-e.bytes(), false, true):
		e.flags &^= entryGhost
		s.bytes.Add(e.bytes() - need) // room charged all of it; setHeld charges what changes
	case e == nil && s.room(sh, ms, need, true, true):
		e = s.insert(sh, h, kb)
		defer e.mu.Unlock()
		s.bytes.Add(e.bytes() - need)
	default:
		if slot == nil {
			if slot = s.newSlot(sh, sk()); slot == nil {
				return ErrFull
			}
			defer slot.mu.Unlock()
		}
		e = slot
		e.flags &^= entryGhost
		expire = max(expire, e.expire)
		s.overflows.Add(1)
		if inSlot != nil {
			inSlot(&st, prev)
		}
	}
	s.setHeld(e, st, shift, holds, expire)
	if refusal {
		e.flags |= entryHeld
	}
	return nil
}

// heldBytes returns what an entry is charged for a key of klen bytes, a
// log of capacity 1<<shift and holds.
func heldBytes(klen int, shift uint8, holds algo.Holds) int64 {
	n := newEntryBytes(klen, shift)
	if len(holds) == 0 {
		return n
	}
	if klen <= inlineKey {
		n += extBytes
	}
	n += leaseMapBytes(len(holds))
	for id := range holds {
		n += allocBytes(len(id))
	}
	return n
}

// setHeld stores state st (with a log of capacity 1<<shift), holds and
// expire in e, which the caller has locked, and charges the difference.
func (s *Store) setHeld(e *entry, st algo.State, shift uint8, holds algo.Holds, expire int64) {
	before := e.bytes()
	e.st, e.logShift, e.expire = st, shift, expire
	if len(holds) > 0 {
		if e.ext == nil {
			e.ext = &entryExt{}
		}
		var ids int64
		for id := range holds {
			ids += allocBytes(len(id))
		}
		e.ext.leases, e.ext.leaseMax, e.ext.leaseIDs = holds, len(holds), ids
	} else if e.ext != nil {
		e.ext.leases, e.ext.leaseMax, e.ext.leaseIDs = nil, 0, 0
	}
	s.bytes.Add(e.bytes() - before)
}

// Lockout implements [tollgate.Guard]. An account's held attempts are
// kept beside its state; when the store is full and nothing can be
// evicted, accounts share an overflow slot's failures, locks and holds
// (stricter, as a fail-closed guard should be).
func (s *Store) Lockout(ctx context.Context, req algo.LockoutRequest) (algo.LockoutResult, error) {
	if err := ctx.Err(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in memory: %w", err)
	}
	if err := req.Validate(); err != nil {
		return algo.LockoutResult{}, fmt.Errorf("guarding login in memory: %w", err)
	}
	ms := s.msOf(req.Now)
	k := &key{alg: lockoutKind, policy: req.Policy, subject: req.Subject}
	h, sh := s.hashes(k, nil)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	var res algo.LockoutResult
	err := s.updateHeld(sh, h, kb, func() []byte { return s.slotKey(lockoutKind, req.Policy, "", req.Subject, 0) }, algo.State{}, ms,
		func(st *algo.State, holds algo.Holds) (bool, int64, bool) {
			before, n := *st, len(holds)
			_, had := holds[req.Hold.ID]
			var ttl int64
			res, ttl = algo.Lockout(req.Rule, st, holds, ms, req.Op, req.Hold)
			_, has := holds[req.Hold.ID]
			return *st != before || len(holds) != n || had != has, ttl, false // a lock pins by itself
		}, func(st *algo.State, prev algo.State) {
			// A success clears its own account's failures, never those of
			// the accounts sharing a slot: one account an attacker can
			// log into must not reset the count of the others.
			if req.Op == algo.LockSucceed {
				st.A, st.B = prev.A, prev.B
			}
		})
	if err != nil {
		return res, fmt.Errorf("guarding login in memory: %w", err)
	}
	return res, nil
}

// Reserve implements [tollgate.Reserver]: under the key's shard lock, it
// admits the attempt only if the limit could take the cost of every
// attempt held and this one, and then holds it, in the key's entry beside
// its state.
func (s *Store) Reserve(ctx context.Context, req algo.Request, h algo.Hold) (algo.Decision, error) {
	d, err := s.holdOp(ctx, &req, h, true, false)
	if err != nil {
		return d, fmt.Errorf("reserving in memory: %w", err)
	}
	return d, nil
}

// Settle implements [tollgate.Reserver]: it ends the hold and, with
// charge, charges the request as [Store.Allow] would.
func (s *Store) Settle(ctx context.Context, req algo.Request, h algo.Hold, charge bool) (algo.Decision, error) {
	d, err := s.holdOp(ctx, &req, h, false, charge)
	if err != nil {
		return d, fmt.Errorf("settling in memory: %w", err)
	}
	return d, nil
}

// holdOp reserves h on req's limit, or settles it, charging req if charge.
func (s *Store) holdOp(ctx context.Context, req *algo.Request, h algo.Hold, reserve, charge bool) (algo.Decision, error) {
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
	sk := func() []byte { return s.slotKey(k.alg, k.policy, k.tag, k.subject, s.limitFP(&req.Limit)) }
	var r algo.Result
	var opErr error
	err = s.updateHeld(sh, hash, kb, sk, algo.State{E: scale(&req.Limit)}, ms, func(st *algo.State, holds algo.Holds) (bool, int64, bool) {
		if reserve {
			_, again := holds[h.ID]
			held := int64(len(holds))
			if again {
				held--
			}
			if opErr = pl.Reserve(&r, st, held, ms, req.Cost); opErr != nil || !r.Allowed || again {
				return false, 0, false
			}
			holds[h.ID] = ms + h.TTL.Milliseconds()
			return true, 0, false
		}
		_, had := holds[h.ID]
		delete(holds, h.ID)
		cost := int64(0)
		if charge {
			cost = req.Cost
		}
		var ttl int64
		if ttl, opErr = pl.DecideInto(&r, st, ms, cost); opErr != nil {
			return false, 0, false
		}
		charged := r.Allowed && cost > 0
		if !charged {
			ttl = 0
		}
		return had || charged, ttl, charged && r.Remaining == 0
	}, nil)
	if opErr != nil {
		return algo.Decision{}, opErr
	}
	if err != nil {
		return algo.Decision{}, err
	}
	return r.Decision(), nil
}
