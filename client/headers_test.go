package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, c := range []struct {
		v, date string
		want    time.Duration
		ok      bool
	}{
		{"120", "", 120 * time.Second, true},
		{" 0 ", "", 0, true},
		{"1.5", "", 1500 * time.Millisecond, true}, // lenient
		{"-3", "", 0, false},
		{"soon", "", 0, false},
		{"", "", 0, false},
		// An HTTP-date counts from the response's Date, not the local clock
		// (which here is an hour ahead of the server's).
		{"Tue, 01 Dec 2026 11:00:30 GMT", "Tue, 01 Dec 2026 11:00:00 GMT", 30 * time.Second, true},
		// No Date (or a bad one): from the local clock.
		{"Tue, 01 Dec 2026 12:00:10 GMT", "", 10 * time.Second, true},
		{"Tue, 01 Dec 2026 12:00:10 GMT", "yesterday", 10 * time.Second, true},
		{"Tuesday, 01-Dec-26 12:00:10 GMT", "", 10 * time.Second, true}, // RFC 850
		{"Tue Dec  1 12:00:10 2026", "", 10 * time.Second, true},        // asctime
		// In the past: now.
		{"Tue, 01 Dec 2026 11:00:00 GMT", "", 0, true},
		{"99999999999999999999", "", time.Duration(1<<63 - 1), true},
	} {
		got, ok := client.ParseRetryAfter(c.v, c.date, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q, %q) = %v, %v; want %v, %v", c.v, c.date, got, ok, c.want, c.ok)
		}
	}
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseResponse(t *testing.T) {
	for _, c := range []struct {
		name     string
		h        http.Header
		want     client.Limit
		has      bool
		policies int
	}{
		{"tollgate", header("RateLimit", `"free.minute";r=7;t=1`, "RateLimit-Policy", `"free.minute";q=10;w=1, "free.day";q=1000;w=86400`),
			client.Limit{Name: "free.minute", Remaining: 7, Reset: time.Second, Quota: 10, Window: time.Second}, true, 2},
		{"several, most restrictive", header("RateLimit", `"a";r=50;t=30, "b";r=0;t=5`),
			client.Limit{Name: "b", Remaining: 0, Reset: 5 * time.Second, Quota: -1}, true, 0},
		{"token names, spaces, unknown params", header("RateLimit", `day ; r=3 ; t=60 ; pk=:abc=:`),
			client.Limit{Name: "day", Remaining: 3, Reset: time.Minute, Quota: -1}, true, 0},
		{"quoted comma", header("RateLimit", `"a,b";r=2;t=1`),
			client.Limit{Name: "a,b", Remaining: 2, Reset: time.Second, Quota: -1}, true, 0},
		{"draft-07", header("RateLimit", `limit=100, remaining=50, reset=30`, "RateLimit-Policy", `100;w=60`),
			client.Limit{Remaining: 50, Reset: 30 * time.Second, Quota: 100, Window: time.Minute}, true, 1},
		{"draft-03 fields", header("RateLimit-Limit", "100", "RateLimit-Remaining", "0", "RateLimit-Reset", "12"),
			client.Limit{Remaining: 0, Reset: 12 * time.Second, Quota: 100}, true, 0},
		{"legacy X-", header("X-RateLimit-Limit", "60", "X-RateLimit-Remaining", "59", "X-RateLimit-Reset", "30"),
			client.Limit{Remaining: 59, Reset: 30 * time.Second, Quota: 60}, true, 0},
		{"legacy Unix time (GitHub)", header("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1796126460"),
			client.Limit{Remaining: 0, Reset: time.Unix(1796126460, 0).Sub(now), Quota: 5000}, true, 0},
		{"X-Rate-Limit- and Reset-After", header("X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset-After", "0.25"),
			client.Limit{Remaining: 0, Reset: 250 * time.Millisecond, Quota: -1}, true, 0},
		{"garbage", header("RateLimit", `;;;,,,"`, "X-RateLimit-Remaining", "lots"), client.Limit{}, false, 0},
		{"none", header(), client.Limit{}, false, 0},
	} {
		info := client.ParseResponse(c.h, now)
		if info.HasLimit != c.has || (c.has && info.Limit != c.want) || len(info.Policies) != c.policies {
			t.Errorf("%s: got %+v (has %v, %d policies); want %+v (has %v, %d policies)", c.name, info.Limit, info.HasLimit, len(info.Policies), c.want, c.has, c.policies)
		}
	}
}
