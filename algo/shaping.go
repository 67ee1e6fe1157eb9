package algo

import (
	"fmt"
	"time"
)

// Shaping: the operations of a shaping limit (a leaky bucket with
// MaxDelay) beside its Decide: pushing its schedule back, and taking and
// giving back a place in its queue.

// PushingBack returns pl turned into a push back of d on a shaping limit:
// its Decide charges nothing and postpones the schedule the state holds
// so that nothing it admits afterwards has its turn before d from now
// (see [PushBack]). It fails with [ErrInvalidRequest] on a limit that
// does not shape and for a d that is not positive or longer than
// [MaxHorizon]; d is rounded up to a whole millisecond.
func (pl Prepared) PushingBack(d time.Duration) (Prepared, error) {
	switch {
	case pl.p.alg != LeakyBucket || pl.p.delay == 0:
		return pl, fmt.Errorf("%w: only a shaping limit (leaky_bucket with max_delay) has a schedule to push back", ErrInvalidRequest)
	case d <= 0 || d > MaxHorizon:
		return pl, fmt.Errorf("%w: a push back must be positive and at most %v, got %v", ErrInvalidRequest, MaxHorizon, d)
	}
	pl.p.push = int64((d + time.Millisecond - 1) / time.Millisecond)
	return pl, nil
}

// PushBack postpones the schedule of a shaping limit held in s, at nowMS,
// by d: nothing admitted afterwards has its turn before nowMS + d, and from
// then on turns follow at the limit's rate (the bucket is full then, so
// the first comes one unit's drain time after it: no burst). It charges
// nothing, never brings a turn forward (a queue already longer, or a
// longer push back, stands), and reports a query (cost 0) of the
// postponed schedule, whose Delay is the wait of a turn taken now, and
// ttl as [Decide] does. Requests met before the new last update are
// decided as of it with their Delay from now (see [Prepared.Within]), so
// a push back longer than MaxDelay refuses every request until what is
// left of it fits; the stored level itself stays within MaxDelay, so the
// clamp of the level never shortens a push back, which the state carries
// in its last update.
func PushBack(l Limit, s *State, nowMS int64, d time.Duration) (r Result, ttl int64, err error) {
	p, err := l.Prepare()
	if err != nil {
		return r, 0, err
	}
	if p, err = p.PushingBack(d); err != nil {
		return r, 0, err
	}
	return p.Decide(s, nowMS, 0)
}

// pushBack is PushBack on the state s at now by p.push ms.
func pushBack(p params, s *State, now int64) (Result, int64) {
	capU := p.cap * p.period
	limU := capU + p.delay*p.n
	at := now + p.push
	lvl, last := min(s.A, limU), s.B
	t := max(at, last)
	// The level each schedule has at t: the one stored, drained since its
	// last update, and the pushed one, a full bucket at at.
	var held, pushed int64
	if el := t - last; el < ceilDiv(lvl, p.n) {
		held = lvl - el*p.n
	}
	if el := t - at; el < ceilDiv(capU, p.n) {
		pushed = capU - el*p.n
	}
	s.A, s.B = max(held, pushed), t
	q := *s
	r, _ := leakyBucket(p, &q, now, 0)
	return r, r.ResetAfter
}

// Place identifies a place taken in a shaping queue: the state its
// admission left (the level and the last update, see [State]). The place
// is still the last one in the queue while the state is exactly that: any
// later charge changes it. The zero Place is none.
type Place struct {
	Level, Last int64
}

// Taking returns pl reporting in *p, when its Decide charges a shaping
// limit, the place the charge took (the state it left), for a later
// [Prepared.GivingBack]; *p is left alone otherwise.
func (pl Prepared) Taking(p *Place) Prepared {
	pl.p.place = p
	return pl
}

// GivingBack returns pl turned into a give back of at: its Decide, with
// the cost at took, gives the place back if it is still the last in the
// queue (the state is at) and reports Allowed; otherwise it changes
// nothing and reports Allowed false. Either way the other fields are a
// query's (cost 0) after it. It fails with [ErrInvalidRequest] on a limit
// that does not shape or for the zero Place.
func (pl Prepared) GivingBack(at Place) (Prepared, error) {
	if pl.p.alg != LeakyBucket || pl.p.delay == 0 {
		return pl, fmt.Errorf("%w: only a shaping limit (leaky_bucket with max_delay) has places to give back", ErrInvalidRequest)
	}
	if at == (Place{}) {
		return pl, fmt.Errorf("%w: no place to give back", ErrInvalidRequest)
	}
	pl.p.give = &at
	return pl, nil
}

// giveBack is the give back of p.give, taken with cost, from s at now:
// only while the place's turn is still ahead (a place whose turn has come
// was used, or could have been) and nothing has queued behind it.
func giveBack(p params, s *State, now, cost int64) (Result, int64) {
	at := *p.give
	need := cost * p.period
	ahead := at.Level > p.capU && now < at.Last+ceilDiv(at.Level-p.capU, p.n)
	given := ahead && s.A == at.Level && s.B == at.Last && s.A >= need && need > 0
	if given {
		s.A -= need
		if s.A == 0 {
			s.B = 0 // an empty queue: as a key never seen (Redis deletes it)
		}
	}
	q := *s
	r, _ := leakyBucket(p, &q, now, 0)
	r.Allowed = given
	return r, r.ResetAfter
}
