package redistest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Keys returns the keys matching pattern on every live master, sorted.
func (c *Cluster) Keys(pattern string) ([]string, error) {
	return c.scan(context.Background(), pattern, false)
}

// KeysWithoutTTL returns the keys matching pattern that have no TTL, on
// every live master, sorted. It mirrors Server.KeysWithoutTTL.
func (c *Cluster) KeysWithoutTTL(ctx context.Context, pattern string) ([]string, error) {
	return c.scan(ctx, pattern, true)
}

func (c *Cluster) scan(ctx context.Context, pattern string, noTTLOnly bool) ([]string, error) {
	masters, err := c.Masters()
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, s := range masters {
		k, err := scanNode(ctx, s.Addr, pattern, noTTLOnly)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		keys = append(keys, k...)
	}
	sort.Strings(keys)
	return keys, nil
}

// scanNode scans one node's keyspace.
func scanNode(ctx context.Context, addr, pattern string, noTTLOnly bool) ([]string, error) {
	rc, err := dialResp(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var keys []string
	cursor := "0"
	for {
		r, err := rc.do(ctx, []string{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"})
		if err != nil {
			return nil, fmt.Errorf("scanning keys: %w", err)
		}
		arr, ok := r[0].([]any)
		if !ok || len(arr) != 2 {
			return nil, fmt.Errorf("scanning keys: unexpected reply %v", r[0])
		}
		next, _ := arr[0].(string)
		batch, _ := arr[1].([]any)
		var names []string
		for _, k := range batch {
			if s, ok := k.(string); ok {
				names = append(names, s)
			}
		}
		if noTTLOnly && len(names) > 0 {
			cmds := make([][]string, len(names))
			for i, k := range names {
				cmds[i] = []string{"PTTL", k}
			}
			ttls, err := rc.do(ctx, cmds...)
			if err != nil {
				return nil, fmt.Errorf("reading TTLs: %w", err)
			}
			for i, k := range names {
				if ttl, ok := ttls[i].(int64); !ok {
					return nil, fmt.Errorf("reading TTL of %q: %v", k, ttls[i])
				} else if ttl == -1 {
					keys = append(keys, k)
				}
			}
		} else if !noTTLOnly {
			keys = append(keys, names...)
		}
		if next == "0" || next == "" {
			return keys, nil
		}
		cursor = next
	}
}

// CommandCalls returns the sum over live masters of the calls counted in
// INFO commandstats for the given commands (e.g. "evalsha", "eval"; case
// does not matter; subcommands are named like "cluster|info").
func (c *Cluster) CommandCalls(cmds ...string) (int64, error) {
	masters, err := c.Masters()
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, cmd := range cmds {
		want[strings.ToLower(cmd)] = true
	}
	var total int64
	for _, s := range masters {
		r, err := query(s.Addr, []string{"INFO", "commandstats"})
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		info, err := asString(r[0])
		if err != nil {
			return 0, fmt.Errorf("node %s: INFO commandstats: %w", s.Addr, err)
		}
		n, err := commandCalls(info, want)
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		total += n
	}
	return total, nil
}

// commandCalls sums calls= of the wanted cmdstat_ lines of INFO commandstats.
func commandCalls(info string, want map[string]bool) (int64, error) {
	var total int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, stats, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || !want[strings.TrimPrefix(name, "cmdstat_")] {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("malformed commandstats line %q", line)
				}
				total += n
			}
		}
	}
	return total, nil
}
