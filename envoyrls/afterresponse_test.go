package envoyrls_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/envoyrls"
)

// TestAfterResponse: Envoy's apply_on_stream_done, mapped onto a
// descriptor marked after_response. Before the request Envoy asks with a
// hits_addend of 0, charged 1 there, refused once the budget is used up
// or owed; when its response ends, Envoy sends the tokens it used as the
// hits_addend, charged as debt, never refused: the request was already
// served.
func TestAfterResponse(t *testing.T) {
	files := map[string]string{"llm.yaml": `domain: llm
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100, after_response: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
`}
	forEachStore(t, func(t *testing.T, kind string) {
		f := newFixture(t, kind, fixtureOptions{files: files})
		check := withHits(desc("tokens", "tenant"), 0)
		expect(t, "a request asks, charged 1", f.ask(t, "llm", 0, check), ok, status{ok, 100, 99, 50})
		expect(t, "its response's 150 tokens: charged as debt, past the limit", f.ask(t, "llm", 150, desc("tokens", "tenant")), ok, status{ok, 100, 0, 50})
		expect(t, "the next request is refused while the debt lasts", f.ask(t, "llm", 0, check), over, status{over, 100, 0, 50})
		expect(t, "a response that ends meanwhile is still charged", f.ask(t, "llm", 20, desc("tokens", "tenant")), ok, status{ok, 100, 0, 50})
		f.advance(60e9)
		expect(t, "the window's end forgives the debt (a fixed window)", f.ask(t, "llm", 0, check), ok, status{ok, 100, 99, 50})
		expect(t, "without the mark, hits past the limit are refused, charging nothing", f.ask(t, "llm", 150, desc("plain", "tenant")), over, status{over, 100, 0, 50})
		expect(t, "so the plain limit is whole", f.ask(t, "llm", 1, desc("plain", "tenant")), ok, status{ok, 100, 99, 50})
	})
}

// TestAfterResponseConfig: what after_response cannot mark.
func TestAfterResponseConfig(t *testing.T) {
	for _, c := range []struct{ name, rate, want string }{
		{"an unlimited descriptor", "{unlimited: true, after_response: true}", "nothing to charge after the response"},
		{"an algorithm that cannot settle", "{unit: minute, requests_per_unit: 5, algorithm: sliding_window_log, after_response: true}", "cannot carry"},
	} {
		dir := t.TempDir()
		writeConfig(t, dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + c.rate + "\n"})
		_, err := envoyrls.Load(dir, envoyrls.LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
