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
	u := heldUpdate{s: s, sh: sh, ms: ms}
	defer u.unlock()
	u.find(h, kb, sk)
	st, from := u.start(fresh)
	ownHolds, slotHolds := liveHolds(u.e, ms), liveHolds(u.slot, ms)
	view := make(algo.Holds, len(ownHolds)+len(slotHolds))
	maps.Copy(view, ownHolds)
	maps.Copy(view, slotHolds)
	prev := st
	changed, ttl, refusal := op(&st, view)
	if !changed {
		return nil
	}
	w := heldWrite{st: &st, shift: logShiftOf(st.Log, from), ttl: ttl, refusal: refusal,
		added: addedHolds(view, ownHolds, slotHolds)}
	keepHolds(ownHolds, view) // written below if the key has an entry
	slotChanged := keepHolds(slotHolds, view)
	toSlot, err := u.place(h, kb, ownHolds, &w)
	if err != nil || !toSlot && len(w.added) == 0 && !slotChanged {
		return err
	}
	if toSlot && inSlot != nil {
		inSlot(&st, prev)
	}
	return u.writeSlot(slotHolds, &w, toSlot, sk)
}

// A heldUpdate is updateHeld's work on one key, under its shard's lock:
// the key's entry and overflow slot, and the entries it has locked.
type heldUpdate struct {
	s      *Store
	sh     *shard
	ms     int64
	e      *entry // the key's entry (maybe a ghost), or nil
	own    bool   // whether e is live
	slot   *entry // the key's overflow slot, or nil
	locked [3]*entry
	n      int
}

// A heldWrite is what an op left to write: the state (with a log of
// capacity 1<<shift; kept by updateHeld), the ms it lasts, whether it holds a refusal, and
// the holds it added that have found no place yet.
type heldWrite struct {
	st      *algo.State
	shift   uint8
	ttl     int64
	refusal bool
	added   algo.Holds
}

// lock records e, which the caller has locked, to unlock when done.
func (u *heldUpdate) lock(e *entry) {
	u.locked[u.n] = e
	u.n++
}

// unlock unlocks what u locked, last first.
func (u *heldUpdate) unlock() {
	for i := u.n - 1; i >= 0; i-- {
		u.locked[i].mu.Unlock()
	}
}

// find finds and locks the key's entry (kb, hash h) and its overflow
// slot (named by sk).
func (u *heldUpdate) find(h uint64, kb []byte, sk func() []byte) {
	if u.e = u.s.findLocked(u.sh, h, kb); u.e != nil {
		u.lock(u.e)
	}
	u.own = u.e != nil && !u.e.ghost()
	if u.sh.slots.Load() > 0 {
		if u.slot = u.s.findSlot(u.sh, sk(), u.e); u.slot != nil {
			u.lock(u.slot)
		}
	}
}

// start returns the state the op starts from, and the log capacity
// charged for it: the key's own, else its overflow slot's (a subject
// decided there regains nothing when room is made for it), else fresh.
func (u *heldUpdate) start(fresh algo.State) (algo.State, uint8) {
	switch e := u.e; {
	case u.own && e.expire > u.ms:
		st := e.st
		st.Log = st.Log.Clone()
		return st, e.logShift
	case u.own:
		e.flags &^= entryHeld // the state is fresh
		return fresh, 0
	}
	from := inherit(&fresh, u.slot, u.ms)
	return fresh, from
}

// addedHolds returns the holds in view that are neither the key's own
// nor its slot's: the op added them, and they go with the state.
func addedHolds(view, own, slot algo.Holds) algo.Holds {
	var added algo.Holds
	for id, exp := range view {
		_, inOwn := own[id]
		if _, inSlot := slot[id]; !inOwn && !inSlot {
			if added == nil {
				added = algo.Holds{}
			}
			added[id] = exp
		}
	}
	return added
}

// place writes w with the key: into its live entry, with ownHolds (see
// keepOwn); else, if there is anything of its own to keep, into its
// ghost or a new entry, room permitting. It reports whether w goes to
// the slot instead.
func (u *heldUpdate) place(h uint64, kb []byte, ownHolds algo.Holds, w *heldWrite) (toSlot bool, err error) {
	e := u.e
	switch {
	case u.own:
		return false, u.keepOwn(ownHolds, w)
	case w.ttl == 0 && len(w.added) == 0:
		return false, nil // nothing of its own to keep: no entry for it
	case e != nil && u.s.room(u.sh, u.ms, e.bytesWith(w.shift, w.added)-e.bytes(), false, true):
		e.flags &^= entryGhost
	case e == nil && u.s.room(u.sh, u.ms, newHeldBytes(len(kb), w.shift, w.added), true, true):
		e = u.s.insert(u.sh, h, kb)
		u.lock(e)
	default:
		return true, nil
	}
	setHeld(e, *w.st, w.shift, w.added, u.ms+max(w.ttl, w.added.Until(u.ms)))
	w.added = nil
	if w.refusal {
		e.flags |= entryHeld
	}
	return false, nil
}

