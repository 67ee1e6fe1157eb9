package gateway_test

import (
	"runtime"
	"strings"
	"testing"
)

// TestMetricsFromTheStart: the build is exported, and the error, fallback
// and reload counters exist at zero before anything happened, so alerts
// on their rate see the first event.
func TestMetricsFromTheStart(t *testing.T) {
	up := newUpstream(t)
	g := start(t, quickstart(t, up.URL), "")
	_, body := getBody(t, g.admin+"/metrics")
	text := string(body)
	if !strings.Contains(text, `tollgate_build_info{goversion="`+runtime.Version()+`",revision="`) {
		t.Error("no tollgate_build_info with the Go version")
	}
	for _, series := range []string{
		`tollgate_store_errors_total{budget="free.minute"} 0`,
		`tollgate_store_errors_total{budget="login_ip_failures"} 0`,
		`tollgate_fallback_decisions_total{budget="free.day",mode="fail_closed"} 0`,
		`tollgate_fallback_decisions_total{budget="pro",mode="fail_open"} 0`,
		`tollgate_policy_reloads_total{result="invalid"} 0`,
	} {
		if !strings.Contains(text, series+"\n") {
			t.Errorf("no %s before any event", series)
		}
	}
}
