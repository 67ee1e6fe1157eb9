package memory

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/algo"
)

// AllowAll implements [tollgate.Store]: the requests, which share a
// group and so a shard, are decided under the shard lock and their
// entries' locks on copies of their state, and written back only if all
// are allowed.
func (s *Store) AllowAll(ctx context.Context, reqs []algo.Request) ([]algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	// CheckGroup also rules out two requests with one key, whose entry
	// would be locked twice.
	if err := algo.CheckGroup(reqs); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	var g group
	if err := g.prepare(s, reqs); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	g.sh.mu.Lock()
	defer g.sh.mu.Unlock()
	defer g.unlock()
	all, err := g.decideAll(reqs)
	if err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	ds := make([]algo.Decision, len(reqs))
	if !all {
		g.unspent(ds)
		return ds, nil
	}
	if err := g.chargeAll(reqs, ds); err != nil {
		return nil, fmt.Errorf("deciding in memory: %w", err)
	}
	return ds, nil
}

// decideAll decides every request of the group on copies of their
// states, and reports whether all are allowed.
func (g *group) decideAll(reqs []algo.Request) (bool, error) {
	all := true
	for i := range reqs {
		allowed, err := g.decide(i, &reqs[i])
		if err != nil {
			return false, err
		}
		all = all && allowed
	}
	return all, nil
}

// chargeAll writes back the states of the requests of an allowed group
// that cost anything, and puts their decisions in ds. On an error the
// requests before were charged: a shard with no slot to spare loses
// all-or-nothing.
func (g *group) chargeAll(reqs []algo.Request, ds []algo.Decision) error {
	for i := range reqs {
		ds[i] = g.items[i].res.Decision()
		if reqs[i].Cost == 0 {
			continue
		}
		if err := g.charge(i); err != nil {
			return err
		}
	}
	return nil
}

// A group is the requests AllowAll decides together, in one shard, and
// the entries it has locked.
type group struct {
	s     *Store
	sh    *shard
	ms    int64
	items []groupItem
	held  []*entry // locked, to unlock when done
}

// A groupItem is one request of a group: where its state is kept, the
// state as it stands, and as the request leaves it.
type groupItem struct {
	k     key
	kb    []byte
	hash  uint64
	pl    algo.Prepared
	entry *entry     // the live entry; nil for a new key
	ghost *entry     // the key's ghost entry, if it has one
	slot  *entry     // a new key's overflow slot, if it has one
	sk    []byte     // a new key's overflow slot key
	base  algo.State // the state as it stands
	from  uint8      // the log capacity charged for base
	state algo.State // the state as the request leaves it
	res   algo.Result
	ttl   int64
}

// prepare readies g for reqs, a checked group: their prepared limits,
// keys and hashes, and the shard they share.
func (g *group) prepare(s *Store, reqs []algo.Request) error {
	g.s, g.ms = s, s.msOf(reqs[0].Now)
	g.items = make([]groupItem, len(reqs))
	g.held = make([]*entry, 0, len(reqs))
	for i := range reqs {
		it := &g.items[i]
		pl, err := preparedFor(&reqs[i])
		if err != nil {
			return &algo.ItemError{Index: i, Err: err}
		}
		it.pl = pl
		it.k = keyOf(&reqs[i])
		it.kb = it.k.appendTo(nil)
		it.hash, g.sh = s.hashes(&it.k) // one group: one shard
	}
	return nil
}

// unlock unlocks the entries g locked.
func (g *group) unlock() {
	for _, e := range g.held {
		e.mu.Unlock()
	}
}

// decide finds the state of request i, r, and decides it on a copy,
// reporting whether it is allowed.
func (g *group) decide(i int, r *algo.Request) (bool, error) {
	it := g.find(i, r)
	var err error
	if it.res, it.ttl, err = it.pl.Decide(&it.state, g.ms, r.Cost); err != nil {
		return false, err
	}
	return it.res.Allowed, nil
}

