package redis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/algo"
)

// Reset implements [tollgate.Store]: it deletes each request's state and
// the set of places held on it (one DEL per request, both keys in the
// request's hash slot).
func (s *Store) Reset(ctx context.Context, reqs []algo.Request) error {
	c, err := s.conn()
	if err != nil {
		return fmt.Errorf("resetting in redis: %w", err)
	}
	cmds := make(rueidis.Commands, len(reqs))
	for i, r := range reqs {
		cmds[i] = c.B().Del().Key(KeyFor(r), heldKey(r)).Build()
	}
	for _, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("resetting in redis: %w", err)
		}
	}
	return nil
}
