package redis_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
	"github.com/tollgate/tollgate/storetest"
)

// srv is one redis-server shared by this package's tests; TestMain fails the
// run if any key the store wrote is left without a TTL.
var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv, rstore.KeyPrefix+"*")) }

func newStore(t testing.TB) *rstore.Store {
	t.Helper()
	s, err := rstore.New(srv.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tollgate.Store { return newStore(t) })
}

// TestConformanceScripts runs the conformance suite on the scripts alone,
// as where Redis will not load a function library.
func TestConformanceScripts(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tollgate.Store {
		s, err := rstore.New(srv.NewClient(t), rstore.Options{NoFunctions: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestConcurrencyFourClients runs the exact-admission check with the
// goroutines spread over four independent clients, as four gateway
// instances would be.
func TestConcurrencyFourClients(t *testing.T) {
	stores := make([]tollgate.Store, 4)
	for i := range stores {
		stores[i] = newStore(t)
	}
	storetest.RunConcurrency(t, stores)
	storetest.RunMultiConcurrency(t, stores)
}

func TestKeyLayout(t *testing.T) {
	cases := []struct{ policy, subject, want string }{
		{"api", "user-42", "rl:v3:{user-42}:api:gcra"},
		{"api", "a}b", "rl:v3:{h:"},
		{"api", "", "rl:v3:{h:"},
		{"api", "h:deadbeef", "rl:v3:{h:"},
		{"api", strings.Repeat("x", 65), "rl:v3:{h:"},
	}
	for _, c := range cases {
		got := rstore.Key(c.policy, c.subject, algo.GCRA)
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("Key(%q, %.10q) = %q, want prefix %q", c.policy, c.subject, got, c.want)
		}
		if strings.Count(got, "{") != 1 || strings.Count(got, "}") != 1 {
			t.Errorf("Key(%q, %.10q) = %q: hash tag broken", c.policy, c.subject, got)
		}
	}
	if rstore.Key("a", "h:x", algo.GCRA) == rstore.Key("a", "h:"+strings.Repeat("0", 32), algo.GCRA) {
		t.Error("hashed subjects collide")
	}
	// Every kind of key, and escaped names.
	req := algo.Request{Name: "plan/free@1a2b", Subject: "k_user", Tag: "acme", Limit: algo.Limit{Algorithm: algo.FixedWindow}}
	lock, held := rstore.LockKeys("login/api", "acct")
	for _, c := range [][2]string{
		{rstore.KeyFor(req), "rl:v3:{acme}:plan/free@1a2b:k_user:fw"},
		{rstore.HeldKey(req), "rl:v3:{acme}:plan/free@1a2b:k_user:fw:held"},
		{lock, "rl:v3:{acct}:login/api:lock"},
		{held, "rl:v3:{acct}:login/api:lock:held"},
		{rstore.LeaseKey("conc/api", "k_user"), "rl:v3:{k_user}:conc/api:lease"},
		{rstore.SettledKey("acme", "res-7f3a"), "rl:v3:{acme}:res-7f3a:settled"},
		{rstore.KeyFor(algo.Request{Name: "P", Subject: "q", Tag: "u"}), "rl:v3:{u}:P:q:gcra"},
		{rstore.Key("P:q", "u", algo.GCRA), "rl:v3:{u}:P%3Aq:gcra"},
		{rstore.Key("100%", "u", algo.GCRA), "rl:v3:{u}:100%25:gcra"},
		{rstore.KeyFor(algo.Request{Name: "P", Subject: "a:b", Tag: "u"}), "rl:v3:{u}:P:a%3Ab:gcra"},
	} {
		if c[0] != c[1] {
			t.Errorf("key %q, want %q", c[0], c[1])
		}
	}
}

// TestScriptsReloadAfterFlush checks that losing Redis' scripts and
// functions (SCRIPT FLUSH, FUNCTION FLUSH, as after a restart) is handled
// transparently, and that decisions go through FCALL unless told not to.
func TestScriptsReloadAfterFlush(t *testing.T) {
	c := srv.NewClient(t)
	ctx := context.Background()
	for _, noFn := range []bool{false, true} {
		s, err := rstore.New(c, rstore.Options{NoFunctions: noFn})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range algo.Algorithms() {
			l := algo.Limit{Algorithm: a, Rate: 10, Period: time.Minute}
			req := algo.Request{Name: unique("flush"), Subject: "s", Limit: l, Cost: 1}
			if _, err := s.Allow(ctx, req); err != nil {
				t.Fatal(err)
			}
			for _, flush := range []rueidis.Completed{c.B().ScriptFlush().Build(), c.B().FunctionFlush().Build()} {
				if err := c.Do(ctx, flush).Error(); err != nil {
					t.Fatal(err)
				}
			}
			before := fcalls(t, c)
			d, err := s.Allow(ctx, req)
			if err != nil || !d.Allowed || d.Remaining != 8 {
				t.Fatalf("%v after SCRIPT and FUNCTION FLUSH: %+v, %v", a, d, err)
			}
			if used := fcalls(t, c) > before; used == noFn {
				t.Fatalf("%v, NoFunctions %v: decided through FCALL: %v", a, noFn, used)
			}
		}
	}
}

// fcalls returns the FCALL calls the server behind c has counted.
func fcalls(t *testing.T, c rueidis.Client) int64 { return redistest.Calls(t, c, "fcall") }

// TestTTLOnEveryKey checks the TTL each script sets against Redis' own
// clock: present, and never longer than the time until the state is fresh.
func TestTTLOnEveryKey(t *testing.T) {
	c := srv.NewClient(t)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, a := range algo.Algorithms() {
		l := algo.Limit{Algorithm: a, Rate: 10, Period: time.Minute}
		p := unique("ttl")
		d, err := s.Allow(ctx, algo.Request{Name: p, Subject: "s", Limit: l, Cost: 3})
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := c.Do(ctx, c.B().Pttl().Key(rstore.Key(p, "s", a)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > d.ResetAfter.Milliseconds() || ttl > 2*time.Minute.Milliseconds() {
			t.Errorf("%v: PTTL %d ms, ResetAfter %v", a, ttl, d.ResetAfter)
		}
	}
}

// TestSlidingLogMembersUnique checks that many requests in one millisecond
// each add their own member (no randomness, no overwrite).
func TestSlidingLogMembersUnique(t *testing.T) {
	c := srv.NewClient(t)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	l := algo.Limit{Algorithm: algo.SlidingWindowLog, Rate: 50, Period: time.Second}
	p := unique("uniq")
	for i := 0; i < 10; i++ {
		if _, err := s.Allow(ctx, algo.Request{Name: p, Subject: "s", Limit: l, Cost: int64(1 + i%3), Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := c.Do(ctx, c.B().Zcard().Key(rstore.Key(p, "s", algo.SlidingWindowLog)).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 { // one member per request, whatever its cost
		t.Fatalf("ZCARD = %d, want 10", n)
	}
}

func TestRedisUnavailable(t *testing.T) {
	s := fixture.DeadRedisStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.Allow(ctx, algo.Request{Name: "p", Subject: "s", Limit: tollgate.PerSecond(1), Cost: 1}); err == nil {
		t.Fatal("Allow succeeded with Redis down")
	}
}

var seq atomic.Int64

// unique returns a policy name no other test run against this server used.
func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// TestFunctionsRefused: where Redis will not load the function library
// (here a user without the FUNCTION command), the store decides with
// scripts instead, and keeps doing so.
func TestFunctionsRefused(t *testing.T) {
	admin := srv.NewClient(t)
	ctx := context.Background()
	user := unique("nofn")
	if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-function").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, admin.B().Arbitrary("ACL", "DELUSER", user).Build()) })
	if err := admin.Do(ctx, admin.B().FunctionFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, Username: user, Password: "pw", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := algo.Request{Name: unique("refused"), Subject: "s", Limit: algo.Limit{Rate: 3, Period: time.Minute}, Cost: 1}
	before := fcalls(t, admin)
	for i := range 4 {
		d, err := s.Allow(ctx, req)
		if err != nil || d.Allowed != (i < 3) {
			t.Fatalf("decision %d without functions: %+v, %v", i+1, d, err)
		}
	}
	if n := fcalls(t, admin) - before; n > 1 {
		t.Fatalf("%d FCALLs: want at most the one that found no function", n)
	}
}
