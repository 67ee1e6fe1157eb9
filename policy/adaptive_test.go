package policy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// TestAdaptive: an adaptive block compiles to its limiter's settings,
// defaults filled in, shares in plan order; routes to one upstream (its
// scheme and host) share one limit; what cannot be right is refused, with
// where and why.
func TestAdaptive(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		export, api  string // the adaptive blocks of the routes to 127.0.0.1:9000
		want         string // in the error, "" when accepted
	}{
		{name: "defaults", reason: "an empty block is Envoy's defaults", export: "{}", api: "{}"},
		{name: "set", reason: "every key set within its range", export: "{min_limit: 2, max_limit: 50, sample_window: 50ms, min_rtt_interval: 30s, min_rtt_samples: 20, shares: {pro: 0.6, free: 0.4}, shadow: true}",
			api: "{min_limit: 2, max_limit: 50, sample_window: 50ms, min_rtt_interval: 30s, min_rtt_samples: 20, shares: {pro: 0.6, free: 0.4}, shadow: true}"},
		{name: "unknown plan", reason: "a share names a plan the file has", export: "{shares: {gold: 0.5}}", api: "{shares: {gold: 0.5}}", want: `routes[0].adaptive.shares.gold: no plan is named "gold"`},
		{name: "over the whole", reason: "more than the whole limit cannot be guaranteed", export: "{shares: {pro: 0.7, free: 0.4}}", api: "{shares: {pro: 0.7, free: 0.4}}", want: "the shares sum to 1.1"},
		{name: "zero share", reason: "a share of nothing is a plan left out", export: "{shares: {pro: 0}}", api: "{shares: {pro: 0}}", want: "above 0 and at most 1, got 0"},
		{name: "min over max", reason: "the limit cannot be kept between them", export: "{min_limit: 20, max_limit: 10}", api: "{min_limit: 20, max_limit: 10}", want: "max_limit 10 is less than min_limit 20"},
		{name: "min zero", reason: "a limit of 0 admits nothing, ever", export: "{min_limit: -1}", api: "{min_limit: -1}", want: "routes[0].adaptive.min_limit: at least 1"},
		{name: "window", reason: "a window of 1ms holds no sample of a real upstream", export: "{sample_window: 1ms}", api: "{sample_window: 1ms}", want: "sample_window: want 10ms to 10s"},
		{name: "interval", reason: "the minimum RTT measured every window would hold the limit at min_limit", export: "{min_rtt_interval: 500ms}", api: "{min_rtt_interval: 500ms}", want: "min_rtt_interval: want 10 sample_windows (1s)"},
		{name: "one upstream, two limits", reason: "the upstream is what the limit protects: two routes to it share it", export: "{max_limit: 10}", api: "{max_limit: 20}",
			want: "routes export and api send to http://127.0.0.1:9000, whose one adaptive limit they share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(valid, "cost: 10}", "cost: 10, adaptive: "+tc.export+"}", 1)
			src = strings.Replace(src, `upstream: "http://127.0.0.1:9000"}`, `upstream: "http://127.0.0.1:9000/v2", adaptive: `+tc.api+"}", 1)
			p, err := policy.Parse([]byte(src), "p.yaml")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v (%s)", err, tc.reason)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q (%s)", err, tc.want, tc.reason)
			case err != nil:
				return
			}
			a := p.Routes[0].Adaptive
			if a == nil || a != p.Routes[1].Adaptive || a.Upstream != "http://127.0.0.1:9000" {
				t.Fatalf("export's limit %+v, api's %+v: want one, for http://127.0.0.1:9000", a, p.Routes[1].Adaptive)
			}
			if p.Routes[2].Adaptive != nil {
				t.Fatal("the login route has no adaptive limit")
			}
		})
	}
}

// TestAdaptiveCompiled: the settings a block compiles to.
func TestAdaptiveCompiled(t *testing.T) {
	src := strings.Replace(valid, "cost: 10}", "cost: 10, adaptive: {max_limit: 50, shares: {pro: 0.6, free: 0.25}}}", 1)
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := p.Routes[0].Adaptive
	got := fmt.Sprintf("%d %d %v %v %d %v %v %v", a.Config.MinLimit, a.Config.MaxLimit, a.Config.Window, a.Config.MinRTTInterval, a.Config.MinRTTSamples, a.Plans, a.Config.Shares, a.Shadow)
	if want := fmt.Sprintf("3 50 %v %v 50 [free pro] [0.25 0.6] false", 100*time.Millisecond, time.Minute); got != want {
		t.Errorf("compiled %s, want %s", got, want)
	}
	if a.Class("pro") != 1 || a.Class("enterprise") != -1 {
		t.Errorf("classes: pro %d, enterprise %d; want 1 and -1", a.Class("pro"), a.Class("enterprise"))
	}
	if len(p.Warnings) == 0 || !strings.Contains(p.Warnings[len(p.Warnings)-1].String(), "route api sends to http://127.0.0.1:9000 without the adaptive limit route export sets there") {
		t.Errorf("warnings %v, want one of api's requests not counted", p.Warnings)
	}
}
