package gateway_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

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

// TestServingNamesTheStore: the serving line says which store the
// gateway decides on, and a start on a reachable Redis warns of nothing
// (not having reached it before New returns is no warning); one that
// cannot reach Redis warns, with why, and serves.
func TestServingNamesTheStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there now
	cases := []struct {
		name, why, redisURL string
		store               string // the serving line's store, as JSON
		warn                string // the WARN line's message; "" for none
	}{
		{"memory", "the policy's store, in this process", "",
			`{"type":"memory"}`, ""},
		{"redis", "reached before serving: its mode as Redis answered", "redis://" + srv.Addr + "/0",
			`{"type":"redis","mode":"standalone","url":"redis://` + srv.Addr + `/0"}`, ""},
		{"redis unreachable", "past the start's wait: warned of, the mode unknown, the password hidden", "redis://:pw@" + dead + "/0",
			`{"type":"redis","mode":"not known until connected","url":"redis://:xxxxx@` + dead + `/0"}`,
			"redis is not reachable: serving by each route's failure policy until it is"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := startNoWait(t, config(t, "builtin:echo", "[]"), c.redisURL)
			var serving struct{ Store json.RawMessage }
			for deadline := time.Now().Add(10 * time.Second); serving.Store == nil; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no serving line within 10s:\n%s", g.logs.String())
				}
				for _, line := range strings.Split(g.logs.String(), "\n") {
					if strings.Contains(line, `"msg":"serving"`) {
						json.Unmarshal([]byte(line), &serving)
					}
				}
			}
			if string(serving.Store) != c.store {
				t.Errorf("serving line's store: %s, want %s (%s)", serving.Store, c.store, c.why)
			}
			logs := g.logs.String()
			warned := strings.Contains(logs, `"level":"WARN","msg":"`+c.warn+`"`)
			if c.warn == "" && (strings.Contains(logs, `"level":"WARN"`) || strings.Contains(logs, `"level":"ERROR"`)) ||
				c.warn != "" && !warned {
				t.Errorf("want WARN %q (none if empty) (%s):\n%s", c.warn, c.why, logs)
			}
			if strings.Contains(logs, ":pw@") {
				t.Errorf("the log shows the password:\n%s", logs)
			}
		})
	}
}
