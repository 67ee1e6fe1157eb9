package memory

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/algo"
)

// Reset implements [tollgate.Store]: each key's entry becomes a ghost
// (its state and the places held on it are gone), as the sweep makes an
// expired one. A key whose state lives in an overflow slot (a full store)
// shares it with others and is not reset there.
func (s *Store) Reset(ctx context.Context, reqs []algo.Request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("resetting in memory: %w", err)
	}
	for i := range reqs {
		k := keyOf(&reqs[i])
		h, sh := s.hashes(&k)
		var buf [96]byte
		kb := k.appendTo(buf[:0])
		sh.mu.Lock()
		if e := s.findLocked(sh, h, kb); e != nil {
			if !e.ghost() {
				s.ghost(e)
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return nil
}