// keepOwn writes w into the key's live entry, with ownHolds and the holds
// added. A hold added for which there is no room, with nothing that may
// be evicted, is refused (errNoRoom), and so is what it stood for, which
// keeps the bound. (An op that adds a hold changes nothing else.)
func (u *heldUpdate) keepOwn(ownHolds algo.Holds, w *heldWrite) error {
	e := u.e
	holds := withAdded(ownHolds, w.added)
	d := e.bytesWith(w.shift, holds) - e.bytes()
	if d > 0 && len(w.added) > 0 && !u.s.room(u.sh, u.ms, d, false, false) {
		return errNoRoom
	}
	if d <= 0 || len(w.added) == 0 {
		u.s.bytes.Add(d) // a log grows in place
	}
	w.added = nil
	setHeld(e, *w.st, w.shift, holds, max(e.expire, u.ms+w.ttl, u.ms+holds.Until(u.ms)))
	if w.refusal {
		e.flags |= entryHeld
	}
	return nil
}

// withAdded returns holds with added, in a copy if there are any, holds
// itself if not.
func withAdded(holds, added algo.Holds) algo.Holds {
	if len(added) == 0 {
		return holds
	}
	all := make(algo.Holds, len(holds)+len(added))
	maps.Copy(all, holds)
	maps.Copy(all, added)
	return all
}

// writeSlot writes into the key's overflow slot (named by sk), creating
// it if need be,
// slotHolds with the holds added that found no place, and, if toSlot,
// the state. A slot is charged but takes no room.
func (u *heldUpdate) writeSlot(slotHolds algo.Holds, w *heldWrite, toSlot bool, sk func() []byte) error {
	slot := u.slot
	if slot == nil {
		if slot = u.s.newSlot(u.sh, sk()); slot == nil {
			return ErrFull
		}
		u.lock(slot)
	}
	before := slot.bytes()
	if slotHolds == nil {
		slotHolds = w.added
	} else {
		maps.Copy(slotHolds, w.added)
	}
	st, shift, expire := slot.st, slot.logShift, slot.expire
	if slot.ghost() {
		st, shift, expire = algo.State{}, 0, 0
		slot.flags &^= entryGhost
	}
	if toSlot {
		st, shift, expire = *w.st, w.shift, max(expire, u.ms+w.ttl)
		if w.refusal {
			slot.flags |= entryHeld
		}
		u.s.overflows.Add(1)
	}
	setHeld(slot, st, shift, slotHolds, max(expire, u.ms+slotHolds.Until(u.ms)))
	u.s.bytes.Add(slot.bytes() - before)
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
	pl, err := checkHold(ctx, req, h)
	if err != nil {
		return algo.Decision{}, err
	}
	ms := s.msOf(req.Now)
	k := keyOf(req)
	hash, sh := s.hashes(&k)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	sk := func() []byte { return s.slotKey(k.alg, k.name, k.tag, k.subject, s.limitFP(&req.Limit)) }
	op := holdStep{pl: pl, h: h, ms: ms, cost: req.Cost}
	apply := op.settle
	if reserve {
		apply = op.reserve
	} else if !charge {
		op.cost = 0
	}
	err = s.updateHeld(sh, hash, kb, sk, algo.State{E: scale(&req.Limit)}, ms, apply, nil)
	if op.err != nil {
		return algo.Decision{}, op.err
	}
	if errors.Is(err, errNoRoom) {
		// Refused for want of room: come back when a hold has ended.
		op.r.Allowed, op.r.Remaining, op.r.RetryAfter = false, 0, max(op.r.RetryAfter, 1000)
		return op.r.Decision(), nil
	}
	if err != nil {
		return algo.Decision{}, err
	}
	return op.r.Decision(), nil
}

// checkHold checks a hold h on req's limit before anything is read: the
// call is not canceled, h, the limit and req's cost are valid. It returns
// the prepared limit.
func checkHold(ctx context.Context, req *algo.Request, h algo.Hold) (algo.Prepared, error) {
	if err := ctx.Err(); err != nil {
		return algo.Prepared{}, err
	}
	if err := h.Validate(); err != nil {
		return algo.Prepared{}, err
	}
	pl, err := preparedFor(req)
	if err != nil {
		return algo.Prepared{}, err
	}
	return pl, req.Limit.CheckCost(req.Cost)
}

// A holdStep reserves or settles hold h on a limit at ms, and keeps the
// result.
type holdStep struct {
	pl   algo.Prepared
	h    algo.Hold
	ms   int64
	cost int64 // what settling charges, or what the place reserved is for
	r    algo.Result
	err  error
}

// reserve is a heldOp: it holds h if the limit could take the cost of
// every attempt held and this one. Holding h again changes nothing.
func (o *holdStep) reserve(st *algo.State, holds algo.Holds) (bool, int64, bool) {
	_, again := holds[o.h.ID]
	held := int64(len(holds))
	if again {
		held--
	}
	if o.err = o.pl.Reserve(&o.r, st, held, o.ms, o.cost); o.err != nil || !o.r.Allowed || again {
		return false, 0, false
	}
	holds[o.h.ID] = o.ms + o.h.TTL.Milliseconds()
	return true, 0, false
}

// settle is a heldOp: it ends h and charges the cost, as Allow would.
func (o *holdStep) settle(st *algo.State, holds algo.Holds) (bool, int64, bool) {
	_, had := holds[o.h.ID]
	delete(holds, o.h.ID)
	ttl, err := o.pl.DecideInto(&o.r, st, o.ms, o.cost)
	if o.err = err; err != nil {
		return false, 0, false
	}
	charged := o.r.Allowed && o.cost > 0
	if !charged {
		ttl = 0
	}
	return had || charged, ttl, charged && o.r.Remaining == 0
}
