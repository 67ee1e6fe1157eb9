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
// or EVALSHA where Redis refuses functions) settles every item as
// [algo.Prepared.Settle] does, on Redis' clock (on the items' Now if set)
// less s.Age, once per s.ID: the call sets a marker key,
// rl:v3:{<group>}:<id>:settled, that lives until the reservation's TTL is
// over, and a settle that finds it changes nothing
// ([algo.SettleRepeated]). A settlement past its TTL writes nothing, not
// even the marker ([algo.SettleExpired]). Each decision is a query of its
// limit after the settle, with the debt it owes: for a repeated or
// expired settlement, as it stands. A key of another type under an item
// fails the settlement, as an [algo.ItemError], with nothing written. On
// Redis' clock a settle may share its call with concurrent ones (see
// [Options.MaxBatch]), each still settled on its own.
func (s *Store) SettleAll(ctx context.Context, st algo.Settlement) (algo.Settled, error) {
	sc, err := newSettleCall(st)
	if err != nil {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w", err)
	}
	c, err := s.conn()
	if err != nil {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w", err)
	}
	var o outcome
	if sc.now == "" && s.batch.maxBatch > 1 {
		o = s.coalesced(ctx, c, sc.keys[0], nil, sc)
	} else {
		o = s.settleOne(ctx, c, sc)
	}
	if o.err != nil {
		return algo.Settled{}, fmt.Errorf("settling in redis: %w", o.err)
	}
	return sc.out, nil
}

// settleCall is one settlement as settle.lua takes it, and its answer.
type settleCall struct {
	items      []algo.SettleItem
	keys       []string // the items' keys, then the marker's
	now, slack string   // as timeArgs returns them
	packed     []byte   // the items' requests (appendRequest), their cost the estimate
	actuals    []byte   // the items' actual costs, little-endian doubles
	age, life  int64    // ms: the reservation's age, and how long the marker is kept (0: expired)
	out        algo.Settled
}

// newSettleCall checks st and returns its call.
func newSettleCall(st algo.Settlement) (*settleCall, error) {
	if err := st.Check(); err != nil {
		return nil, err
	}
	items := st.Items
	sc := &settleCall{items: items, age: ceilMS(st.Age)} // a reservation is never younger than it is
	if !st.Expired() {
		sc.life = ceilMS(st.TTL - st.Age)
	}
	t := items[0].Request.Now
	if !t.IsZero() && t.UnixMilli()-sc.age < 0 {
		return nil, fmt.Errorf("%w: a reservation %v before %v is before the Unix epoch", algo.ErrInvalidRequest, st.Age, t)
	}
	var err error
	if sc.now, sc.slack, err = timeArgs(t); err != nil {
		return nil, err
	}
	sc.keys = make([]string, len(items)+1)
	sc.packed = make([]byte, 0, reqSize*len(items))
	sc.actuals = make([]byte, 0, 8*len(items))
	for i := range items {
		sc.keys[i] = KeyFor(items[i].Request)
		sc.packed = appendRequest(sc.packed, items[i].Request)
		sc.actuals = binary.LittleEndian.AppendUint64(sc.actuals, math.Float64bits(float64(min(items[i].Actual, maxActual))))
	}
	sc.keys[len(items)] = settledKey(items[0].Request.Group(), st.ID)
	return sc, nil
}

// settleOne settles sc with its own call of settle.lua, its answer in
// sc.out.
func (s *Store) settleOne(ctx context.Context, c rueidis.Client, sc *settleCall) outcome {
	res := s.exec(ctx, c, s.settle, sc.keys, []string{sc.now, sc.slack, string(sc.packed),
		strconv.FormatInt(sc.age, 10), strconv.FormatInt(sc.life, 10), string(sc.actuals)})
	msg, err := res.ToMessage()
	if err == nil {
		sc.out, err = decodeSettled(&msg, sc.items)
	}
	return outcome{err: err}
}

// sendSettles settles a batch of live settles on Redis' clock with one
// call of settle.lua's settle_many and hands out the answers.
func (s *Store) sendSettles(c rueidis.Client, live []*pending) {
	if len(live) < 2 {
		s.oneByOne(c, live)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	var keys []string
	var packed, heads, actuals []byte
	for _, p := range live {
		sc := p.settle
		keys = append(keys, sc.keys...)
		packed = append(packed, sc.packed...)
		actuals = append(actuals, sc.actuals...)
		for _, v := range [3]int64{int64(len(sc.items)), sc.age, sc.life} {
			heads = binary.LittleEndian.AppendUint64(heads, math.Float64bits(float64(v)))
		}
	}
	res := s.exec(ctx, c, s.settles, keys, []string{"", "0", string(packed), string(heads), string(actuals)})
	if tryAgain(res) {
		s.oneByOne(c, live)
		return
	}
	msgs, err := res.ToArray()
	if err == nil && len(msgs) != len(live) {
		err = fmt.Errorf("script answered %d values for %d settlements", len(msgs), len(live))
	}
	for i, p := range live {
		if err != nil {
			p.res <- outcome{err: err}
			continue
		}
		var o outcome
		p.settle.out, o.err = decodeSettled(&msgs[i], p.settle.items)
		p.res <- o
	}
}

// ceilMS returns d in whole milliseconds, rounded up.
func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// decodeSettled decodes settle.lua's answer for items: a string of 1 + 6k
// little-endian doubles (the outcome, then each item's five values and
// its debt), an array of an item's index (from 1) and its error, or the
// settlement's error.
func decodeSettled(msg *rueidis.RedisMessage, items []algo.SettleItem) (algo.Settled, error) {
	if err := msg.Error(); err != nil {
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
