package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/tollgate/tollgate/algo"
)

// Held attempts (algo.Hold) and concurrency leases are kept beside the
// state of the key they count against, in its entry's leases, so that a
// key holding any is pinned, and both are decided under one lock: the
// login guard's accounts (Lockout), the rate limits it reserves places in
// (Reserve, Settle), and concurrency slots (Acquire). A key's holds in its
// overflow slot count too: the subjects sharing a slot are limited
// together, as they are for state.

// errNoRoom reports a hold refused because the store is full and its key
// cannot grow: the operation is refused rather than let through.
var errNoRoom = errors.New("no room for the hold")

// A heldOp is an operation on a key's state and holds, given copies: it
// returns whether it changed either, the ms after now from which the
// state (holds aside) is equivalent to a fresh one, and whether the state
// now holds a refusal (see entryHeld).
type heldOp func(st *algo.State, holds algo.Holds) (changed bool, ttl int64, refusal bool)

// updateHeld runs op on the state and the live holds of key kb (hash h)
// in sh, and stores what it changed. The state is the key's own or, for a
// key the shard does not hold, its overflow slot's (named by sk), else
// fresh; the holds are the key's own and its slot's. A hold op ended
// leaves wherever it was; one op added goes with the key's state, into its
// entry if room can be made for it; for a key with an entry it is
// refused otherwise (errNoRoom), and for a new key its slot takes it, with
// the state (through inSlot, if that is set, which may keep some of the
// slot's state, prev, that subjects sharing the slot must not undo); a
// slot's holds are bounded by its shared limit. The caller holds nothing;
// updateHeld takes sh.mu.
func (s *Store) updateHeld(sh *shard, h uint64, kb []byte, sk func() []byte, fresh algo.State, ms int64, op heldOp, inSlot func(st *algo.State, prev algo.State)) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.findLocked(sh, h, kb)
	if e != nil {
		defer e.mu.Unlock()
	}
	own := e != nil && !e.ghost()
	var slot *entry
	if sh.slots.Load() > 0 {
		if slot = s.findSlot(sh, sk(), e); slot != nil {
			defer slot.mu.Unlock()
		}
	}
	st := fresh
	var from uint8 // the log capacity charged for st's log
	switch {
	case own && e.expire > ms:
		st, from = e.st, e.logShift
		st.Log = st.Log.Clone()
	case own:
		e.flags &^= entryHeld // the state is fresh
	default:
		// A new key starts from its overflow slot's state: a subject
		// decided there regains nothing when room is made for it.
		from = inherit(&st, slot, ms)
	}
	ownHolds, slotHolds := liveHolds(e, ms), liveHolds(slot, ms)
	view := make(algo.Holds, len(ownHolds)+len(slotHolds))
	maps.Copy(view, ownHolds)
	maps.Copy(view, slotHolds)
	prev := st
	changed, ttl, refusal := op(&st, view)
	if !changed {
		return nil
	}
	var added algo.Holds // new in view: they go with the state
	for id, exp := range view {
		_, inOwn := ownHolds[id]
		if _, inSlot := slotHolds[id]; !inOwn && !inSlot {
			if added == nil {
				added = algo.Holds{}
			}
			added[id] = exp
		}
	}
	keepHolds(ownHolds, view) // written below if the key has an entry
	slotChanged := keepHolds(slotHolds, view)
	shift := logShiftOf(st.Log, from)
	toSlot := false // whether the state goes to the slot
	switch {
	case own:
		withAdded := ownHolds
		if len(added) > 0 {
			withAdded = maps.Clone(ownHolds)
			if withAdded == nil {
				withAdded = algo.Holds{}
			}
			maps.Copy(withAdded, added)
		}
		d := e.bytesWith(shift, withAdded) - e.bytes()
		if d > 0 && len(added) > 0 && !s.room(sh, ms, d, false, false) {
			// No room for a new hold, and nothing may be evicted: it is
			// refused (and so is what it stood for), which keeps the
			// bound. (An op that adds a hold changes nothing else.)
			return errNoRoom
		}
		if d <= 0 || len(added) == 0 {
			s.bytes.Add(d) // a log grows in place
		}
		ownHolds, added = withAdded, nil
		setHeld(e, st, shift, ownHolds, max(e.expire, ms+ttl, ms+ownHolds.Until(ms)))
		if refusal {
			e.flags |= entryHeld
		}
	case ttl == 0 && len(added) == 0:
		// Nothing of its own to keep: no entry for it.
	case e != nil && s.room(sh, ms, e.bytesWith(shift, added)-e.bytes(), false, true):
		e.flags &^= entryGhost
		setHeld(e, st, shift, added, ms+max(ttl, added.Until(ms)))
		added = nil
		if refusal {
			e.flags |= entryHeld
		}
	case e == nil && s.room(sh, ms, newHeldBytes(len(kb), shift, added), true, true):
		e = s.insert(sh, h, kb)
		defer e.mu.Unlock()
		setHeld(e, st, shift, added, ms+max(ttl, added.Until(ms)))
		added = nil
		if refusal {
			e.flags |= entryHeld
		}
	default:
		toSlot = true
	}
	if !toSlot && len(added) == 0 && !slotChanged {
		return nil
	}
	if slot == nil {
		if slot = s.newSlot(sh, sk()); slot == nil {
			return ErrFull
		}
		defer slot.mu.Unlock()
	}
	before := slot.bytes()
	if slotHolds == nil {
		slotHolds = added
	} else {
		maps.Copy(slotHolds, added)
	}
	slotSt, slotShift, expire := slot.st, slot.logShift, slot.expire
	if slot.ghost() {
		slotSt, slotShift, expire = algo.State{}, 0, 0
		slot.flags &^= entryGhost
	}
	if toSlot {
		if inSlot != nil {
			inSlot(&st, prev)
		}
		slotSt, slotShift, expire = st, shift, max(expire, ms+ttl)
		if refusal {
			slot.flags |= entryHeld
		}
		s.overflows.Add(1)
	}
	setHeld(slot, slotSt, slotShift, slotHolds, max(expire, ms+slotHolds.Until(ms)))
	s.bytes.Add(slot.bytes() - before) // a slot is charged but takes no room
	return nil
}

