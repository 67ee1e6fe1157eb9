package gateway

import "testing"

// TestRedactURL: a Redis URL in the log keeps everything but a password.
func TestRedactURL(t *testing.T) {
	cases := []struct{ url, want, why string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", "no credentials: as given"},
		{"redis://:secret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0", "the default user's password"},
		{"rediss://app:secret@r.example:6380/1?addr=r2.example:6380", "rediss://app:xxxxx@r.example:6380/1?addr=r2.example:6380",
			"an ACL user is shown, its password is not; the other addresses stay"},
		{"redis://secret@127.0.0.1:6379/0", "redis://xxxxx@127.0.0.1:6379/0", "a user without a password may be the password"},
		{"redis://r1:26379?addr=r2:26379&master_set=main", "redis://r1:26379?addr=r2:26379&master_set=main", "a sentinel URL, as given"},
		{"unix:///run/redis.sock?db=2", "unix:///run/redis.sock?db=2", "a socket, as given"},
	}
	for _, c := range cases {
		if got := redactURL(c.url); got != c.want {
			t.Errorf("redactURL(%q) = %q, want %q (%s)", c.url, got, c.want, c.why)
		}
	}
}
