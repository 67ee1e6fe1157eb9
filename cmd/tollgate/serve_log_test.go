package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
)

// A serveTarget is the store a test serves on: the --redis URL (empty
// for the policy's memory store), that URL as the serving line must
// show it, and how many GETs the Redis nodes have answered (nil without
// Redis to ask).
type serveTarget struct {
	url, shown string
	gets       func(t *testing.T) int64
}

// TestServeLog starts `tollgate serve` on the quickstart, in this
// process, and reads its log: a healthy start warns of nothing, the
// serving line names the store (type, Redis' mode, its URL without the
// password) and the policy and listeners, and every duration reads as one
// ("10s"), never a count of nanoseconds. On Redis the log is read once
// the gateway has polled the fleet's state while serving (before, that
// first poll warned "not connected to redis yet").
func TestServeLog(t *testing.T) {
	const unreachable = "redis is not reachable: serving by each route's failure policy until it is"
	cases := []struct {
		name, why string
		target    func(t *testing.T) serveTarget
		mode      string // the serving line's store.mode ("" on memory)
		hidden    string // what no line may show
		warn      string // a WARN line the start must write; "" for no WARN or ERROR at all
	}{
		{"memory", "the quickstart as it ships: nothing to warn of",
			func(*testing.T) serveTarget { return serveTarget{} }, "", "", ""},
		{"redis", "a healthy Redis is reached before the gateway serves: not having reached it yet is no warning",
			standaloneTarget(""), "standalone", "", ""},
		{"redis with a password", "the password authenticates the gateway and appears in no line",
			standaloneTarget("requirepass"), "standalone", "secret-pw", ""},
		{"redis with an ACL user", "the user is shown, its password is not",
			standaloneTarget("acl"), "standalone", "secret-pw", ""},
		{"redis cluster", "the mode Redis answered in, not the policy's default",
			clusterTarget, "cluster", "", ""},
		{"redis sentinel", "the master is found through the sentinels, as the URL's master_set asks",
			sentinelTarget, "sentinel", "", ""},
		{"redis unreachable", "nothing listens: past the start's wait the gateway says so, and serves by each route's failure policy",
			func(t *testing.T) serveTarget {
				addr, _ := freeAddr(t)
				return serveTarget{url: "redis://:secret-pw@" + addr + "/0", shown: "redis://:xxxxx@" + addr + "/0"}
			}, "not known until connected", "secret-pw", unreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := c.target(t)
			lines, raw := serveLines(t, target)
			serving := checkServeLevels(t, lines, c.warn)
			if serving == nil {
				t.Fatalf("no serving line (%s):\n%s", c.why, raw)
			}
			store, _ := serving["store"].(map[string]any)
			want := map[string]any{"type": "memory"}
			if target.url != "" {
				want = map[string]any{"type": "redis", "mode": c.mode, "url": target.shown}
			}
			if fmt.Sprint(store) != fmt.Sprint(want) {
				t.Errorf("serving line's store: %v, want %v (%s)", store, want, c.why)
			}
			if serving["policy_version"] != "quickstart-1" || !strings.HasPrefix(fmt.Sprint(serving["public"]), "127.0.0.1:") ||
				!strings.HasPrefix(fmt.Sprint(serving["admin"]), "127.0.0.2:") {
				t.Errorf("serving line without the policy version and listen addresses: %v", serving)
			}
			if c.hidden != "" && strings.Contains(raw, c.hidden) {
				t.Errorf("the log shows %q (%s):\n%s", c.hidden, c.why, raw)
			}
			checkDurations(t, lines, serving)
		})
	}
}

// checkServeLevels checks that the lines hold warn at WARN, or with warn
// empty no line at WARN or ERROR, and returns the serving line.
func checkServeLevels(t *testing.T, lines []map[string]any, warn string) (serving map[string]any) {
	t.Helper()
	warned := false
	for _, l := range lines {
		switch {
		case l["msg"] == "serving":
			serving = l
		case l["level"] == "WARN" && l["msg"] == warn:
			warned = true
		case warn == "" && (l["level"] == "WARN" || l["level"] == "ERROR"):
			t.Errorf("a healthy start logged at %s: %v", l["level"], l)
		}
	}
	if warn != "" && !warned {
		t.Errorf("no WARN %q in %v", warn, lines)
	}
	return serving
}

// durationKeys are the log's duration attributes.
var durationKeys = map[string]bool{"header_timeout": true, "body_timeout": true, "idle_timeout": true, "send_timeout": true, "waited": true}

// checkDurations checks that every duration attribute of the lines is
// text time.ParseDuration reads, and that the serving line has the
// timeouts the quickstart states.
func checkDurations(t *testing.T, lines []map[string]any, serving map[string]any) {
	t.Helper()
	for _, l := range lines {
		for k, v := range l {
			if !durationKeys[k] {
				continue
			}
			if s, ok := v.(string); !ok {
				t.Errorf("%s=%v (%T) in %q: want a duration as text", k, v, v, l["msg"])
			} else if _, err := time.ParseDuration(s); err != nil {
				t.Errorf("%s=%q in %q: %v", k, s, l["msg"], err)
			}
		}
	}
	for k, want := range map[string]string{"header_timeout": "10s", "body_timeout": "10s", "idle_timeout": "2m0s", "send_timeout": "1m0s"} {
		if serving[k] != want {
			t.Errorf("serving line's %s = %v, want %q", k, serving[k], want)
		}
	}
}

