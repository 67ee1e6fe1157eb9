package gateway_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/policy"
)

// TestRedisURLRefused: a Redis URL that the policy never checked (--redis
// and TOLLGATE_REDIS_URL reach the gateway as Options.RedisURL) and that
// the store cannot open stops the gateway with an error that says so and
// why, before it serves anything.
func TestRedisURLRefused(t *testing.T) {
	p := config(t, "builtin:echo", "[]")
	for url, why := range map[string]string{
		"redis://127.0.0.1:6379/x": `invalid database number: "x"`,
		"http://127.0.0.1:6379":    "invalid URL scheme: http",
		"redis://127.0.0.1/0/1":    "invalid URL path",
	} {
		if policy.CheckRedisURL(url) == nil {
			t.Errorf("%s: the policy's check accepts it", url)
		}
		g, err := gateway.New(gateway.Options{Policy: p, RedisURL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			g.Close()
			t.Fatalf("%s: the gateway opened it", url)
		}
		if !strings.HasPrefix(err.Error(), "opening redis store: ") || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want opening redis store: ...%s", url, err, why)
		}
	}
}
