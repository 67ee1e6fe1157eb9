package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/simulate"
)

// TestRecordingReplays: the gateway records the calls it decides, serves
// them at /recording with nothing secret in them, and a replay under its
// policy decides every one of them as it did.
func TestRecordingReplays(t *testing.T) {
	up := newUpstream(t)
	p := config(t, up.URL, "[]")
	g := start(t, p, "")
	n, _, _ := admitUntilRefused(t, g.public+"/api/items", 200, "X-API-Key", freeKey)
	if n != 100 {
		t.Fatalf("admitted %d, want 100", n)
	}
	for range 5 {
		get(t, g.public+"/api/items", "X-API-Key", "not-a-key-at-all-0123456789")
		get(t, g.public+"/api/export", "X-API-Key", proKey)
	}
	resp, body := getBody(t, g.admin+"/recording")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/recording: %d %s", resp.StatusCode, body)
	}
	for _, secret := range []string{freeKey, proKey, "not-a-key-at-all", "/api/items"} {
		if strings.Contains(string(body), secret) {
			t.Fatalf("the recording holds %q", secret)
		}
	}
	recs, err := simulate.ReadRecords(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 111 {
		t.Fatalf("%d calls recorded, want 111", len(recs))
	}
	got, err := simulate.Replay(context.Background(), p, recs)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for i, o := range got {
		if o != recs[i].Outcome {
			t.Fatalf("call %d (%+v): replayed %s", i, recs[i], o)
		}
		outcomes[o]++
	}
	if outcomes["allowed"] != 105 || outcomes["refused"] != 1 || outcomes["invalid"] != 5 {
		t.Errorf("outcomes %v, want 105 allowed, 1 refused, 5 invalid", outcomes)
	}
}
