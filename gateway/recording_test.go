package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
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
	for _, secret := range []string{freeKey, proKey, "not-a-key-at-all", "/api/items", "127.0.0.1"} {
		if strings.Contains(string(body), secret) {
			t.Fatalf("the recording holds %q", secret)
		}
	}
	// Nor do the dashboard's data, which name the most refused subjects.
	for _, page := range []string{"/dashboard/data", "/dashboard/history?since=0"} {
		_, b := getBody(t, g.admin+page)
		for _, secret := range []string{freeKey, proKey, "not-a-key-at-all", "127.0.0.1"} {
			if strings.Contains(string(b), secret) {
				t.Fatalf("%s holds %q: %s", page, secret, b)
			}
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

// TestSimulatePanel: the dashboard's simulator replays the recording
// under a candidate the page posts: through POST /simulate, and in
// headless Chromium from a link (#try=...) that opens the panel with the
// candidate and runs it once Simulate is clicked (a page that framed or
// opened the link ran a replay per load: a link runs nothing by itself).
// Its gateway is its own (the memory store): it runs in parallel.
func TestSimulatePanel(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	n, _, _ := admitUntilRefused(t, g.public+"/api/items", 200, "X-API-Key", freeKey)
	if n != 100 {
		t.Fatalf("admitted %d, want 100", n)
	}
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// 40 a minute: of the 100 admitted, the candidate refuses 60.
	cand := strings.Replace(string(b), "algorithm: sliding_log, rate: 100, period: 1m}", "algorithm: sliding_log, rate: 40, period: 1m}", 1)
	cand = strings.Replace(cand, "cost: 10", "cost: 5", 1) // the export route must fit the candidate's plan
	post := func(body string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.admin+"/simulate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, out
	}
	js, _ := json.Marshal(map[string]string{"policy": cand})
	resp, body := post(string(js))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/simulate: %d %s", resp.StatusCode, body)
	}
	var rep simulate.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Calls != 101 || rep.Mismatches != 0 || len(rep.Groups) != 1 || rep.Groups[0].NewlyRefused != 60 || rep.Groups[0].RefusedCandidate != 61 {
		t.Fatalf("report %+v", rep)
	}
	if resp, body := post(`{"policy": "plans: [nonsense"}`); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "error") {
		t.Errorf("a candidate that does not compile: %d %s", resp.StatusCode, body)
	}
	if resp, _ := post(`{"candidate": "x"}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body of another shape: %d, want 400", resp.StatusCode)
	}

	// The link fills the panel and waits for a click; the click runs it.
	tb := openTab(t)
	tb.navigate(t, g.admin+"/dashboard#try="+url.PathEscape(cand))
	if got := tb.evalString(t, `document.getElementById("candidate").value`); got != cand {
		t.Fatalf("the link did not fill the candidate: %.200q", got)
	}
	if status := tb.evalString(t, `document.getElementById("sim-status").textContent`); !strings.Contains(status, "press Simulate") {
		t.Fatalf("before a click the simulator says %q: the link ran the replay by itself", status)
	}
	if n := tb.evalString(t, `String(performance.getEntriesByType("resource").filter(e => e.name.endsWith("/simulate")).length)`); n != "0" {
		t.Fatalf("%s requests to /simulate before a click", n)
	}
	tb.eval(t, `document.getElementById("simulate").click()`)
	tb.waitFor(t, `document.getElementById("sim-status").textContent.includes("calls replayed")`)
	shot := filepath.Join(os.TempDir(), "tollgate-simulator.png")
	tb.screenshot(t, shot)
	if st, err := os.Stat(shot); err != nil || st.Size() < 5000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("simulator screenshot: %s", shot)
	docShot(t, "simulator.png", shot)
	dom := tb.evalString(t, `document.documentElement.outerHTML`)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`id="sim-status">101 calls replayed<`),
		regexp.MustCompile(`<td>api</td><td>free</td><td class="n">101</td><td class="n">1</td><td class="n">61</td><td class="n">60</td><td class="n">0</td>`),
		regexp.MustCompile(`<svg id="chart-sim"[^>]*>.*data-series="refused by the candidate"`),
	} {
		if !want.MatchString(dom) {
			t.Errorf("the simulator panel lacks %s; DOM:\n%.4000s", want, dom)
		}
	}
}