// find finds the state of request i, r, and returns its item, with a
// copy of the state to decide on.
func (g *group) find(i int, r *algo.Request) *groupItem {
	it := &g.items[i]
	e := g.s.findLocked(g.sh, it.hash, it.kb, g.held...)
	if e != nil {
		g.held = append(g.held, e)
		if e.ghost() {
			it.ghost, e = e, nil
		}
	}
	it.entry = e
	switch {
	case e == nil:
		g.fromSlot(i, r)
	case e.expire > g.ms:
		it.base, it.from = e.st, e.logShift
	default:
		it.base.E = scale(&r.Limit)
	}
	if e != nil {
		it.state = it.base
	}
	it.state.Log = it.state.Log.Clone()
	return it
}

// fromSlot starts request i, r, of a new key from its overflow slot's
// state, or, if an earlier request of the group shares the slot, from
// the state that request leaves, so that charging both to the slot loses
// neither.
func (g *group) fromSlot(i int, r *algo.Request) {
	it := &g.items[i]
	it.sk = g.s.slotKey(it.k.alg, it.k.name, it.k.tag, it.k.subject, g.s.limitFP(&r.Limit))
	if j := g.sharing(i); j >= 0 {
		o := &g.items[j]
		it.slot, it.base, it.from, it.state = o.slot, o.base, o.from, o.state
		return
	}
	if g.sh.slots.Load() > 0 {
		if o := g.s.findSlot(g.sh, it.sk, g.held...); o != nil {
			g.held = append(g.held, o)
			it.slot = o
			if !o.ghost() && o.expire > g.ms {
				it.base, it.from = o.st, o.logShift
			}
		}
	}
	it.base.E = scale(&r.Limit)
	it.state = it.base
}

// sharing returns the first request before i with i's overflow slot key,
// or -1.
func (g *group) sharing(i int) int {
	for j := range i {
		if sk := g.items[j].sk; sk != nil && string(sk) == string(g.items[i].sk) {
			return j
		}
	}
	return -1
}

// unspent sets ds for a group refused: nothing is spent, and the limits
// that would have allowed are reported as they stand.
func (g *group) unspent(ds []algo.Decision) {
	for i := range g.items {
		it := &g.items[i]
		if it.res.Allowed {
			st := it.base
			it.res, _, _ = it.pl.Decide(&st, g.ms, 0)
		} else if e := it.entry; e != nil && e.expire > g.ms {
			e.flags |= entryHeld
		}
		ds[i] = it.res.Decision()
	}
}

// charge writes back the state request i leaves: into its entry, a
// ghost revived or a new entry, room permitting, else its overflow slot.
func (g *group) charge(i int) error {
	it := &g.items[i]
	s, sh, ms := g.s, g.sh, g.ms
	shift := logShiftOf(it.state.Log, it.from)
	e := it.entry
	switch {
	case e != nil:
		if e.expire <= ms {
			e.flags &^= entryHeld // the state was fresh
		}
		s.setState(e, &it.state, it.from)
	case it.ghost != nil && s.room(sh, ms, logBytes(shift), false, true):
		e = it.ghost
		e.flags &^= entryGhost
		e.st, e.logShift = it.state, shift // room charged the log
	case it.ghost == nil && s.room(sh, ms, newEntryBytes(len(it.kb), shift), true, true):
		e = s.insert(sh, it.hash, it.kb)
		g.held = append(g.held, e)
		e.st, e.logShift = it.state, shift
	default:
		var err error
		if e, err = g.toSlot(i); err != nil {
			return err
		}
	}
	e.expire = ms + it.ttl
	if it.ttl == 0 {
		// A state as none (a settle's that gave everything back): gone
		// for every clock, a clock behind this one's included, as the
		// Redis store deletes its key.
		e.expire = 0
	}
	markHeld(e, &it.res)
	return nil
}

// toSlot writes the state request i leaves into its overflow slot,
// creating it unless another request of the group has.
func (g *group) toSlot(i int) (*entry, error) {
	it := &g.items[i]
	if it.slot == nil {
		if j := g.sharing(i); j >= 0 && g.items[j].slot != nil {
			it.slot = g.items[j].slot
		} else if it.slot = g.s.newSlot(g.sh, it.sk); it.slot == nil {
			return nil, ErrFull
		} else {
			g.held = append(g.held, it.slot)
		}
	}
	e := it.slot
	e.flags &^= entryGhost
	g.s.setState(e, &it.state, it.from)
	g.s.overflows.Add(1)
	return e, nil
}
