package redis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
	"github.com/tollgate/tollgate/storetest"
)

// TestCluster runs the whole conformance suite — the test vectors for every
// algorithm, multi-limit and hierarchy groups, exact admission under 200
// goroutines — and a settle of a group on a real Redis Cluster of 3
// masters and 3 replicas, then checks that every key has a TTL and that
// one subject's keys share a slot.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	newStore := func(t *testing.T) tollgate.Store {
		s, err := rstore.New(cl.NewClient(t), rstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t, newStore)
	stores := make([]tollgate.Store, 4)
	for i := range stores {
		stores[i] = newStore(t)
	}
	t.Run("MultiFourClients", func(t *testing.T) { storetest.RunMultiConcurrency(t, stores) })
	t.Run("Settle", func(t *testing.T) { testClusterSettle(t, cl) })

	keys, err := cl.Keys(rstore.KeyPrefix + "*")
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys on the cluster: %d, %v", len(keys), err)
	}
	bad, err := cl.KeysWithoutTTL(context.Background(), rstore.KeyPrefix+"*")
	if err != nil || len(bad) > 0 {
		t.Fatalf("%d keys without a TTL on the cluster (%v), e.g. %v", len(bad), err, bad)
	}
	// The store's own slot computation agrees with Redis'.
	c := cl.NewClient(t)
	ctx := context.Background()
	for _, k := range []string{"", "plain", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}{x}", "a{b",
		rstore.Key("p", "u1", algo.GCRA), rstore.Key("p", "a}b", algo.TokenBucket), rstore.Key("p", "ünïcödé", algo.FixedWindow)} {
		want, err := c.Do(ctx, c.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if got := rstore.KeySlot(k); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
	// Coalescing on a cluster: one call per batch, never across slots.
	t.Run("Coalescing", func(t *testing.T) {
		s, err := rstore.New(cl.NewClient(t), rstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p := "coalesce-cluster"
		l := algo.Limit{Rate: 1000, Period: 30 * 24 * time.Hour}
		before, err := cl.CommandCalls("evalsha", "eval", "fcall")
		if err != nil {
			t.Fatal(err)
		}
		var admitted [8]atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 40 {
					d, err := s.Allow(ctx, algo.Request{Name: p, Subject: "tenant-" + strconv.Itoa(g%8), Limit: l, Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted[g%8].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		after, err := cl.CommandCalls("evalsha", "eval", "fcall")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d decisions in %d script calls on the cluster", 64*40, after-before)
		for i := range admitted {
			if n := admitted[i].Load(); n != 320 {
				t.Errorf("tenant-%d: admitted %d of 320 attempts, want all (budget 1000)", i, n)
			}
		}
		if after-before >= 64*40 {
			t.Errorf("%d script calls for %d decisions: not coalesced", after-before, 64*40)
		}
	})

	// A hierarchy's keys land on one node: the tenant's.
	user := rstore.KeyFor(algo.Request{Name: "p", Subject: "u1", Tag: "tenant-x", Limit: algo.Limit{Algorithm: algo.GCRA}})
	tenant := rstore.KeyFor(algo.Request{Name: "t", Subject: "tenant-x", Tag: "tenant-x", Limit: algo.Limit{Algorithm: algo.FixedWindow}})
	a, err1 := cl.MasterFor(user)
	b, err2 := cl.MasterFor(tenant)
	if err1 != nil || err2 != nil || a != b {
		t.Fatalf("user key %s on %v, tenant key %s on %v (%v %v)", user, a, tenant, b, err1, err2)
	}
	t.Run("BatchDuringMigration", func(t *testing.T) { testBatchDuringMigration(t, cl) })
}

// testClusterSettle settles a reservation of a group of two limits (a
// user's, a tenant's) on the cluster: one call, its keys and the
// marker in the group's slot, applied once.
func testClusterSettle(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	s, err := rstore.New(cl.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []algo.Request{
		{Name: "settle-user", Subject: "u1", Tag: "tenant-s", Limit: algo.Limit{Algorithm: algo.TokenBucket, Rate: 100, Period: time.Hour}, Cost: 40},
		{Name: "settle-tenant", Subject: "tenant-s", Tag: "tenant-s", Limit: algo.Limit{Algorithm: algo.FixedWindow, Rate: 1000, Period: 24 * time.Hour}, Cost: 40},
	}
	if _, err := s.AllowAll(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	st := algo.Settlement{ID: "res-1", Age: time.Millisecond, TTL: time.Minute,
		Items: []algo.SettleItem{{Request: reqs[0], Actual: 10}, {Request: reqs[1], Actual: 10}}}
	for _, want := range []algo.SettleOutcome{algo.SettleApplied, algo.SettleRepeated} {
		out, err := s.SettleAll(ctx, st)
		if err != nil || out.Outcome != want || out.Decisions[0].Remaining < 89 || out.Decisions[1].Remaining != 990 {
			t.Fatalf("settling 10 of 40 on the cluster: %+v %v, want %v, 30 given back to each", out, err, want)
		}
	}
	m, err := cl.MasterFor(rstore.SettledKey("tenant-s", "res-1"))
	for _, r := range reqs {
		if n, err2 := cl.MasterFor(rstore.KeyFor(r)); err != nil || err2 != nil || n != m {
			t.Fatalf("the marker on %v, %s on %v (%v %v)", m, rstore.KeyFor(r), n, err, err2)
		}
	}
}

// testBatchDuringMigration decides a batch of two keys of one slot while
// the slot migrates and one key has moved: Redis answers TRYAGAIN to the
// batch, and the store decides the two requests one by one instead; so
// too a batch of two settles.
func testBatchDuringMigration(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	c := cl.NewClient(t)
	s, err := rstore.New(c, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := algo.Limit{Rate: 10, Period: time.Hour}
	reqA := algo.Request{Name: "migrate", Subject: "m-0", Limit: l, Cost: 3}
	slot := rstore.KeySlot(rstore.KeyFor(reqA))
	reqB := reqA
	for i := 1; reqB.Subject == reqA.Subject || rstore.KeySlot(rstore.KeyFor(reqB)) != slot; i++ {
		reqB.Subject = "m-" + strconv.Itoa(i) // another hash tag, same slot
	}
	if _, err := s.Allow(ctx, reqA); err != nil {
		t.Fatal(err)
	}
	src, err := cl.MasterFor(rstore.KeyFor(reqA))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	dst := masters[0]
	if dst == src {
		dst = masters[1]
	}
	nodes := c.Nodes()
	do := func(addr string, args ...string) string {
		t.Helper()
		n := nodes[addr]
		v, err := n.Do(ctx, n.B().Arbitrary(args[0]).Args(args[1:]...).Build()).ToString()
		if err != nil {
			t.Fatalf("%s on %s: %v", args, addr, err)
		}
		return v
	}
	srcID, dstID := do(src.Addr, "CLUSTER", "MYID"), do(dst.Addr, "CLUSTER", "MYID")
	sl := strconv.Itoa(int(slot))
	do(dst.Addr, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID)
	do(src.Addr, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID)
	host, port, _ := strings.Cut(dst.Addr, ":")
	do(src.Addr, "MIGRATE", host, port, "", "0", "5000", "KEYS", rstore.KeyFor(reqA))

	reqA.Cost, reqB.Cost = 1, 1
	ds, errs := s.DecideBatch(ctx, []algo.Request{reqA, reqB})
	for _, err := range errs {
		if err != nil {
			t.Fatalf("batch during migration: %v", errs)
		}
	}
	if !ds[0].Allowed || ds[0].Remaining != 6 || !ds[1].Allowed || ds[1].Remaining != 9 {
		t.Fatalf("batch during migration: %+v", ds)
	}
	// A batch of settles is refused alike, and each settle gets what it
	// gets alone: TRYAGAIN too, since its marker is new and its keys are
	// then split across the nodes (or missing on the source).
	sts := []algo.Settlement{
		{ID: "a", TTL: time.Hour, Items: []algo.SettleItem{{Request: reqA, Actual: 0}}},
		{ID: "b", TTL: time.Hour, Items: []algo.SettleItem{{Request: reqB, Actual: 0}}}}
	_, errs = s.SettleBatch(ctx, sts)
	for i, st := range sts {
		_, alone := s.SettleAll(ctx, st)
		if errs[i] == nil || alone == nil || !strings.Contains(errs[i].Error(), "TRYAGAIN") || !strings.Contains(alone.Error(), "TRYAGAIN") {
			t.Errorf("settle %s during migration: in a batch %v, alone %v, want TRYAGAIN", st.ID, errs[i], alone)
		}
	}
	for _, m := range masters {
		do(m.Addr, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
	}
}

// TestSentinel runs the conformance suite through Redis Sentinel.
func TestSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	storetest.Run(t, func(t *testing.T) tollgate.Store {
		c := sn.NewClient(t)
		s, err := rstore.New(c, rstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
