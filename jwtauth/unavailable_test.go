package jwtauth_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/jwttest"
	"github.com/tollgate/tollgate/jwtauth"
)

// fetchWait is jwtauth's bound on a request's wait for the JWKS.
const fetchWait = 3 * time.Second

// closedURL returns a JWKS URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/jwks.json"
}

// silentURL returns the URL of a JWKS that takes every request and
// never answers, until the test ends.
func silentURL(t *testing.T) string {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) }) // before Close, which waits for the handlers
	return srv.URL + "/jwks.json"
}

func keysWith(t *testing.T, opts jwtauth.KeysOptions) *jwtauth.Keys {
	k, err := jwtauth.NewKeys(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

// TestUnreachableJWKS: a token that cannot be checked because the JWKS
// cannot be fetched (nothing listening, no answer in time, an error
// status, a body that is no key set) is refused with ErrKeysUnavailable,
// never ErrInvalid, and at once once the first fetch has failed: not
// after fetchWait each. A token a served JWKS refutes stays ErrInvalid.
func TestUnreachableJWKS(t *testing.T) {
	ec := jwttest.NewKey(t, "ES256", "ec-1")
	ok := jwttest.Valid("alice", now)
	token := jwttest.Sign(t, ec, ok)
	forged := jwttest.Sign(t, jwttest.NewKey(t, "ES256", "ec-1"), ok) // the IdP's kid, another key
	serving := func(t *testing.T) string { return jwttest.NewIdP(t, ec).JWKSURL() }
	broken := func(status int, body string) func(*testing.T) string {
		return func(t *testing.T) string {
			idp := jwttest.NewIdP(t, ec)
			idp.Break(status, body)
			return idp.JWKSURL()
		}
	}
	for _, c := range []struct {
		name, why string
		jwks      func(t *testing.T) string
		token     string
		want      error // nil: the token verifies
	}{
		{"connection refused", "nothing listens at the JWKS URL", closedURL, token, jwtauth.ErrKeysUnavailable},
		{"no answer in time", "the JWKS takes the request and never answers (the client's timeout)", silentURL, token, jwtauth.ErrKeysUnavailable},
		{"503", "the IdP is down", broken(503, "down for maintenance"), token, jwtauth.ErrKeysUnavailable},
		{"404", "the URL names no JWKS", broken(404, "not found"), token, jwtauth.ErrKeysUnavailable},
		{"not a JWKS", "a 200 whose body is no key set (a login page)", broken(200, "<html>log in</html>"), token, jwtauth.ErrKeysUnavailable},
		{"bad signature", "the keys are served, and the token's signature is not by the key of its kid", serving, forged, jwtauth.ErrInvalid},
		{"served", "the keys are served, and the token is signed by one", serving, token, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys := keysWith(t, jwtauth.KeysOptions{HTTPClient: &http.Client{Timeout: 50 * time.Millisecond}})
			url := c.jwks(t)
			v, err := jwtauth.NewVerifier(settings(url), keys, func() time.Time { return now })
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for i := 0; i < 5; i++ {
				_, err := v.Verify(context.Background(), c.token)
				if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
					t.Fatalf("token %d: %v, want %v (%s)", i, err, c.want, c.why)
				}
				if c.want == jwtauth.ErrKeysUnavailable && errors.Is(err, jwtauth.ErrInvalid) {
					t.Fatalf("token %d: %v is also ErrInvalid (%s)", i, err, c.why)
				}
			}
			// Before, each token waited fetchWait for keys that never came.
			if d := time.Since(start); d > fetchWait {
				t.Fatalf("5 tokens took %v, more than one fetchWait (%v): they waited for a JWKS known down", d, fetchWait)
			}
			err = keys.FetchError(url)
			if down := c.want == jwtauth.ErrKeysUnavailable; down != errors.Is(err, jwtauth.ErrKeysUnavailable) {
				t.Fatalf("FetchError = %v, want unavailable %v (%s)", err, down, c.why)
			}
		})
	}
}

