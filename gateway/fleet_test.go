package gateway_test

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/internal/fixture"
)

// startWith starts a gateway with opts (Policy and a logger filled in;
// on Redis, the generous store deadline, as startClock gives it), after
// calling before with it, if given, between New and Serve.
func startWith(t *testing.T, opts gateway.Options, before ...func(*gateway.Gateway)) *running {
	t.Helper()
	if opts.Store == nil {
		giveStoreDeadline(opts.Policy, opts.RedisURL)
	}
	logs := &fixture.SyncBuffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	opts.ShutdownTimeout = 5 * time.Second
	g, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(g)
	}
	pub, _ := net.Listen("tcp", "127.0.0.1:0")
	adm, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{g: g, public: "http://" + pub.Addr().String(), admin: "http://" + adm.Addr().String(), logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- g.Serve(ctx, pub, adm) }()
	t.Cleanup(func() {
		client.CloseIdleConnections()
		cancel()
		<-r.done
		g.Close()
	})
	return r
}

const u1Digest = "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b" // u1-key

// TestFleetState: on Redis, an admin change on one gateway reaches every
// gateway within a second (at its first poll of the state after the
// change, and they poll every 300 ms) and outlives a restart; a rollback
// on one rolls the fleet back, and a second steps further back, never
// forward.
func TestFleetState(t *testing.T) {
	flushShared(t)
	t.Cleanup(func() { flushShared(t) })
	up := newUpstream(t)
	p1 := config(t, up.URL, "[]")
	p1.Hash = "hash-v1"
	redisURL := "redis://" + srv.Addr + "/0"
	a := startWith(t, gateway.Options{Policy: p1, RedisURL: redisURL})
	var reads *gateway.StateReads
	b := startWith(t, gateway.Options{Policy: p1, RedisURL: redisURL}, func(g *gateway.Gateway) { reads = gateway.CountStateReads(g) })
	a.waitReady(t)
	b.waitReady(t)
	known := func(g *running) bool { return get(t, g.public+"/api/items", "X-API-Key", "u1-key").StatusCode == 200 }
	if known(a) || known(b) {
		t.Fatal("u1-key known before it was added")
	}
	if code := adminDo(t, "PUT", a.admin+"/keys/u1", `{"digest":"`+u1Digest+`","plan":"free"}`); code != 204 {
		t.Fatalf("PUT key on a: %d", code)
	}
	saved := reads.Polls() // b's polls begun before a's change was saved
	if !known(a) {
		t.Fatal("a does not know the key it was given")
	}
	took := waitFor(t, "b knows the key", 10*time.Second, func() bool { return known(b) })
	// Within a second is in polls, not in this machine's speed: b loads
	// the change at the first poll that began after it was saved (or at
	// one begun just before that read the new serial), and b polls every
	// StatePoll.
	if at := reads.LoadAfter(saved); at < 0 || at > saved+1 {
		t.Errorf("b loaded a's change at its poll %d, want its first after the change was saved (%d)", at, saved+1)
	}
	if gateway.StatePoll >= time.Second {
		t.Errorf("gateways poll the state every %v: a change takes longer than a second to reach them", gateway.StatePoll)
	}
	t.Logf("b applied a's change after %v (polls %d to %d)", took, saved, reads.Polls())
	// A gateway started later, or restarted, starts with the change.
	c := startWith(t, gateway.Options{Policy: p1, RedisURL: redisURL})
	waitFor(t, "a gateway started after the change knows the key", 10*time.Second, func() bool { return known(c) })

	// Two more versions on every gateway (as a file reload would load
	// them), then a rollback on a.
	for _, v := range []string{"v2", "v3"} {
		p := *p1
		p.Version, p.Hash = v, "hash-"+v
		for _, g := range []*running{a, b} {
			if err := g.g.Reload(&p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if code, _ := adminPost(t, a.admin+"/policy/rollback", `{}`); code != 200 {
		t.Fatalf("rollback on a: %d", code)
	}
	waitFor(t, "b rolls back to v2", 10*time.Second, func() bool { return b.g.Policy().Version == "v2" })
	if code, _ := adminPost(t, b.admin+"/policy/rollback", `{}`); code != 200 {
		t.Fatalf("second rollback, on b: %d", code)
	}
	waitFor(t, "a rolls back to v1", 10*time.Second, func() bool { return a.g.Policy().Version == p1.Version })
	if a.g.Policy().Version != b.g.Policy().Version {
		t.Fatalf("a serves %s, b %s", a.g.Policy().Version, b.g.Policy().Version)
	}
	// The overrides held through the rollbacks.
	if !known(a) || !known(b) {
		t.Fatal("the key was lost in the rollbacks")
	}
}

// TestStateFile: without Redis, admin changes are kept in the state file
// and a gateway started on it has them; a change that cannot be saved is
// refused and not applied.
func TestStateFile(t *testing.T) {
	up := newUpstream(t)
	p := config(t, up.URL, "[]")
	dir := t.TempDir()
	state := filepath.Join(dir, "policy.yaml.state.json")
	a := startWith(t, gateway.Options{Policy: p, StateFile: state})
	if code := adminDo(t, "PUT", a.admin+"/keys/u1", `{"digest":"`+u1Digest+`","plan":"free"}`); code != 204 {
		t.Fatalf("PUT key: %d", code)
	}
	a.cancel()
	<-a.done
	a.done <- nil
	b := startWith(t, gateway.Options{Policy: p, StateFile: state})
	if code := get(t, b.public+"/api/items", "X-API-Key", "u1-key").StatusCode; code != 200 {
		t.Fatalf("after a restart, the key added before: %d", code)
	}
	c := startWith(t, gateway.Options{Policy: p, StateFile: filepath.Join(dir, "missing-dir", "state.json")})
	if code := adminDo(t, "PUT", c.admin+"/keys/u2", `{"digest":"`+u1Digest+`","plan":"free"}`); code != 503 {
		t.Fatalf("a change that cannot be saved: %d, want 503", code)
	}
	if code := get(t, c.public+"/api/items", "X-API-Key", "u1-key").StatusCode; code != 401 {
		t.Fatalf("the unsaved change was applied: %d", code)
	}
}

// TestFleetStateOverVersions: gateways of a fleet serving different
// versions (a rolling deploy) share the admin changes. One that a change
// does not fit (a tenant set to a plan only the other's version has)
// applies the rest of the state, and every later change: a key removed on
// one gateway stops working on the other. It used to refuse the whole
// state, and every state after it, so a revoked key went on being served.
func TestFleetStateOverVersions(t *testing.T) {
	flushShared(t)
	t.Cleanup(func() { flushShared(t) })
	up := newUpstream(t)
	p1 := config(t, up.URL, "[]")
	p1.Hash = "hash-v1"
	p2 := *p1
	p2.Version, p2.Hash = "v2", "hash-v2"
	p2.Plans = maps.Clone(p1.Plans)
	p2.Plans["gold"] = p1.Plans["pro"]
	redisURL := "redis://" + srv.Addr + "/0"
	a := startWith(t, gateway.Options{Policy: &p2, RedisURL: redisURL})
	b := startWith(t, gateway.Options{Policy: p1, RedisURL: redisURL})
	a.waitReady(t)
	b.waitReady(t)
	known := func(g *running) bool { return get(t, g.public+"/api/items", "X-API-Key", "u1-key").StatusCode == 200 }
	if code := adminDo(t, "PUT", a.admin+"/keys/u1", `{"digest":"`+u1Digest+`","plan":"free"}`); code != 204 {
		t.Fatalf("PUT key on a: %d", code)
	}
	waitFor(t, "b knows the key", 10*time.Second, func() bool { return known(b) })
	if code := adminDo(t, "PUT", a.admin+"/tenants/acme", `{"plan":"gold"}`); code != 204 {
		t.Fatalf("PUT tenant on a: %d", code)
	}
	if code := adminDo(t, "DELETE", a.admin+"/keys/u1", ``); code != 204 {
		t.Fatalf("DELETE key on a: %d", code)
	}
	if known(a) {
		t.Fatal("a still serves the key it removed")
	}
	waitFor(t, "b stops serving the removed key", 10*time.Second, func() bool { return !known(b) })
	// b takes changes of its own too, though the state holds one that
	// does not fit it (and that one stays, for a).
	if code := adminDo(t, "PUT", b.admin+"/keys/u1", `{"digest":"`+u1Digest+`","plan":"free"}`); code != 204 {
		t.Fatalf("PUT key on b, over a state with a tenant b cannot take: %d", code)
	}
	if !known(b) {
		t.Fatal("b does not serve the key it added")
	}
	waitFor(t, "a knows the key b added", 10*time.Second, func() bool { return known(a) })
	if code := adminDo(t, "PUT", b.admin+"/tenants/acme2", `{"plan":"gold"}`); code == 204 {
		t.Fatal("b took a tenant set to a plan it does not have")
	}
}
