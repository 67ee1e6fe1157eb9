package engine

import (
	"sync"
	"time"
)

// penaltyBox remembers, in this process, client addresses that are over
// their invalid-key budget, so their further key attempts are refused
// without a store call. It holds at most maxPenalties entries.
type penaltyBox struct {
	mu    sync.Mutex
	until map[string]time.Time
}

const maxPenalties = 100_000

func (b *penaltyBox) get(id string, now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.until[id]
	if ok && !now.Before(t) {
		delete(b.until, id)
		return t, false
	}
	return t, ok
}

func (b *penaltyBox) set(id string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.until[id]; !ok && len(b.until) >= maxPenalties {
		// Full: evict, of a few entries taken at random (map order), the
		// one that ends first, so that no request pays for a scan. An
		// address evicted early is still over its budget in the store:
		// its next invalid key is refused there and boxed again.
		var victim string
		var end time.Time
		n := 0
		for k, v := range b.until {
			if n == 0 || v.Before(end) {
				victim, end = k, v
			}
			if n++; n == 8 {
				break
			}
		}
		delete(b.until, victim)
	}
	b.until[id] = t
}

// forget ends id's penalty.
func (b *penaltyBox) forget(id string) {
	b.mu.Lock()
	delete(b.until, id)
	b.mu.Unlock()
}
