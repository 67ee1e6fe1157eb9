package redistest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/internal/redistest"
)

// direct returns a client talking to one node only, without the cluster or
// sentinel discovery rueidis.NewClient would otherwise do.
func direct(t *testing.T, s *redistest.Server) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connecting to %s: %v", s.Addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// retry runs f until it succeeds or timeout passes, and returns the number
// of attempts and the last error.
func retry(timeout time.Duration, f func() error) (int, error) {
	deadline := time.Now().Add(timeout)
	for n := 1; ; n++ {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	c := redistest.StartCluster(t, 3, 1)
	t.Logf("cluster of %d nodes ready in %v", len(c.Nodes), time.Since(start).Round(time.Millisecond))
	if len(c.Nodes) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("got %d nodes, %d addrs, want 6", len(c.Nodes), len(c.Addrs()))
	}
	masters, err := c.Masters()
	if err != nil || len(masters) != 3 {
		t.Fatalf("Masters() = %v, %v; want 3 masters", masters, err)
	}
	client := c.NewClient(t)

	// One hash-tagged key per master, so that the writes cover every shard.
	keyOf := map[*redistest.Server]string{}
	var keys []string
	for i := 0; len(keyOf) < 3 && i < 200; i++ {
		k := fmt.Sprintf("rl:{user%d}:tokens", i)
		m, err := c.MasterFor(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keyOf[m]; !ok {
			keyOf[m] = k
			keys = append(keys, k)
		}
	}
	if len(keyOf) != 3 {
		t.Fatalf("keys reached %d masters, want 3", len(keyOf))
	}
	for _, k := range keys {
		if err := client.Do(ctx, client.B().Set().Key(k).Value("v-"+k).Ex(time.Minute).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	// Each key lives on the master MasterFor names.
	for m, k := range keyOf {
		got, err := direct(t, m).Do(ctx, client.B().Get().Key(k).Build()).ToString()
		if err != nil || got != "v-"+k {
			t.Fatalf("GET %s on its master %s = %q, %v; want %q", k, m.Addr, got, err, "v-"+k)
		}
	}
	got, err := c.Keys("rl:*")
	if want := slices.Sorted(slices.Values(keys)); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Keys(rl:*) = %q, %v; want %q", got, err, want)
	}
	persist := "rl:{user0}:persist"
	if err := client.Do(ctx, client.B().Set().Key(persist).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.KeysWithoutTTL(ctx, "rl:*"); err != nil || !slices.Equal(got, []string{persist}) {
		t.Fatalf("KeysWithoutTTL(rl:*) = %q, %v; want [%s]", got, err, persist)
	}
	if err := client.Do(ctx, client.B().Del().Key(persist).Build()).Error(); err != nil {
		t.Fatal(err)
	}

	// Scripts are counted in INFO commandstats of the masters.
	before, err := c.CommandCalls("evalsha", "eval", "fcall")
	if err != nil {
		t.Fatal(err)
	}
	script := rueidis.NewLuaScript("return redis.call('GET', KEYS[1])")
	for _, k := range keys {
		if got, err := script.Exec(ctx, client, []string{k}, nil).ToString(); err != nil || got != "v-"+k {
			t.Fatalf("script on %s = %q, %v", k, got, err)
		}
	}
	after, err := c.CommandCalls("EVALSHA", "EVAL")
	if err != nil {
		t.Fatal(err)
	}
	if after-before < int64(len(keys)) {
		t.Fatalf("CommandCalls(evalsha, eval) went from %d to %d after %d scripts", before, after, len(keys))
	}

	// Make sure the victim's replica has the key before the crash.
	victimKey := keys[0]
	victim, err := c.MasterFor(victimKey)
	if err != nil {
		t.Fatal(err)
	}
	err = direct(t, victim).Dedicated(func(d rueidis.DedicatedClient) error {
		if err := d.Do(ctx, d.B().Set().Key(victimKey).Value("v-"+victimKey).Ex(time.Minute).Build()).Error(); err != nil {
			return err
		}
		n, err := d.Do(ctx, d.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
		if err == nil && n < 1 {
			err = fmt.Errorf("WAIT 1 5000 = %d", n)
		}
		return err
	})
	if err != nil {
		t.Fatalf("replicating %s: %v", victimKey, err)
	}

	killed, err := c.KillMaster(victimKey)
	if err != nil {
		t.Fatal(err)
	}
	if killed != victim {
		t.Fatalf("KillMaster killed %s, MasterFor said %s", killed.Addr, victim.Addr)
	}
	newMaster, took, err := c.WaitForFailover(victimKey, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover of %s: %s -> %s took %v", victimKey, killed.Addr, newMaster.Addr, took.Round(time.Millisecond))
	if newMaster == killed {
		t.Fatalf("WaitForFailover returned the killed master %s", killed.Addr)
	}
	if m, err := c.MasterFor(victimKey); err != nil || m != newMaster {
		t.Fatalf("after failover MasterFor(%s) = %v, %v; want %s", victimKey, m, err, newMaster.Addr)
	}
	if ms, err := c.Masters(); err != nil || len(ms) != 3 || slices.Contains(ms, killed) {
		t.Fatalf("after failover Masters() = %v, %v; want 3 live masters", ms, err)
	}

	// The slot is served again: the client finds the new master on its own.
	var firstErr error
	n, err := retry(10*time.Second, func() error {
		err := client.Do(ctx, client.B().Set().Key(victimKey).Value("after").Ex(time.Minute).Build()).Error()
		if firstErr == nil {
			firstErr = err
		}
		return err
	})
	if err != nil {
		t.Fatalf("SET %s after failover, %d attempts: %v", victimKey, n, err)
	}
	t.Logf("first write after failover succeeded after %d attempt(s); first error: %v", n, firstErr)
	for _, k := range keys[1:] {
		if got, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString(); err != nil || got != "v-"+k {
			t.Fatalf("GET %s after failover = %q, %v", k, got, err)
		}
	}
	if got, err := direct(t, newMaster).Do(ctx, client.B().Get().Key(victimKey).Build()).ToString(); err != nil || got != "after" {
		t.Fatalf("GET %s on the new master = %q, %v; want %q", victimKey, got, err, "after")
	}
	if got, err := c.Keys("rl:*"); err != nil || len(got) != len(keys) {
		t.Fatalf("after failover Keys(rl:*) = %q, %v; want %d keys", got, err, len(keys))
	}
	if _, err := c.CommandCalls("set"); err != nil {
		t.Fatalf("CommandCalls with a dead node: %v", err)
	}

	// A restarted master rejoins as a replica of the node that replaced it.
	if err := killed.Restart(); err != nil {
		t.Fatal(err)
	}
	_, err = retry(15*time.Second, func() error {
		info, err := direct(t, killed).Do(ctx, client.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			return err
		}
		_, port, _ := strings.Cut(newMaster.Addr, ":")
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+port+"\r\n") ||
			!strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("INFO replication:\n%s", info)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restarted %s did not rejoin as a replica of %s: %v", killed.Addr, newMaster.Addr, err)
	}
}

func TestSentinel(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	s := redistest.StartSentinel(t)
	t.Logf("sentinel setup ready in %v: %s", time.Since(start).Round(time.Millisecond), s.URL())
	if s.MasterName != "tollgate" || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("MasterName %q, %d sentinels", s.MasterName, len(s.SentinelAddrs()))
	}
	a := s.SentinelAddrs()
	if want := "redis://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2] + "&master_set=tollgate"; s.URL() != want {
		t.Fatalf("URL() = %q, want %q", s.URL(), want)
	}
	client := s.NewClient(t)
	if err := client.Do(ctx, client.B().Set().Key("rl:sentinel").Value("ok").Ex(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := client.Do(ctx, client.B().Get().Key("rl:sentinel").Build()).ToString(); err != nil || got != "ok" {
		t.Fatalf("GET through sentinel = %q, %v", got, err)
	}
	// The write went to the master and reached the replica.
	if got, err := direct(t, s.Master()).Do(ctx, client.B().Get().Key("rl:sentinel").Build()).ToString(); err != nil || got != "ok" {
		t.Fatalf("GET on the master = %q, %v", got, err)
	}
	replica := direct(t, s.Replica())
	n, err := retry(5*time.Second, func() error {
		got, err := replica.Do(ctx, client.B().Get().Key("rl:sentinel").Build()).ToString()
		if err == nil && got != "ok" {
			err = fmt.Errorf("got %q", got)
		}
		return err
	})
	if err != nil {
		t.Fatalf("GET on the replica after %d attempts: %v", n, err)
	}
}
