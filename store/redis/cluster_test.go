package redis_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
	"github.com/tollgate/tollgate/storetest"
)

// TestCluster runs the whole conformance suite — the test vectors for every
// algorithm, multi-limit and hierarchy groups, exact admission under 200
// goroutines — on a real Redis Cluster of 3 masters and 3 replicas, then
// checks that every key has a TTL and that one subject's keys share a slot.
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
	stores := make([]tollgate.MultiStore, 4)
	for i := range stores {
		stores[i] = newStore(t).(tollgate.MultiStore)
	}
	t.Run("MultiFourClients", func(t *testing.T) { storetest.RunMultiConcurrency(t, stores) })

	keys, err := cl.Keys(rstore.KeyPrefix + "*")
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys on the cluster: %d, %v", len(keys), err)
	}
	bad, err := cl.KeysWithoutTTL(context.Background(), rstore.KeyPrefix+"*")
	if err != nil || len(bad) > 0 {
		t.Fatalf("%d keys without a TTL on the cluster (%v), e.g. %v", len(bad), err, bad)
	}
	// A hierarchy's keys land on one node: the tenant's.
	user := rstore.KeyFor(algo.Request{Policy: "p", Subject: "u1", Tag: "tenant-x", Limit: algo.Limit{Algorithm: algo.GCRA}})
	tenant := rstore.KeyFor(algo.Request{Policy: "t", Subject: "tenant-x", Tag: "tenant-x", Limit: algo.Limit{Algorithm: algo.FixedWindow}})
	a, err1 := cl.MasterFor(user)
	b, err2 := cl.MasterFor(tenant)
	if err1 != nil || err2 != nil || a != b {
		t.Fatalf("user key %s on %v, tenant key %s on %v (%v %v)", user, a, tenant, b, err1, err2)
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
