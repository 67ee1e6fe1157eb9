package gateway_test

import (
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/logsample"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestLogFloodWhileStoreDown: with the store unreachable, every login
// attempt is refused (fail closed) and every ordinary request decided
// locally; a thousand of them write a handful of log lines, errors
// included (each line written after others were dropped counts them, see
// internal/logsample), and the breaker's opening says why.
func TestLogFloodWhileStoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there now
	up := newUpstream(t)
	// The production default deadline: what a store that does not answer
	// costs each request, and logs, is the test.
	p := withStoreDeadline(loginConfig(t, up.URL), testenv.ShortStoreTimeout)
	g := startNoWait(t, p, "redis://"+dead+"/0")
	const n = 1000
	began := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if i%2 == 0 {
					if code := postLogin(t, g, "203.0.113.9", "/login", "application/json", `{"username":"alice","password":"x"}`); code != 503 {
						t.Errorf("login with the store down: %d, want 503", code)
						return
					}
				} else if code := get(t, g.public+"/api/items", "X-API-Key", proKey).StatusCode; code != 200 && code != 429 {
					t.Errorf("fail_open route with the store down: %d, want a local decision", code)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	// Event lines are sampled, per message: a burst, then so many a
	// second. Time is the property of that bound, and it follows the
	// clock (taken after the lines are read), so a slow machine only
	// allows more; unsampled, a message would write a line a request. The
	// access log writes at most one line a request, and at most
	// logging.access_per_second (1,000) a second.
	var events, access int
	perMessage := map[string]int{}
	var kept strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(g.logs.String()), "\n") {
		if strings.Contains(line, `"msg":"access"`) {
			access++
			continue
		}
		events++
		var m struct{ Msg string }
		json.Unmarshal([]byte(line), &m)
		perMessage[m.Msg]++
		kept.WriteString(line + "\n")
	}
	took := time.Since(began)
	logs := kept.String()
	t.Logf("%d requests with the store down wrote %d event lines (%d messages) and %d access lines in %v", n, events, len(perMessage), access, took)
	most := logsample.DefaultBurst + int(logsample.DefaultPerSecond*took.Seconds()) + 1
	for msg, c := range perMessage {
		if c > most {
			t.Errorf("%d requests wrote %d lines of %q in %v, want at most %d: not sampled. First lines:\n%.3000s", n, c, msg, took, most, logs)
		}
	}
	if access > n {
		t.Fatalf("%d requests wrote %d access lines", n, access)
	}
	// The first failures come from logins (whose guard is asked before
	// their limits are charged) or from ordinary requests, whichever ran
	// first.
	opened := `"msg":"store circuit breaker open","from":"closed","to":"open","cause":"`
	if !strings.Contains(logs, opened+`deciding in redis: not connected`) && !strings.Contains(logs, opened+`reserving in redis: not connected`) {
		t.Errorf("the breaker's opening does not say why:\n%.3000s", logs)
	}
}
