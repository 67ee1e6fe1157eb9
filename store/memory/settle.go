package memory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// SettleAll implements [tollgate.Settler]. The settlement's ID is first
// remembered as settled until its TTL ends (a hold on a key of its own,
// as leases are held), then its items are settled
// under the shard lock, as AllowAll decides a group. An ID remembered
// already changes nothing. When the store has no room to remember an ID
// the settlement is still applied: the tokens were spent, and this
// process's own retries are the caller's to avoid (a [tollgate.Limiter]
// reservation settles once).
func (s *Store) SettleAll(ctx context.Context, st algo.Settlement) (algo.Settled, error) {
	if err := ctx.Err(); err != nil {
		return algo.Settled{}, fmt.Errorf("settling in memory: %w", err)
	}
	if err := st.Check(); err != nil {
		return algo.Settled{}, fmt.Errorf("settling in memory: %w", err)
	}
	reqs := make([]algo.Request, len(st.Items))
	for i := range st.Items {
		reqs[i] = st.Items[i].Request
	}
	var g group
	if err := g.prepare(s, reqs); err != nil {
		return algo.Settled{}, fmt.Errorf("settling in memory: %w", err)
	}
	reservedAt := g.ms - ceilMS(st.Age)
	if reservedAt < 0 {
		return algo.Settled{}, fmt.Errorf("settling in memory: %w: a reservation %v before %d ms is before the Unix epoch", algo.ErrInvalidRequest, st.Age, g.ms)
	}
	out := algo.Settled{Outcome: algo.SettleExpired, Decisions: make([]algo.Decision, len(reqs))}
	if !st.Expired() {
		fresh, err := s.remember(reqs[0].Group(), st.ID, g.ms, g.ms+ceilMS(st.TTL-st.Age))
		if err != nil {
			return algo.Settled{}, fmt.Errorf("settling in memory: %w", err)
		}
		out.Outcome = algo.SettleRepeated
		if fresh {
			out.Outcome = algo.SettleApplied
		}
	}
	g.sh.mu.Lock()
	defer g.sh.mu.Unlock()
	defer g.unlock()
	for i := range reqs {
		it := g.find(i, &reqs[i])
		var err error
		if out.Outcome == algo.SettleApplied {
			it.ttl, err = it.pl.Settle(&it.res, &it.state, g.ms, reservedAt, reqs[i].Cost, st.Items[i].Actual)
		} else {
			// At the estimate: nothing changes, and the result says
			// what the subject owes, as the Redis store's does.
			it.ttl, err = it.pl.Settle(&it.res, &it.state, g.ms, reservedAt, reqs[i].Cost, reqs[i].Cost)
		}
		if err != nil {
			return algo.Settled{}, fmt.Errorf("settling in memory: %w", &algo.ItemError{Index: i, Err: err})
		}
		out.Decisions[i] = it.res.Decision()
	}
	if out.Outcome != algo.SettleApplied {
		return out, nil
	}
	for i := range reqs {
		it := &g.items[i]
		if it.state.A == it.base.A && it.state.B == it.base.B && it.state.C == it.base.C && it.state.D == it.base.D {
			// Unchanged: as in Redis, nothing is written, so a key that
			// expired by the settle's clock is not made afresh for a
			// clock behind it.
			continue
		}
		if err := g.charge(i); err != nil {
			return algo.Settled{}, fmt.Errorf("settling in memory: %w", err)
		}
	}
	return out, nil
}

// remember marks id settled in group at ms, until until, and reports
// whether it was not yet. Each id is a key of its own, in the group's
// shard, holding one hold until then: a group's settles cost the same
// however many are remembered. With no room to remember it, it reports
// it new.
func (s *Store) remember(group, id string, ms, until int64) (fresh bool, err error) {
	k := &key{alg: settleKind, name: id, subject: group}
	h, sh := s.hashes(k)
	var buf [96]byte
	kb := k.appendTo(buf[:0])
	fresh = true
	err = s.updateHeld(sh, h, kb, func() []byte { return s.slotKey(settleKind, id, "", group, 0) }, algo.State{}, ms,
		func(_ *algo.State, ids algo.Holds) (bool, int64, bool) {
			if _, ok := ids[settledHold]; ok {
				fresh = false
				return false, 0, false
			}
			ids[settledHold] = until
			return true, 0, false
		}, nil)
	if errors.Is(err, errNoRoom) || errors.Is(err, ErrFull) {
		return true, nil
	}
	return fresh, err
}

// settledHold is the one hold of a settled id's key.
const settledHold = "s"

// ceilMS returns d in whole milliseconds, rounded up.
func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
