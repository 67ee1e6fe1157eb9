package gateway_test

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/policy"
)

// TestShadowPolicy: under a shadow plan of 5, 20 requests go through and
// every response is byte-identical to one through a plain reverse proxy.
// (What the shadow plan counts is the engine's TestShadowPolicy.)
func TestShadowPolicy(t *testing.T) {
	up := newUpstream(t)
	p, err := policy.Parse([]byte(strings.ReplaceAll(fixture.Shadow, "UPSTREAM", up.URL)), "shadow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() }})
	defer plain.Close()
	for i := 0; i < 20; i++ {
		resp, body := getBody(t, g.public+"/api/x")
		want, wantBody := getBody(t, plain.URL+"/api/x")
		if resp.StatusCode != 200 || string(body) != string(wantBody) || resp.StatusCode != want.StatusCode {
			t.Fatalf("request %d: %d %q, plain proxy %d %q", i, resp.StatusCode, body, want.StatusCode, wantBody)
		}
		got, exp := resp.Header.Clone(), want.Header.Clone()
		got.Del("Date")
		exp.Del("Date")
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("request %d: headers %v, plain proxy %v", i, got, exp)
		}
	}
}

// shadowCounts returns what budget in route group would have refused and
// allowed, once it has been evaluated for n requests: shadow budgets are
// evaluated after the response, so the last ones may still be under way
// when the client has its answer.
func shadowCounts(t *testing.T, g *running, budget, group string, n float64) (refused, allowed float64) {
	t.Helper()
	series := func(outcome string) string {
		return `tollgate_shadow_decisions_total{budget="` + budget + `",outcome="` + outcome + `",route_group="` + group + `"}`
	}
	waitFor(t, "shadow decisions for every admitted request", 5*time.Second, func() bool {
		refused, allowed = metric(t, g, series("refused")), metric(t, g, series("allowed"))
		return refused+allowed >= n
	})
	return refused, allowed
}