// serveLines runs serve on the quickstart with target's Redis until it
// serves and, on a Redis it can ask, until the gateway has read the
// fleet's state twice (before serving, and its first poll while
// serving); then it stops it and returns the log, as lines and as text.
func serveLines(t *testing.T, target serveTarget) ([]map[string]any, string) {
	t.Helper()
	var log fixture.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveOptions{config: quickstartOnFreePorts(t), redisURL: target.url, simBudget: time.Second}, &log)
	}()
	waitServe(t, done, &log, func() bool { return strings.Contains(log.String(), `"msg":"serving"`) }, "the serving line")
	if target.gets != nil {
		waitServe(t, done, &log, func() bool { return target.gets(t) >= 2 }, "two reads of the fleet's state")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, log.String())
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log.String()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line that is not JSON: %q", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines, log.String()
}

// waitServe waits until ok, for at most 10s (the unreachable Redis's wait
// is 2s), and fails if serve returns first.
func waitServe(t *testing.T, done chan error, log *fixture.SyncBuffer, ok func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serve returned %v before %s:\n%s", err, what, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s:\n%s", what, log.String())
		}
	}
}

// standaloneTarget returns a target on a Redis of its own: with auth
// "requirepass" the default user needs a password, with "acl" the URL
// names a user of its own.
func standaloneTarget(auth string) func(t *testing.T) serveTarget {
	return func(t *testing.T) serveTarget {
		srv := redistest.Start(t)
		admin := srv.NewClient(t) // authenticated from before any password
		userinfo, shown := "", ""
		var cmd []string
		switch auth {
		case "requirepass":
			userinfo, shown, cmd = ":secret-pw@", ":xxxxx@", []string{"CONFIG", "SET", "requirepass", "secret-pw"}
		case "acl":
			userinfo, shown, cmd = "tollgate:secret-pw@", "tollgate:xxxxx@", []string{"ACL", "SETUSER", "tollgate", "on", ">secret-pw", "~*", "&*", "+@all"}
		}
		if cmd != nil {
			if err := admin.Do(context.Background(), admin.B().Arbitrary(cmd...).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		return serveTarget{url: "redis://" + userinfo + srv.Addr + "/0", shown: "redis://" + shown + srv.Addr + "/0",
			gets: func(t *testing.T) int64 { return getCalls(t, admin) }}
	}
}

func clusterTarget(t *testing.T) serveTarget {
	cl := redistest.StartCluster(t, 3, 0)
	addrs := cl.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	var nodes []rueidis.Client
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		nodes = append(nodes, c)
	}
	return serveTarget{url: url, shown: url, gets: func(t *testing.T) int64 {
		var n int64
		for _, c := range nodes {
			n += getCalls(t, c)
		}
		return n
	}}
}

func sentinelTarget(t *testing.T) serveTarget {
	sn := redistest.StartSentinel(t)
	master := sn.Master().NewClient(t)
	return serveTarget{url: sn.URL(), shown: sn.URL(), gets: func(t *testing.T) int64 { return getCalls(t, master) }}
}

// getCalls returns how many GETs the Redis of c has answered.
func getCalls(t *testing.T, c rueidis.Client) int64 { return redistest.Calls(t, c, "get") }

// TestLogDurations: tollgate's log handlers write every duration as
// text, whichever way it reaches them.
func TestLogDurations(t *testing.T) {
	cases := []struct {
		name, why string
		log       func(*slog.Logger)
		want      string
	}{
		{"slog.Duration", "the typed attribute, as the serving line's timeouts",
			func(l *slog.Logger) { l.Info("m", slog.Duration("d", 20*time.Millisecond)) }, "20ms"},
		{"a time.Duration as any", "slog.Any and key-value pairs make a duration value too",
			func(l *slog.Logger) { l.Info("m", "d", 10*time.Second) }, "10s"},
		{"in a group", "attributes in a group are replaced as well",
			func(l *slog.Logger) { l.Info("m", slog.Group("g", slog.Duration("d", time.Minute))) }, "1m0s"},
		{"on a derived logger", "With's attributes go through the same options",
			func(l *slog.Logger) { l.With(slog.Duration("d", 1500*time.Microsecond)).Info("m") }, "1.5ms"},
	}
	for _, c := range cases {
		for _, format := range []string{"json", "text"} {
			var b strings.Builder
			h := slog.Handler(slog.NewJSONHandler(&b, logOptions(slog.LevelInfo)))
			if format == "text" {
				h = slog.NewTextHandler(&b, logOptions(slog.LevelInfo))
			}
			c.log(slog.New(h))
			want := `"d":"` + c.want + `"`
			if format == "text" {
				want = "d=" + c.want
			}
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s, %s: %q, want %s (%s)", c.name, format, b.String(), want, c.why)
			}
		}
	}
}
