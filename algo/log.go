package algo

// Log is the sliding-window log of one key: the times and costs of the
// requests admitted in the last period, oldest first. Requests admitted in
// the same millisecond share one entry. The zero Log is empty.
type Log struct {
	ts   []int64 // ring buffer of entry times (ms)
	cost []int64 // ring buffer of entry costs
	head int     // index of the oldest entry
	n    int     // number of entries
	sum  int64   // total cost of the entries
}

// Clone returns a deep copy of g (nil for nil).
func (g *Log) Clone() *Log {
	if g == nil {
		return nil
	}
	c := *g
	c.ts = append([]int64(nil), g.ts...)
	c.cost = append([]int64(nil), g.cost...)
	return &c
}

// Len returns the number of entries in the log.
func (g *Log) Len() int { return g.n }

func (g *Log) at(i int) int { return (g.head + i) % len(g.ts) }

func (g *Log) newest() int64 { return g.ts[g.at(g.n-1)] }

// evict drops entries at or before cutoff.
func (g *Log) evict(cutoff int64) {
	for g.n > 0 && g.ts[g.head] <= cutoff {
		g.sum -= g.cost[g.head]
		g.head = (g.head + 1) % len(g.ts)
		g.n--
	}
	if g.n == 0 {
		g.head = 0
	}
}

func (g *Log) push(ts, cost int64) {
	if g.n > 0 {
		if i := g.at(g.n - 1); g.ts[i] == ts {
			g.cost[i] += cost
			g.sum += cost
			return
		}
	}
	if g.n == len(g.ts) {
		size := max(4, 2*len(g.ts))
		ts2, c2 := make([]int64, size), make([]int64, size)
		for i := 0; i < g.n; i++ {
			ts2[i], c2[i] = g.ts[g.at(i)], g.cost[g.at(i)]
		}
		g.ts, g.cost, g.head = ts2, c2, 0
	}
	i := (g.head + g.n) % len(g.ts)
	g.ts[i], g.cost[i] = ts, cost
	g.n++
	g.sum += cost
}

// slidingLog admits a request when the cost admitted in (now-period, now]
// plus this cost is at most n. Entries that have left the window are
// dropped only when a request is charged, so a refusal or a query changes
// nothing (as in the Redis script).
func slidingLog(p params, s *State, now, cost int64) (Result, int64) {
	g := s.Log
	if g == nil {
		g = &Log{}
	}
	if g.n > 0 && now < g.newest() {
		now = g.newest()
	}
	cutoff := now - p.period
	used, first := g.sum, 0
	for ; first < g.n && g.ts[g.at(first)] <= cutoff; first++ {
		used -= g.cost[g.at(first)]
	}
	r := Result{Quota: p.cap}
	if used+cost <= p.n {
		r.Allowed = true
		if cost > 0 {
			g.evict(cutoff)
			g.push(now, cost)
			s.Log = g
			used += cost
		}
	} else {
		// The request fits once the oldest (used+cost-n) units in the
		// window have left it.
		need := used + cost - p.n
		for i := first; i < g.n; i++ {
			j := g.at(i)
			need -= g.cost[j]
			if need <= 0 {
				r.RetryAfter = g.ts[j] + p.period - now
				break
			}
		}
	}
	r.Remaining = max(0, p.n-used)
	if used > 0 {
		r.ResetAfter = g.newest() + p.period - now
	}
	return r, now
}
