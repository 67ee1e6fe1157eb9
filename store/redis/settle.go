package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
)

// maxActual is the largest actual cost sent to settle.lua: a debt past it
// is capped in any case (a state owes at most 2^51 units, and a cost of
// 1 is at least one unit), and the double holds it exactly.
const maxActual = 1 << 52

// SettleAll implements [tollgate.Settler]: one call of settle.lua (FCALL,
// or EVALSHA where Redis refuses functions; never coalesced) settles
// every item as [algo.Prepared.Settle] does, on Redis' clock (on the
// items' Now if set) less s.Age, once per s.ID: the call sets a marker
// key, rl:v3:{<group>}:<id>:settled, that lives until the reservation's
// TTL is over, and a settle that finds it changes nothing
// ([algo.SettleRepeated]). A settlement past its TTL writes nothing, not
// even the marker ([algo.SettleExpired]). Each decision is a query of its
// limit after the settle, with the debt it owes: for a repeated or
// expired settlement, as it stands. A key of another type under an item
// fails the call, as an [algo.ItemError], with nothing written.
func (s *Store) SettleAll(ctx context.Context, st algo.Settlement) (algo.Settled, error) {
	if err := st.Check(); err != nil {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w", err)
	}
	items := st.Items
	age := ceilMS(st.Age) // a reservation is never younger than it is
	var life int64        // how long the marker is kept: 0, none, for an expired settlement
	if !st.Expired() {
		life = ceilMS(st.TTL - st.Age)
	}
	t := items[0].Request.Now
	if !t.IsZero() && t.UnixMilli()-age < 0 {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w: a reservation %v before %v is before the Unix epoch", algo.ErrInvalidRequest, st.Age, t)
	}
	now, slack, err := timeArgs(t)
	if err != nil {
		return algo.Settled{}, err
	}
	keys := make([]string, len(items)+1)
	packed := make([]byte, 0, reqSize*len(items))
	actuals := make([]byte, 0, 8*len(items))
	for i := range items {
		keys[i] = KeyFor(items[i].Request)
		packed = appendRequest(packed, items[i].Request)
		actuals = binary.LittleEndian.AppendUint64(actuals, math.Float64bits(float64(min(items[i].Actual, maxActual))))
	}
	keys[len(items)] = settledKey(items[0].Request.Group(), st.ID)
	c, err := s.conn()
	if err != nil {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w", err)
	}
	res := s.exec(ctx, c, s.settle, keys, []string{now, slack, string(packed),
		strconv.FormatInt(age, 10), strconv.FormatInt(life, 10), string(actuals)})
	out, err := decodeSettled(res, items)
	if err != nil {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w", err)
	}
	return out, nil
}

// ceilMS returns d in whole milliseconds, rounded up.
func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// decodeSettled decodes settle.lua's answer for items: a string of 1 + 6k
// little-endian doubles (the outcome, then each item's five values and
// its debt), or an array of an item's index (from 1) and its error.
func decodeSettled(res rueidis.RedisResult, items []algo.SettleItem) (algo.Settled, error) {
	msg, err := res.ToMessage()
	if err != nil {
		return algo.Settled{}, err
	}
	if arr, err := msg.ToArray(); err == nil {
		if len(arr) != 2 {
			return algo.Settled{}, fmt.Errorf("script answered %d values, want an item's index and error", len(arr))
		}
		i, err1 := arr[0].AsInt64()
		text, err2 := arr[1].ToString()
		if err1 != nil || err2 != nil || i < 1 || int(i) > len(items) {
			return algo.Settled{}, fmt.Errorf("script answered an error for item %v of %d", arr[0], len(items))
		}
		return algo.Settled{}, &algo.ItemError{Index: int(i - 1), Err: requestError(text)}
	}
	packed, err := msg.ToString()
	if err != nil {
		return algo.Settled{}, fmt.Errorf("reading script answer: %w", err)
	}
	v := make([]int64, 1+6*len(items))
	if len(packed) != 8*len(v) {
		return algo.Settled{}, fmt.Errorf("script answered %d bytes for %d items, want %d", len(packed), len(items), 8*len(v))
	}
	if err := decodeInts(packed, v); err != nil {
		return algo.Settled{}, err
	}
	if v[0] < 0 || v[0] > int64(algo.SettleExpired) {
		return algo.Settled{}, fmt.Errorf("script answered outcome %d", v[0])
	}
	out := algo.Settled{Outcome: algo.SettleOutcome(v[0]), Decisions: make([]algo.Decision, len(items))}
	for i := range items {
		w := v[1+6*i:]
		out.Decisions[i] = algo.Result{Allowed: w[0] == 1, Quota: items[i].Request.Limit.Capacity(), Remaining: w[1],
			ResetAfter: w[2], RetryAfter: w[3], Delay: w[4], Debt: w[5]}.Decision()
	}
	return out, nil
}
