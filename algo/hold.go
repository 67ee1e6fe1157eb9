package algo

import (
	"fmt"
	"time"
)

// MaxHoldTTL bounds [Hold.TTL]: a hold outlives the attempt it stands for
// only when its holder crashed, and then it should not block for long.
const MaxHoldTTL = time.Hour

// Hold is one attempt whose outcome is not known yet (a login forwarded to
// the service behind, say): while it is held, its cost counts against a
// budget as if it were already charged, so that attempts made at once get
// no further than attempts made one at a time. It ends when it is settled
// (charged or given back) or, should its holder never settle it, TTL after
// it was taken.
type Hold struct {
	ID  string        // unique among the holds of one key
	TTL time.Duration // how long the hold lasts unless settled
}

// Validate reports whether the hold is usable.
func (h Hold) Validate() error {
	switch {
	case h.ID == "" || len(h.ID) > 128:
		return fmt.Errorf("%w: the hold id must be 1 to 128 bytes", ErrInvalidRequest)
	case h.TTL < time.Millisecond || h.TTL > MaxHoldTTL:
		return fmt.Errorf("%w: the hold TTL must be 1ms to 1h", ErrInvalidRequest)
	}
	return nil
}

// Holds is the holds of one key: id -> expiry in ms since the epoch. The
// stores keep it beside the key's state (a map in memory, a sorted set in
// Redis).
type Holds map[string]int64

// Live drops the holds that have expired at now and returns how many are
// left.
func (h Holds) Live(now int64) int64 {
	for id, exp := range h {
		if exp <= now {
			delete(h, id)
		}
	}
	return int64(len(h))
}

// Until returns the ms after now at which the last hold expires (0 with
// none).
func (h Holds) Until(now int64) int64 {
	var t int64
	for _, exp := range h {
		t = max(t, exp-now)
	}
	return t
}

// Reserve decides, into r, whether the limit could take the cost of one
// more attempt on top of the held attempts, all of cost cost: whether it
// would admit (held+1)×cost at nowMS. It changes nothing; a caller that
// is admitted adds the hold. Remaining then counts what is left once every
// held attempt is charged. When (held+1)×cost exceeds the limit's capacity
// the answer is a refusal however long one waits for the state; RetryAfter
// is then when the whole capacity is back, and at least 1 ms, since a
// place frees only when a held attempt is given back or expires.
//
// It is how a store decides [Hold]s on a rate limit: the attempt is later
// charged (cost, as [Prepared.Decide] charges) or given back.
func (pl *Prepared) Reserve(r *Result, s *State, held, nowMS, cost int64) error {
	if err := checkCost(cost, pl.p.cap); err != nil {
		*r = Result{}
		return err
	}
	total := (held + 1) * cost
	st := *s
	st.Log = s.Log.Clone()
	if _, err := pl.DecideInto(r, &st, nowMS, min(total, pl.p.cap)); err != nil {
		return err
	}
	if total > pl.p.cap {
		r.Allowed = false
		r.Remaining = 0
		r.RetryAfter = max(r.RetryAfter, r.ResetAfter, 1)
	}
	return nil
}