// liveHolds returns a copy of the holds of e (nil or a ghost: none) live
// at ms, or nil.
func liveHolds(e *entry, ms int64) algo.Holds {
	if e == nil || e.ghost() || e.ext == nil {
		return nil
	}
	return liveLeases(e.ext.leases, ms)
}

// keepHolds keeps in m the holds that are in view, with view's expiries,
// and reports whether it removed any.
func keepHolds(m, view algo.Holds) bool {
	removed := false
	for id := range m {
		if exp, ok := view[id]; ok {
			m[id] = exp
		} else {
			delete(m, id)
			removed = true
		}
	}
	return removed
}

// holdBytes returns what holds cost an entry: their map and ids.
func holdBytes(holds algo.Holds) int64 {
	if len(holds) == 0 {
		return 0
	}
	n := leaseMapBytes(len(holds))
	for id := range holds {
		n += allocBytes(len(id))
	}
	return n
}

// bytesWith returns what e would be charged with a log of capacity
// 1<<shift and holds in place of its own (see entry.bytes and setHeld).
func (e *entry) bytesWith(shift uint8, holds algo.Holds) int64 {
	n := entryBytes + logBytes(shift) + holdBytes(holds)
	if e.ext != nil {
		n += extBytes + allocBytes(len(e.ext.key))
	} else if len(holds) > 0 {
		n += extBytes
	}
	return n
}

// newHeldBytes returns what a new entry is charged for a key of klen
// bytes, a log of capacity 1<<shift and holds.
func newHeldBytes(klen int, shift uint8, holds algo.Holds) int64 {
	n := newEntryBytes(klen, shift) + holdBytes(holds)
	if klen <= inlineKey && len(holds) > 0 {
		n += extBytes
	}
	return n
}

// setHeld sets e's state (with a log of capacity 1<<shift), holds and
// expiry. The caller, who holds e.mu, has charged the difference
// (bytesWith).
func setHeld(e *entry, st algo.State, shift uint8, holds algo.Holds, expire int64) {
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
	k := &key{alg: lockoutKind, name: req.Name, subject: req.Subject}
	h, sh := s.hashes(k)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	var res algo.LockoutResult
	err := s.updateHeld(sh, h, kb, func() []byte { return s.slotKey(lockoutKind, req.Name, "", req.Subject, 0) }, algo.State{}, ms,
		func(st *algo.State, holds algo.Holds) (bool, int64, bool) {
			before, n := *st, len(holds)
			_, had := holds[req.Hold.ID]
			var ttl int64
			res, ttl = algo.Lockout(req.Rule, st, holds, ms, req.Op, req.Hold, req.Spelling)
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
	if errors.Is(err, errNoRoom) {
		res.Reserved, res.Held = false, res.Held-1 // not held after all
		return res, nil
	}
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
	pl := (*algo.Prepared)(nil)
	if h := req.Prepared(); h != nil {
		pl = h.Prepared()
	} else {
		p, err := req.Limit.Prepare()
		if err != nil {
			return algo.Decision{}, err
		}
		pl = &p
	}
	pl, werr := pl.For(req)
	if werr != nil {
		return algo.Decision{}, werr
	}
	if err := req.Limit.CheckCost(req.Cost); err != nil {
		return algo.Decision{}, err
	}
	ms := s.msOf(req.Now)
	k := keyOf(req)
	hash, sh := s.hashes(&k)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	sk := func() []byte { return s.slotKey(k.alg, k.name, k.tag, k.subject, s.limitFP(&req.Limit)) }
	var r algo.Result
	var opErr error
	err := s.updateHeld(sh, hash, kb, sk, algo.State{E: scale(&req.Limit)}, ms, func(st *algo.State, holds algo.Holds) (bool, int64, bool) {
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
	if errors.Is(err, errNoRoom) {
		// Refused for want of room: come back when a hold has ended.
		r.Allowed, r.Remaining, r.RetryAfter = false, 0, max(r.RetryAfter, 1000)
		return r.Decision(), nil
	}
	if err != nil {
		return algo.Decision{}, err
	}
	return r.Decision(), nil
}
