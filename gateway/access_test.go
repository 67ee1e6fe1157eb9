package gateway_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// accessLines returns the access log's lines, decoded.
func accessLines(t *testing.T, g *running) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(g.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"access"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("access line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestAccessLog: every request gets an id (the client's if it is a plain
// token, else a new one), forwarded upstream; the access log
// says what was decided, with pseudonyms only; the request metrics count
// by route group.
func TestAccessLog(t *testing.T) {
	up := newUpstream(t)
	g := start(t, quickstart(t, up.URL), "")
	resp := get(t, g.public+"/api/items", "X-API-Key", proKey, "X-Request-ID", "req-42.a")
	if resp.StatusCode != 200 || up.lastHeader().Get("X-Request-Id") != "req-42.a" {
		t.Fatalf("a plain request id: %d, upstream saw %q", resp.StatusCode, up.lastHeader().Get("X-Request-Id"))
	}
	for _, bad := range []string{"has space", strings.Repeat("x", 129), "new\\nline", "{json}"} {
		get(t, g.public+"/api/items", "X-API-Key", proKey, "X-Request-ID", bad)
		if id := up.lastHeader().Get("X-Request-Id"); !hexID.MatchString(id) {
			t.Errorf("request id %q: upstream saw %q (want a new one)", bad, id)
		}
	}
	// An anonymous client over its 20 a minute: refused, logged as such.
	for i := 0; i < 21; i++ {
		get(t, g.public+"/api/items", "X-Forwarded-For", "198.51.100.77")
	}
	lines := accessLines(t, g)
	if len(lines) != 26 {
		t.Fatalf("%d access lines for 26 requests", len(lines))
	}
	first, last := lines[0], lines[len(lines)-1]
	if first["request_id"] != "req-42.a" || first["route"] != "api" || first["route_group"] != "api" || first["status"] != 200.0 ||
		first["outcome"] != "allowed" || first["budget"] != "pro" || first["subject_kind"] != "key" || first["upstream_ms"].(float64) <= 0 {
		t.Errorf("first access line: %v", first)
	}
	if last["status"] != 429.0 || last["outcome"] != "refused" || last["budget"] != "anonymous" || last["upstream_ms"] != 0.0 {
		t.Errorf("refused request's access line: %v", last)
	}
	if strings.Contains(g.logs.String(), "198.51.100.77") || strings.Contains(g.logs.String(), proKey) {
		t.Error("the access log holds a raw address or key")
	}
	if n := metric(t, g, `tollgate_responses_total{code="2xx",route_group="api"}`); n != 25 {
		t.Errorf("2xx responses of group api: %v, want 25", n)
	}
	if n := metric(t, g, `tollgate_responses_total{code="4xx",route_group="api"}`); n != 1 {
		t.Errorf("4xx responses of group api: %v, want 1", n)
	}
	if n := metric(t, g, `tollgate_upstream_duration_seconds_count{route_group="api"}`); n != 25 {
		t.Errorf("upstream calls timed: %v, want 25", n)
	}
	if n := metric(t, g, `tollgate_request_duration_seconds_count{route_group="api"}`); n != 26 {
		t.Errorf("requests timed: %v, want 26", n)
	}
}

// TestAccessLogSampleAndCap: logging.access_sample 0 writes no access
// line; access_per_second caps the lines and counts the rest.
func TestAccessLogSampleAndCap(t *testing.T) {
	up := newUpstream(t)
	g := start(t, quickstart(t, up.URL, "headers:\n", "logging: {access_sample: 0}\nheaders:\n"), "")
	for i := 0; i < 5; i++ {
		get(t, g.public+"/api/items", "X-API-Key", proKey)
	}
	if n := len(accessLines(t, g)); n != 0 {
		t.Fatalf("access_sample 0 wrote %d lines", n)
	}
	g = start(t, quickstart(t, up.URL, "headers:\n", "logging: {access_per_second: 3}\nheaders:\n"), "")
	start := time.Now()
	for i := 0; i < 10; i++ {
		if resp := get(t, g.public+"/api/items", "X-API-Key", proKey); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	// A burst of 3, then 3 a second. Time is the property here (a rate),
	// and the bound follows the clock: it is taken after the lines are
	// counted (each is written before its response is sent), so a slow
	// machine only allows more lines, never fails the test.
	n := len(accessLines(t, g))
	took := time.Since(start)
	max := 3 + int(3*took.Seconds()) + 1
	if n < 3 || n > max {
		t.Fatalf("access_per_second 3 wrote %d lines for 10 requests in %v", n, took)
	}
	if n := metric(t, g, "tollgate_access_log_dropped_total"); n < 10-float64(max) {
		t.Fatalf("dropped %v lines", n)
	}
}
