package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
)

// Reset implements [tollgate.Store]: it deletes each request's state and
// the set of places held on it (one UNLINK per request, both keys in the
// request's hash slot). UNLINK, not DEL: a sliding log may hold 100,000
// members, which DEL frees on Redis' one thread (about 20-60 ms, past
// every caller's deadline); UNLINK frees them in the background.
func (s *Store) Reset(ctx context.Context, reqs []algo.Request) error {
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("resetting in redis: %w", err)
	}
	cmds := make(rueidis.Commands, len(reqs))
	for i, r := range reqs {
		cmds[i] = c.B().Unlink().Key(KeyFor(r), heldKey(r)).Build()
	}
	for _, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("resetting in redis: %w", err)
		}
	}
	return nil
}