// TestJWKSNoAnswerFirst: while the first fetch of a JWKS has not ended,
// a token waits for it at most fetchWait; once fetchWait has passed
// without an answer, the next tokens are refused at once, as
// unavailable.
func TestJWKSNoAnswerFirst(t *testing.T) {
	ec := jwttest.NewKey(t, "ES256", "ec-1")
	url := silentURL(t)
	keys := newKeys(t) // the default client: its 10 s timeout is beyond fetchWait
	v, err := jwtauth.NewVerifier(settings(url), keys, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	token := jwttest.Sign(t, ec, jwttest.Valid("alice", now))
	start := time.Now()
	if _, err := v.Verify(context.Background(), token); !errors.Is(err, jwtauth.ErrKeysUnavailable) {
		t.Fatalf("first token: %v, want ErrKeysUnavailable", err)
	}
	if d := time.Since(start); d > 10*fetchWait {
		t.Fatalf("the first token waited %v, more than fetchWait (%v)", d, fetchWait)
	}
	start = time.Now()
	for i := 0; i < 5; i++ {
		if _, err := v.Verify(context.Background(), token); !errors.Is(err, jwtauth.ErrKeysUnavailable) {
			t.Fatalf("token %d: %v, want ErrKeysUnavailable", i, err)
		}
	}
	if d := time.Since(start); d > fetchWait/10 {
		t.Fatalf("5 tokens after the first took %v: they waited again", d)
	}
	if err := keys.FetchError(url); !errors.Is(err, jwtauth.ErrKeysUnavailable) {
		t.Fatalf("FetchError = %v, want ErrKeysUnavailable", err)
	}
}

// TestJWKSRecovers: a JWKS that comes back is fetched again by the
// first token after min_refresh_interval (not before: the IdP is not
// asked on every token), and its tokens verify. While it is down again,
// the keys fetched before still check the tokens of their kids (a
// forgery is still ErrInvalid), and a token of an unknown kid, maybe of
// a key rotated in, cannot be checked.
func TestJWKSRecovers(t *testing.T) {
	ec := jwttest.NewKey(t, "ES256", "ec-1")
	idp := jwttest.NewIdP(t, ec)
	idp.Break(503, "")
	clock := fixture.ClockAt(now)
	keys := keysWith(t, jwtauth.KeysOptions{Now: clock.Now})
	s := settings(idp.JWKSURL())
	v, err := jwtauth.NewVerifier(s, keys, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	ok := jwttest.Valid("alice", now)
	token := jwttest.Sign(t, ec, ok)
	verify := func(step, token string, want error) {
		t.Helper()
		_, err := v.Verify(context.Background(), token)
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", step, err, want)
		}
	}
	verify("down", token, jwtauth.ErrKeysUnavailable)
	idp.Mend()
	fetches := idp.Fetches.Load()
	verify("up, within min_refresh_interval of the last fetch", token, jwtauth.ErrKeysUnavailable)
	if n := idp.Fetches.Load(); n != fetches {
		t.Fatalf("%d fetches within min_refresh_interval, want none", n-fetches)
	}
	clock.Add(s.MinRefreshInterval)
	verify("up, after min_refresh_interval", token, nil)
	if err := keys.FetchError(idp.JWKSURL()); err != nil {
		t.Fatalf("FetchError after the recovery: %v", err)
	}
	idp.Break(503, "")
	clock.Add(s.MinRefreshInterval)
	verify("down again, an unknown kid", jwttest.Sign(t, jwttest.NewKey(t, "ES256", "ec-2"), ok), jwtauth.ErrKeysUnavailable)
	verify("down again, a kid fetched before", token, nil)
	verify("down again, a forgery under a kid fetched before", jwttest.Sign(t, jwttest.NewKey(t, "ES256", "ec-1"), ok), jwtauth.ErrInvalid)
	if err := keys.FetchError(idp.JWKSURL()); !errors.Is(err, jwtauth.ErrKeysUnavailable) {
		t.Fatalf("FetchError while down again = %v", err)
	}
}

// logLines returns the lines of logs with message msg, as JSON objects.
func logLines(t *testing.T, logs *fixture.SyncBuffer, msg string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if l["msg"] == msg {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestFetchErrorsLoggedAndCounted: every failed fetch of a JWKS is
// counted (tollgate_jwks_fetch_errors_total), and logged at most once per
// URL per 10 s, the next line saying how many were left out; the
// recovery is logged once.
func TestFetchErrorsLoggedAndCounted(t *testing.T) {
	ec := jwttest.NewKey(t, "ES256", "ec-1")
	idp := jwttest.NewIdP(t, ec)
	idp.Break(503, "")
	clock := fixture.ClockAt(now)
	logs := &fixture.SyncBuffer{}
	keys := keysWith(t, jwtauth.KeysOptions{Now: clock.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if n := testutil.ToFloat64(keys); n != 0 {
		t.Fatalf("%v fetch errors before any fetch", n)
	}
	s := settings(idp.JWKSURL())
	v, err := jwtauth.NewVerifier(s, keys, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	token := jwttest.Sign(t, ec, jwttest.Valid("alice", now))
	// The first token waits for the first fetch, and asks for another:
	// two failures within 10 s, one line.
	for i := 0; i < 3; i++ {
		v.Verify(context.Background(), token)
	}
	if n, served := testutil.ToFloat64(keys), idp.Fetches.Load(); n != 2 || served != 2 {
		t.Fatalf("%v fetch errors counted, %d fetches served, want 2", n, served)
	}
	lines := logLines(t, logs, "fetching the JWKS failed")
	if len(lines) != 1 || lines[0]["level"] != "WARN" || lines[0]["url"] != idp.JWKSURL() || lines[0]["suppressed"] != nil ||
		!strings.Contains(lines[0]["error"].(string), "503") {
		t.Fatalf("log lines after 2 failures in 10 s: %v", lines)
	}
	clock.Add(s.MinRefreshInterval)
	v.Verify(context.Background(), token)
	if n := testutil.ToFloat64(keys); n != 3 {
		t.Fatalf("%v fetch errors counted, want 3", n)
	}
	lines = logLines(t, logs, "fetching the JWKS failed")
	if len(lines) != 2 || lines[1]["suppressed"] != 1.0 {
		t.Fatalf("log lines after a third failure, 30 s on: %v", lines)
	}
	idp.Mend()
	clock.Add(s.MinRefreshInterval)
	if _, err := v.Verify(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(keys); n != 3 {
		t.Fatalf("%v fetch errors counted after a fetch that succeeded, want 3", n)
	}
	if l := logLines(t, logs, "fetching the JWKS succeeded again"); len(l) != 1 || l[0]["url"] != idp.JWKSURL() {
		t.Fatalf("the recovery logged %v", l)
	}
}
