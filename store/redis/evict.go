package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// evictionCheckTimeout bounds the check a store makes when it connects.
const evictionCheckTimeout = 10 * time.Second

// EvictionPolicy returns Redis' maxmemory-policy if Redis evicts keys when
// full (a maxmemory is set and the policy is not noeviction), or "" if it
// does not. It reads INFO memory, which managed services that refuse
// CONFIG still answer.
//
// A Redis that evicts forgets, under a flood of new subjects, what the
// store must keep: refusals, account locks and held attempts (every key
// the store writes has a TTL, so the volatile-* policies take them too).
// The store reports such a Redis when it connects (see Options.Logger).
func (s *Store) EvictionPolicy(ctx context.Context) (string, error) {
	c, err := s.conn()
	if err != nil {
		return "", fmt.Errorf("reading redis' eviction policy: %w", err)
	}
	return evictionPolicy(ctx, c)
}

func evictionPolicy(ctx context.Context, c rueidis.Client) (string, error) {
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("reading redis' eviction policy: %w", err)
	}
	var maxmemory, policy string
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "maxmemory":
			maxmemory = v
		case "maxmemory_policy":
			policy = v
		}
	}
	if maxmemory == "" || maxmemory == "0" || policy == "" || policy == "noeviction" {
		return "", nil
	}
	return policy, nil
}

// checkEviction logs an error if Redis, reached through c, evicts keys.
func (s *Store) checkEviction(c rueidis.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), evictionCheckTimeout)
	defer cancel()
	go func() { // Close does not wait for a Redis that does not answer
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	policy, err := evictionPolicy(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "cannot tell whether redis evicts keys", slog.String("error", err.Error()))
		return
	}
	if policy != "" {
		s.log.LogAttrs(ctx, slog.LevelError,
			"redis evicts keys when full: a flood of new subjects can make it forget refusals and account locks; set maxmemory-policy noeviction",
			slog.String("maxmemory-policy", policy))
	}
}
