package envoyrls_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/envoyrls"
)

// TestSettingsFromEnv reads envoyproxy/ratelimit's variables.
func TestSettingsFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := envoyrls.SettingsFromEnv(env(nil))
	if err != nil || s.ConfigDir != "/srv/runtime_data/current/config" || s.WatchDir != "/srv/runtime_data/current" ||
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
	if err != nil || s.ConfigDir != "/rt/ratelimit/config" || s.WatchDir != s.ConfigDir || s.Server.NearLimitRatio != float64(float32(0.9)) || !s.Server.Headers ||
		len(s.Ignored) != 1 || !strings.HasPrefix(s.Ignored[0], "LOCAL_CACHE_SIZE_IN_BYTES") {
		t.Fatalf("set: %+v, %v", s, err)
	}
	for _, bad := range []map[string]string{{"BACKEND_TYPE": "memcache"}, {"NEAR_LIMIT_RATIO": "2"}, {"REDIS_TYPE": "odd"}, {"SHADOW_MODE": "maybe"}} {
		if _, err := envoyrls.SettingsFromEnv(env(bad)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
