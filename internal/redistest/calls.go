package redistest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"
)

// Calls returns how many times the Redis behind c has run the commands
// named (lower case: "get", "evalsha", "fcall"), summed, as INFO
// commandstats counts them.
func Calls(tb testing.TB, c rueidis.Client, commands ...string) int64 {
	tb.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(commands, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("commandstats line %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}
