package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func adminPost(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// TestResetBudgets: an operator resets a customer's budgets by API key id
// (its minute and day quotas are whole again, refusals remembered by the
// deny cache too), or a client address's by its pseudonym (its
// invalid-key penalty ends); other subjects keep theirs, and bad requests
// change nothing.
func TestResetBudgets(t *testing.T) {
	onStores(t, func(t *testing.T, redisURL string) {
		up := newUpstream(t)
		p := quickstart(t, up.URL)
		g := startStill(t, p, redisURL) // invalid keys count in a fixed window of a minute
		if n, _, _ := admitUntilRefused(t, g.public+"/api/items", 150, "X-API-Key", freeKey); n != 100 {
			t.Fatalf("free key admitted %d, want 100", n)
		}
		if n, _, _ := admitUntilRefused(t, g.public+"/api/items", 30, "X-API-Key", proKey); n != 30 {
			t.Fatalf("pro key admitted %d", n)
		}
		for _, body := range []string{`{}`, `{"key":"free-demo","subject":"x"}`, `{"key":"free-demo","tenant":"demo"}`, `{"Key":"free-demo"}`} {
			if code, _ := adminPost(t, g.admin+"/budgets/reset", body); code != 400 {
				t.Errorf("reset %s: %d, want 400", body, code)
			}
		}
		if code, _ := adminPost(t, g.admin+"/budgets/reset", `{"key":"no-such-key"}`); code != 404 {
			t.Errorf("reset of an unknown key: %d, want 404", code)
		}
		if code := get(t, g.public+"/api/items", "X-API-Key", freeKey).StatusCode; code != 429 {
			t.Fatalf("before the reset: %d", code)
		}
		code, out := adminPost(t, g.admin+"/budgets/reset", `{"key":"free-demo"}`)
		if code != 200 || out["budgets"].(float64) < 2 || strings.Contains(out["subject"].(string), "free") {
			t.Fatalf("reset: %d %v", code, out)
		}
		resp := get(t, g.public+"/api/items", "X-API-Key", freeKey)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit"), "r=99") {
			t.Fatalf("after the reset: %d %s", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
		if resp := get(t, g.public+"/api/items", "X-API-Key", proKey); !strings.Contains(resp.Header.Get("RateLimit"), "r=969") {
			t.Errorf("another key was reset too: %s", resp.Header.Get("RateLimit"))
		}
		// An address over its invalid-key budget: refused whatever key it
		// sends, until its pseudonym is reset.
		for i := 0; i < 12; i++ {
			get(t, g.public+"/api/items", "X-API-Key", "wrong-key-0123456789")
		}
		if code := get(t, g.public+"/api/items", "X-API-Key", proKey).StatusCode; code != 429 {
			t.Fatalf("a penalised address: %d", code)
		}
		var ip string
		for _, line := range strings.Split(g.logs.String(), "\n") {
			if strings.Contains(line, "too many invalid API keys") {
				var m map[string]any
				json.Unmarshal([]byte(line), &m)
				ip, _ = m["subject"].(string)
			}
		}
		if ip == "" {
			t.Fatal("no pseudonym of the address in the logs")
		}
		if code, _ := adminPost(t, g.admin+"/budgets/reset", `{"subject":"`+ip+`"}`); code != 200 {
			t.Fatalf("reset of the address: %d", code)
		}
		if code := get(t, g.public+"/api/items", "X-API-Key", proKey).StatusCode; code != 200 {
			t.Fatalf("after the address's reset: %d", code)
		}
	})
}
