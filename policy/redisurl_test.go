package policy_test

import (
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/policy"
)

// TestCheckRedisURL: CheckRedisURL accepts the URLs the Redis store opens
// (rueidis.ParseURL, which the gateway opens them with) and refuses, with
// a message naming the fault, every URL the store refuses, and a few more
// that it would take to mean what they cannot (no host, a negative
// database, a port out of range, an empty addr).
func TestCheckRedisURL(t *testing.T) {
	cases := []struct {
		url  string
		want string // "" to accept, else a part of the error
		// stricter: the store opens it, but it cannot be what was meant.
		stricter bool
	}{
		{url: "redis://127.0.0.1:6379/0"},
		{url: "redis://cache:6379"},
		{url: "redis://cache"},
		{url: "redis://cache/15"},
		{url: "rediss://cache:6380/2"},
		{url: "redis://user:pass@cache:6379/0"},
		{url: "redis://:pass@cache:6379/0"},
		{url: "redis://[::1]:6379/0"},
		{url: "redis://n1:7000?addr=n2:7001&addr=n3:7002"},
		{url: "redis://s1:26379?addr=s2:26379&master_set=mymaster"},
		{url: "redis://cache/0?dial_timeout=1s&write_timeout=500ms&db=2&protocol=2&client_name=gw"},
		{url: "rediss://cache?skip_verify=true"},
		{url: "rediss://cache?skip_verify"},
		{url: "unix:///var/run/redis.sock"},
		{url: "unix:///var/run/redis.sock?db=3"},
		{url: "valkey://cache:6379/0"},
		{url: "valkeys://cache:6379/0"},

		{url: "http://cache:6379", want: `scheme "http"`},
		{url: "cache:6379", want: `scheme "cache"`},
		{url: "", want: "scheme"},
		{url: "redis://cache:6379/x", want: `database number "x"`},
		{url: "redis://cache:6379/", want: `database number ""`},
		{url: "redis://cache:6379/0/1", want: "path"},
		{url: "redis://cache?db=x", want: `database number "x"`},
		{url: "redis://cache?dial_timeout=soon", want: "dial_timeout"},
		{url: "redis://cache?write_timeout=1", want: "write_timeout"},
		{url: "rediss://cache?skip_verify=maybe", want: "skip_verify"},
		{url: "redis://cache:6379/%zz", want: "parsing redis url"},
		{url: "redis://cache:port/0", want: "parsing redis url"},
		{url: " redis://cache", want: "parsing redis url"},

		{url: "redis://", want: "host", stricter: true},
		{url: "redis:///0", want: "host", stricter: true},
		{url: "redis://:6379/0", want: "host", stricter: true},
		{url: "redis://cache:99999/0", want: "port", stricter: true},
		{url: "redis://cache:0/0", want: "port", stricter: true},
		{url: "redis://cache/-1", want: `database number "-1"`, stricter: true},
		{url: "redis://cache?db=-1", want: `database number "-1"`, stricter: true},
		{url: "redis://cache?addr=", want: "addr", stricter: true},
		{url: "redis://cache?addr=n2:x", want: "addr", stricter: true},
		{url: "unix://", want: "socket", stricter: true},
	}
	for _, c := range cases {
		err := policy.CheckRedisURL(c.url)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.url, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "parsing redis url: ")):
			t.Errorf("%q: error %v, want one that says %q", c.url, err, c.want)
		}
		// The store must open every URL the policy accepts, and refuse
		// every one it refuses but the stricter cases.
		_, serr := rueidis.ParseURL(c.url)
		if (serr == nil) != (c.want == "" || c.stricter) {
			t.Errorf("%q: the store's parser says %v, the policy %v", c.url, serr, err)
		}
	}
}
