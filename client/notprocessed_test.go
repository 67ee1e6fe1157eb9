package client_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/httplimit"
)

// TestDefaultNotProcessed: every refusal the gateway answers before it
// forwards anything, with its own problem type, is proof that the
// request was not processed; an answer that may come after the work is
// not.
func TestDefaultNotProcessed(t *testing.T) {
	for _, c := range []struct {
		typ    string
		status int
		want   bool
		why    string
	}{
		{httplimit.ProblemRateLimited, 429, true, "a rate limit refuses before forwarding"},
		{httplimit.ProblemTooManyInFlight, 429, true, "so does a concurrency limit"},
		{httplimit.ProblemLoginLocked, 429, true, "and the login guard"},
		{httplimit.ProblemTooManyFailed, 429, true, "and the failures per address"},
		{httplimit.ProblemLoginBusy, 429, true, "and attempts in progress"},
		{httplimit.ProblemUnavailable, 503, true, "a store that cannot decide refuses before forwarding"},
		{httplimit.ProblemKeysUnavailable, 503, true, "so does a JWKS that cannot be fetched"},
		{httplimit.ProblemBadGateway, 502, false, "the upstream may have done the work"},
		{httplimit.ProblemUpstreamSlow, 504, false, "as for a slow upstream"},
		{"urn:example:other", 503, false, "another server's 503 may come after the work"},
	} {
		w := httptest.NewRecorder()
		httplimit.WriteProblem(w, httplimit.Problem{Type: c.typ, Status: c.status})
		resp := w.Result()
		if got := client.DefaultNotProcessed(resp); got != c.want {
			t.Errorf("%s (%d): %v, want %v: %s", c.typ, c.status, got, c.want, c.why)
		}
	}
	if client.DefaultNotProcessed(&http.Response{StatusCode: 429, Header: http.Header{}, Body: http.NoBody}) {
		t.Error("a bare 429 is taken as proof: it may come from a server after the work")
	}
}
