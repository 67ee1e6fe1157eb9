package gateway_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestClusterFailover kills the master that holds the pro key's budget
// while requests flow: during the gap the gateway answers (fail-open routes
// decide locally, nothing else is a 5xx), a replica is promoted, and
// decisions go back to the cluster. The test reports how long the gap was.
func TestClusterFailover(t *testing.T) {
	t.Parallel() // its own cluster and gateway; it mostly waits for the cluster and the failover, and allows for the calls a loaded machine makes miss the deadline
	cl := redistest.StartCluster(t, 3, 1)
	up := newUpstream(t)
	// The production deadline: a call to the killed master gives up at
	// it, and the route decides locally meanwhile.
	p := withStoreDeadline(config(t, up.URL, "[]"), testenv.ShortStoreTimeout)
	url := "redis://" + cl.Addrs()[0] + "?addr=" + strings.Join(cl.Addrs()[1:], "&addr=")
	g := start(t, p, url)

	// The Redis key of the pro key's user ("bob" in the quickstart).
	pro := p.Plans["pro"].Limits[0]
	key := rstore.KeyFor(tollgate.Request{Name: pro.StoreName, Subject: identity.NewHasher(p.Secret).Hash("u", "bob"), Limit: pro.Limit})
	// A decision that outlives the store's short timeout (a busy machine)
	// is made locally and writes nothing: warm up until one reached Redis.
	warm := time.Now()
	for tries := 0; ; tries++ {
		if code := get(t, g.public+"/api/warm", "X-API-Key", proKey).StatusCode; code != 200 {
			t.Fatalf("before the failover: %d", code)
		}
		if keys, _ := cl.Keys(key); len(keys) == 1 {
			break
		}
		if time.Since(warm) > 10*time.Second {
			t.Fatalf("the pro key's state %s is not on the cluster after %d decisions", key, tries+1)
		}
		time.Sleep(50 * time.Millisecond)
	}

	stop := make(chan struct{})
	var ok200, r429, login503, other atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if w == 0 && i%5 == 0 {
					if code, _ := timedLogin(t, g.public+"/login"); code != 503 && code != 200 && code != 401 && code != 429 {
						other.Add(1)
					} else if code == 503 {
						login503.Add(1)
					}
					continue
				}
				code, _ := timed(t, "GET", g.public+"/api/items", "X-API-Key", proKey)
				switch code {
				case 200:
					ok200.Add(1)
				case 429:
					r429.Add(1)
				default:
					other.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}(w)
	}
	time.Sleep(200 * time.Millisecond)
	killed, err := cl.KillMaster(key)
	if err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	promoted, took, err := cl.WaitForFailover(key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Decisions are back on the cluster once the breaker has closed and the
	// killed slot answers again.
	waitFor(t, "decisions back on the cluster", 20*time.Second, func() bool {
		return metric(t, g, "tollgate_store_breaker_state") == 0 && !strings.Contains(readyz(t, g), "degraded")
	})
	gap := time.Since(killedAt)
	close(stop)
	wg.Wait()
	t.Logf("killed master %s; replica %s promoted after %v; gateway back on the cluster %v after the kill", killed.Addr, promoted.Addr, took, gap)
	t.Logf("during the run: %d x 200, %d x 429 on /api; %d x 503 on fail_closed /login; %d other", ok200.Load(), r429.Load(), login503.Load(), other.Load())
	if other.Load() != 0 {
		t.Fatalf("%d answers were 5xx (or unexpected) outside the fail_closed route", other.Load())
	}
	if ok200.Load() == 0 {
		t.Fatal("no request was admitted")
	}
	// Shared limiting resumed: the pro user's state is on the promoted
	// master. A call that misses the 20 ms deadline on a loaded machine
	// (or finds the breaker open again after it) is decided locally: the
	// requests go on until one is decided by the cluster.
	waitFor(t, "a request after the failover decided by the cluster", 20*time.Second, func() bool {
		before, _ := cl.CommandCalls("evalsha", "eval", "fcall")
		if code := get(t, g.public+"/api/after", "X-API-Key", proKey).StatusCode; code != 200 && code != 429 {
			t.Fatalf("after the failover: %d", code)
		}
		after, _ := cl.CommandCalls("evalsha", "eval", "fcall")
		return after > before
	})
	if m, err := cl.MasterFor(key); err != nil || m != promoted {
		t.Fatalf("the key's master is %v, want the promoted %v (%v)", m, promoted, err)
	}
}
