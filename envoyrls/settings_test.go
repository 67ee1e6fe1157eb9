package envoyrls_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/envoyrls"
)

// TestSettingsFromEnv reads envoyproxy/ratelimit's variables.
func TestSettingsFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := envoyrls.SettingsFromEnv(env(nil))
	if err != nil || s.ConfigDir != "/srv/runtime_data/current/config" ||
		s.GRPCAddr != "0.0.0.0:8081" || s.HTTPAddr != "0.0.0.0:8080" || s.RedisURL != "unix:///var/run/nutcracker/ratelimit.sock" || s.Backend != "redis" {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"tcp":      {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_AUTH": "secret"}, "redis://:secret@redis:6379"},
		"tls user": {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_AUTH": "u:p", "REDIS_TLS": "true"}, "rediss://u:p@redis:6379"},
		"cluster":  {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001"}, "redis://a:7000?addr=b%3A7001"},
		"sentinel": {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379"}, "redis://s1:26379?addr=s2%3A26379&master_set=mymaster"},
		"override": {map[string]string{"TOLLGATE_REDIS_URL": "redis://x:1/0"}, "redis://x:1/0"},
	} {
		s, err := envoyrls.SettingsFromEnv(env(c.env))
		if err != nil || s.RedisURL != c.want {
			t.Errorf("%s: %q, %v; want %q", name, s.RedisURL, err, c.want)
		}
	}
	s, err = envoyrls.SettingsFromEnv(env(map[string]string{"RUNTIME_ROOT": "/rt", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"NEAR_LIMIT_RATIO": "0.9", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "BACKEND_TYPE": "memory", "LOCAL_CACHE_SIZE_IN_BYTES": "1000"}))
	slices.Sort(s.Ignored)
	if err != nil || s.ConfigDir != "/rt/ratelimit/config" || s.Server.NearLimitRatio != float64(float32(0.9)) || !s.Server.Headers ||
		len(s.Ignored) != 2 || !strings.HasPrefix(s.Ignored[0], "LOCAL_CACHE_SIZE_IN_BYTES") || !strings.HasPrefix(s.Ignored[1], "RUNTIME_WATCH_ROOT") {
		t.Fatalf("set: %+v, %v", s, err)
	}
	for _, bad := range []map[string]string{{"BACKEND_TYPE": "memcache"}, {"NEAR_LIMIT_RATIO": "2"}, {"REDIS_TYPE": "odd"}, {"SHADOW_MODE": "maybe"}} {
		if _, err := envoyrls.SettingsFromEnv(env(bad)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestSettingsRedisSocketType: REDIS_SOCKET_TYPE defaults to unix, so a
// REDIS_URL that is a TCP address, or a cluster, without
// REDIS_SOCKET_TYPE=tcp is refused with the setting that fixes it; a
// socket's path is still taken.
func TestSettingsRedisSocketType(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env    map[string]string
		url    string // the store URL, or "" for an error
		errHas []string
		reason string
	}{
		{map[string]string{"REDIS_URL": "redis:6379"}, "", []string{`"redis:6379"`, "REDIS_SOCKET_TYPE=tcp"},
			"host:port under the default socket type: the migration's commonest slip"},
		{map[string]string{"REDIS_URL": "127.0.0.1:6379"}, "", []string{"REDIS_SOCKET_TYPE=tcp"}, "an IPv4 address and port"},
		{map[string]string{"REDIS_URL": "[::1]:6379"}, "", []string{"REDIS_SOCKET_TYPE=tcp"}, "an IPv6 address and port"},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "redis:6379"}, "", []string{"REDIS_SOCKET_TYPE=tcp"},
			"unix said outright, with a TCP address"},
		{map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001"}, "", []string{"REDIS_SOCKET_TYPE=tcp"},
			"a cluster is reached over TCP only"},
		{map[string]string{"REDIS_URL": "/run/redis/redis.sock"}, "unix:///run/redis/redis.sock", nil, "a socket's path is what unix takes"},
		{map[string]string{"REDIS_URL": "/tmp/a:1"}, "unix:///tmp/a:1", nil, "a path with a colon is still a path"},
		{map[string]string{"REDIS_URL": "redis.sock"}, "unix://" + filepath.Join(wd, "redis.sock"), nil,
			"a relative path is the working directory's, as a dialer reads it"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, "redis://redis:6379", nil, "tcp takes host:port"},
	} {
		s, err := envoyrls.SettingsFromEnv(func(k string) string { return c.env[k] })
		if c.url != "" {
			if err != nil || s.RedisURL != c.url {
				t.Errorf("%v (%s): %q, %v; want %q", c.env, c.reason, s.RedisURL, err, c.url)
			}
			continue
		}
		if err == nil {
			t.Errorf("%v (%s): %q, no error", c.env, c.reason, s.RedisURL)
			continue
		}
		for _, want := range c.errHas {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v (%s): error %q lacks %q", c.env, c.reason, err, want)
			}
		}
	}
}
