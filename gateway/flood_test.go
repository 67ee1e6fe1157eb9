package gateway_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/httplimit"
)

// TestKeySpaceFlood fills the memory store (store.max_bytes: 1MiB) with a
// login flood from thousands of client addresses, each guessing another
// account, and checks that while it is full the login guard still locks
// an account and a new client is still limited, as it would be alone.
func TestKeySpaceFlood(t *testing.T) {
	up := newEchoUpstream(t)
	clock := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	p := config(t, up.URL, "[127.0.0.1/32]")
	p.Store.MaxBytes = 1 << 20
	g := startClock(t, p, "", clock.Now)
	// Three keys each: 6,000 where 1 MiB holds about 4,300, so the store
	// is full and evicting (about 2,000) well before the flood ends.
	const attackers = 2000
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < attackers; i += 8 {
				ip := fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff)
				if code, _, body := login(t, g, ip, fmt.Sprintf("victim%d", i), "guess"); code != 401 {
					t.Errorf("flood login %d: %d %s", i, code, body)
					return
				}
			}
		})
	}
	wg.Wait()
	_, metrics := getBody(t, g.admin+"/metrics")
	if !strings.Contains(string(metrics), "tollgate_memory_evictions_total ") || strings.Contains(string(metrics), "tollgate_memory_evictions_total 0\n") {
		t.Fatalf("the flood did not fill the store:\n%s", grepLines(string(metrics), "tollgate_memory"))
	}
	// Five wrong passwords lock alice; the right one is then refused.
	for i := range 5 {
		if code, _, body := login(t, g, "198.51.100.1", "alice", "guess"); code != 401 {
			t.Fatalf("wrong password %d: %d %s", i+1, code, body)
		}
	}
	hits := up.hits.Load()
	if code, _, body := login(t, g, "198.51.100.2", "alice", "demo"); code != 429 || !strings.Contains(body, httplimit.ProblemLoginLocked) {
		t.Fatalf("the right password after 5 wrong ones, the store full: %d %s; want the account locked", code, body)
	}
	if up.hits.Load() != hits {
		t.Fatal("the locked account's login reached the upstream")
	}
	// A new client address gets the anonymous plan's 20 a minute, no more.
	if n, resp, _ := admitUntilRefused(t, g.public+"/api/items", 100, "X-Forwarded-For", "198.51.100.3"); n != 20 || resp == nil {
		t.Fatalf("a new client, the store full: admitted %d, want 20", n)
	}
	t.Log(grepLines(string(metrics), "tollgate_memory"))
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.HasPrefix(line, prefix) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestOneAddressBoundedState: one address naming a new account with every
// login creates state for no more accounts than its failure budget lets
// it try (20), because the guard holds a place in the address's budget
// before it creates anything for the account.
func TestOneAddressBoundedState(t *testing.T) {
	up := newLoginUpstream(t, 0)
	g := start(t, loginConfig(t, up.URL), "")
	before := metric(t, g, "tollgate_memory_keys")
	refused := 0
	for i := 0; i < 300; i++ {
		switch code := postLogin(t, g, "203.0.113.50", "/login", "application/json", fmt.Sprintf(`{"username":"victim%d","password":"x"}`, i)); code {
		case 401:
		case 429:
			refused++
		default:
			t.Fatalf("attempt %d: %d", i, code)
		}
	}
	created := metric(t, g, "tollgate_memory_keys") - before
	t.Logf("300 accounts from one address: %d reached the upstream, %d refused, %v keys created", up.hits.Load(), refused, created)
	if up.hits.Load() != 20 || created > 25 {
		t.Fatalf("one address created %v keys (%d attempts reached the upstream); want the 20 accounts its budget allows, and its own few keys", created, up.hits.Load())
	}
}
