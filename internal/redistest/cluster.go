package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

const (
	// clusterReadyTimeout bounds how long NewCluster waits for a healthy
	// cluster after redis-cli --cluster create.
	clusterReadyTimeout = 30 * time.Second
	// adminTimeout bounds one administrative round trip to one node.
	adminTimeout = 2 * time.Second
	// pollInterval is the pause between two polls of the nodes.
	pollInterval = 50 * time.Millisecond
	// clusterSlots is the number of hash slots of Redis Cluster.
	clusterSlots = 16384
)

// Cluster is a Redis Cluster of redis-server processes owned by a test.
//
// Each node runs with its own cluster config file and log file in a
// private directory that survives Server.Kill, so Server.Restart brings a
// killed node back into the cluster (its data is gone, as after a crash
// without persistence; a killed master rejoins as a replica of the node
// that replaced it). The cluster bus of each node listens on a free port
// picked for it (--cluster-port), not on port+10000.
type Cluster struct {
	// Nodes are the nodes in start order. redis-cli decides which start as
	// masters; use MasterFor and Masters rather than positions.
	Nodes []*Server

	masters, replicas int
	dirs              map[*Server]string // node -> dir with nodes.conf and redis.log

	mu    sync.Mutex
	kills []clusterKill // masters killed by KillMaster, oldest first
	once  sync.Once
}

// clusterKill records a master killed by KillMaster and the slots it served.
type clusterKill struct {
	node  *Server
	at    time.Time
	slots [][2]int
}

// StartCluster starts a cluster of masters masters with replicasPerMaster
// replicas each, for one test, and stops it when the test ends.
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	tb.Helper()
	c, err := NewCluster(masters, replicasPerMaster)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster starts masters*(1+replicasPerMaster) redis-server processes
// in cluster mode, joins them with redis-cli --cluster create, and waits
// until every node sees a healthy cluster: cluster_state:ok, all 16384
// slots assigned, every node known and connected, and every replica's
// link to its master up. The caller closes the cluster. Redis Cluster (and
// redis-cli) needs at least 3 masters.
func NewCluster(masters, replicasPerMaster int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("starting redis cluster: need at least 3 masters, got %d", masters)
	}
	if replicasPerMaster < 0 {
		return nil, fmt.Errorf("starting redis cluster: negative replicas per master (%d)", replicasPerMaster)
	}
	cli, err := cliBinary()
	if err != nil {
		return nil, err
	}
	c := &Cluster{masters: masters, replicas: replicasPerMaster, dirs: map[*Server]string{}}
	total := masters * (1 + replicasPerMaster)
	for i := 0; i < total; i++ {
		s, dir, err := startClusterNode()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("starting redis cluster node %d of %d: %w", i+1, total, err)
		}
		c.Nodes = append(c.Nodes, s)
		c.dirs[s] = dir
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	cancel()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("starting redis cluster: %s %s: %w\n%s",
			cli, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}

	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		why := c.notReady()
		if why == "" {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Close()
			return nil, fmt.Errorf("starting redis cluster: not healthy %v after redis-cli --cluster create: %s\nredis-cli output:\n%s",
				clusterReadyTimeout, why, strings.TrimSpace(string(out)))
		}
		time.Sleep(pollInterval)
	}
}

// cliBinary returns the path of redis-cli: $TOLLGATE_REDIS_CLI, else the
// redis-cli next to redis-server, else the one in PATH.
func cliBinary() (string, error) {
	if p := os.Getenv("TOLLGATE_REDIS_CLI"); p != "" {
		return p, nil
	}
	if srv, err := binary(); err == nil {
		if p := filepath.Join(filepath.Dir(srv), "redis-cli"); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", errors.New("redis-cli not found in PATH: Tollgate's cluster tests create the cluster with it; " +
			"install it (Debian: apt-get install redis-tools) or set TOLLGATE_REDIS_CLI")
	}
	return p, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// startClusterNode starts one empty cluster-mode node, retrying with new
// ports when the cluster bus port turns out to be taken.
func startClusterNode() (*Server, string, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		dir, err := os.MkdirTemp("", "tollgate-cluster-node-")
		if err != nil {
			return nil, "", err
		}
		busPort, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, "", err
		}
		logFile := filepath.Join(dir, "redis.log")
		s, err := StartServer(
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(busPort),
			// A node that answers no ping for this long is failed over.
			// 1 s was too short for a loaded machine: a starved node
			// was failed over and the cluster went CLUSTERDOWN under
			// tests that kill no node. 3 s still fails a killed master
			// over in about 6 s.
			"--cluster-node-timeout", "3000",
			"--cluster-replica-validity-factor", "0",
			"--cluster-require-full-coverage", "no",
			"--appendonly", "no",
			// Replicas would otherwise wait 5 s for a diskless full sync.
			"--repl-diskless-sync-delay", "0",
			"--loglevel", "notice",
			"--logfile", logFile,
		)
		if err == nil {
			return s, dir, nil
		}
		lastErr = fmt.Errorf("%w (cluster bus port %d); log:\n%s", err, busPort, tailFile(logFile, 10))
		os.RemoveAll(dir)
	}
	return nil, "", lastErr
}

// tailFile returns the last n lines of a file, or a note why it cannot.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Addrs returns the addresses of all nodes, in start order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Close kills every node and removes their directories.
func (c *Cluster) Close() {
	c.once.Do(func() {
		for _, s := range c.Nodes {
			s.Close()
		}
		for _, dir := range c.dirs {
			os.RemoveAll(dir)
		}
	})
}

// Client returns a new rueidis cluster client (no client-side cache) seeded
// with every node's address; the caller closes it.
func (c *Cluster) Client() (rueidis.Client, error) {
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("connecting to redis cluster at %s: %w", strings.Join(c.Addrs(), ","), err)
	}
	return cl, nil
}

// NewClient returns a new rueidis cluster client, closed when the test ends.
func (c *Cluster) NewClient(tb testing.TB) rueidis.Client {
	return closedAtEnd(tb)(c.Client())
}

// LogTail returns the last n lines of a node's log file.
func (c *Cluster) LogTail(s *Server, n int) string {
	dir, ok := c.dirs[s]
	if !ok {
		return "(not a node of this cluster)"
	}
	return tailFile(filepath.Join(dir, "redis.log"), n)
}
