package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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
			"--cluster-node-timeout", "1000",
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

// nodeView is one node's view of the cluster.
type nodeView struct {
	node  *Server
	info  string         // CLUSTER INFO
	nodes []clusterEntry // CLUSTER NODES
	raw   string         // CLUSTER NODES, unparsed
}

// clusterEntry is one line of CLUSTER NODES.
type clusterEntry struct {
	id, addr, masterID, link string
	flags                    map[string]bool
	epoch                    int64
	slots                    [][2]int // inclusive ranges
}

func (e clusterEntry) serves(slot int) bool {
	return e.flags["master"] && slotsCover(e.slots, slot)
}

func slotsCover(ranges [][2]int, slot int) bool {
	for _, r := range ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes parses the reply of CLUSTER NODES.
func parseClusterNodes(raw string) ([]clusterEntry, error) {
	var out []clusterEntry
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		e := clusterEntry{id: f[0], addr: addr, masterID: f[3], link: f[7], flags: map[string]bool{}}
		for _, fl := range strings.Split(f[2], ",") {
			e.flags[fl] = true
		}
		e.epoch, _ = strconv.ParseInt(f[6], 10, 64)
		for _, tok := range f[8:] {
			if strings.HasPrefix(tok, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, isRange := strings.Cut(tok, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("malformed slot %q in CLUSTER NODES line %q", tok, line)
			}
			e.slots = append(e.slots, [2]int{a, b})
		}
		out = append(out, e)
	}
	return out, nil
}

// view reads one node's view; dead reports that the node did not accept a
// connection (killed).
func (c *Cluster) view(s *Server) (v nodeView, dead bool, err error) {
	r, err := query(s.Addr, []string{"CLUSTER", "INFO"}, []string{"CLUSTER", "NODES"})
	if err != nil {
		var dialErr *net.OpError
		if errors.As(err, &dialErr) && dialErr.Op == "dial" {
			return v, true, err
		}
		return v, false, err
	}
	info, err := asString(r[0])
	if err != nil {
		return v, false, fmt.Errorf("CLUSTER INFO: %w", err)
	}
	raw, err := asString(r[1])
	if err != nil {
		return v, false, fmt.Errorf("CLUSTER NODES: %w", err)
	}
	entries, err := parseClusterNodes(raw)
	if err != nil {
		return v, false, err
	}
	return nodeView{node: s, info: info, nodes: entries, raw: raw}, false, nil
}

// liveViews returns the views of every node that accepts connections, in
// start order. It fails when a live node answers badly or none is live.
func (c *Cluster) liveViews() ([]nodeView, error) {
	var views []nodeView
	for _, s := range c.Nodes {
		v, dead, err := c.view(s)
		if dead {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		views = append(views, v)
	}
	if len(views) == 0 {
		return nil, errors.New("no cluster node accepts connections")
	}
	return views, nil
}

// notReady returns why the freshly created cluster is not healthy yet, or "".
func (c *Cluster) notReady() string {
	total := len(c.Nodes)
	for _, s := range c.Nodes {
		r, err := query(s.Addr, []string{"CLUSTER", "INFO"}, []string{"CLUSTER", "NODES"}, []string{"INFO", "replication"})
		if err != nil {
			return fmt.Sprintf("node %s: %v", s.Addr, err)
		}
		info, err1 := asString(r[0])
		raw, err2 := asString(r[1])
		repl, err3 := asString(r[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Sprintf("node %s: %v", s.Addr, err)
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Sprintf("node %s: cluster_state is %q; CLUSTER INFO:\n%s", s.Addr, st, strings.TrimSpace(info))
		}
		for _, f := range []string{"cluster_slots_assigned", "cluster_slots_ok"} {
			if n := infoField(info, f); n != strconv.Itoa(clusterSlots) {
				return fmt.Sprintf("node %s: %s is %s, want %d; CLUSTER INFO:\n%s", s.Addr, f, n, clusterSlots, strings.TrimSpace(info))
			}
		}
		if n := infoField(info, "cluster_known_nodes"); n != strconv.Itoa(total) {
			return fmt.Sprintf("node %s: cluster_known_nodes is %s, want %d; CLUSTER INFO:\n%s", s.Addr, n, total, strings.TrimSpace(info))
		}
		entries, err := parseClusterNodes(raw)
		if err != nil {
			return fmt.Sprintf("node %s: %v", s.Addr, err)
		}
		masters, replicas := 0, 0
		for _, e := range entries {
			for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if e.flags[bad] {
					return fmt.Sprintf("node %s sees %s flagged %s; CLUSTER NODES:\n%s", s.Addr, e.addr, bad, strings.TrimSpace(raw))
				}
			}
			if e.link != "connected" {
				return fmt.Sprintf("node %s: link to %s is %s; CLUSTER NODES:\n%s", s.Addr, e.addr, e.link, strings.TrimSpace(raw))
			}
			switch {
			case e.flags["master"] && len(e.slots) > 0:
				masters++
			case e.flags["slave"] && e.masterID != "-":
				replicas++
			}
		}
		if masters != c.masters || replicas != c.masters*c.replicas {
			return fmt.Sprintf("node %s sees %d masters with slots and %d replicas, want %d and %d; CLUSTER NODES:\n%s",
				s.Addr, masters, replicas, c.masters, c.masters*c.replicas, strings.TrimSpace(raw))
		}
		if infoField(repl, "role") == "slave" {
			if infoField(repl, "master_link_status") != "up" || infoField(repl, "master_sync_in_progress") != "0" {
				return fmt.Sprintf("replica %s not in sync with its master; INFO replication:\n%s", s.Addr, strings.TrimSpace(repl))
			}
		}
	}
	return ""
}

// keySlot returns the hash slot of key, asking the first live node.
func (c *Cluster) keySlot(key string) (int, error) {
	var errs []error
	for _, s := range c.Nodes {
		v, err := query(s.Addr, []string{"CLUSTER", "KEYSLOT", key})
		if err == nil {
			if n, ok := v[0].(int64); ok {
				return int(n), nil
			}
			err = fmt.Errorf("unexpected reply %v", v[0])
		}
		errs = append(errs, fmt.Errorf("node %s: %w", s.Addr, err))
	}
	return 0, fmt.Errorf("CLUSTER KEYSLOT %q: %w", key, errors.Join(errs...))
}

// byAddr returns the node with the given address, or nil.
func (c *Cluster) byAddr(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// owner returns the master serving slot according to the live nodes: the
// claim with the highest config epoch wins, as in Redis Cluster.
func (c *Cluster) owner(slot int) (*Server, clusterEntry, error) {
	views, err := c.liveViews()
	if err != nil {
		return nil, clusterEntry{}, err
	}
	var best clusterEntry
	found := false
	for _, v := range views {
		for _, e := range v.nodes {
			if e.serves(slot) && (!found || e.epoch > best.epoch) {
				best, found = e, true
			}
		}
	}
	if !found {
		return nil, best, fmt.Errorf("no live node knows a master for slot %d; CLUSTER NODES of %s:\n%s",
			slot, views[0].node.Addr, strings.TrimSpace(views[0].raw))
	}
	s := c.byAddr(best.addr)
	if s == nil {
		return nil, best, fmt.Errorf("slot %d is served by %s, not a node of this cluster", slot, best.addr)
	}
	return s, best, nil
}

// MasterFor returns the master currently serving key's slot, as the live
// nodes see it. Between a master's death and the end of its failover, that
// is still the dead master.
func (c *Cluster) MasterFor(key string) (*Server, error) {
	slot, err := c.keySlot(key)
	if err != nil {
		return nil, err
	}
	s, _, err := c.owner(slot)
	if err != nil {
		return nil, fmt.Errorf("master for %q (slot %d): %w", key, slot, err)
	}
	return s, nil
}

// KillMaster SIGKILLs the master serving key's slot, as a crash would, and
// returns it. WaitForFailover then measures from the moment of the kill.
func (c *Cluster) KillMaster(key string) (*Server, error) {
	slot, err := c.keySlot(key)
	if err != nil {
		return nil, err
	}
	s, e, err := c.owner(slot)
	if err != nil {
		return nil, fmt.Errorf("killing master for %q (slot %d): %w", key, slot, err)
	}
	s.Kill()
	c.mu.Lock()
	c.kills = append(c.kills, clusterKill{node: s, at: time.Now(), slots: e.slots})
	c.mu.Unlock()
	return s, nil
}

// WaitForFailover polls the live nodes until key's slot is served by a
// live master other than the one KillMaster killed, every live node agrees
// on it and reports cluster_state:ok. It returns the new master and the
// time since the kill (since the call, if KillMaster did not kill the
// slot's master).
func (c *Cluster) WaitForFailover(key string, timeout time.Duration) (newMaster *Server, took time.Duration, err error) {
	start := time.Now()
	deadline := start.Add(timeout)
	slot, err := c.keySlot(key)
	if err != nil {
		return nil, time.Since(start), err
	}
	var old *Server
	c.mu.Lock()
	for i := len(c.kills) - 1; i >= 0; i-- {
		if slotsCover(c.kills[i].slots, slot) {
			old, start = c.kills[i].node, c.kills[i].at
			break
		}
	}
	c.mu.Unlock()
	for {
		s, why := c.failedOver(slot, old)
		if s != nil {
			return s, time.Since(start), nil
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range c.Nodes {
				if n != old {
					fmt.Fprintf(&logs, "\n--- log of %s:\n%s", n.Addr, c.LogTail(n, 8))
				}
			}
			return nil, time.Since(start), fmt.Errorf("no failover of slot %d (key %q) within %v: %s%s",
				slot, key, timeout, why, logs.String())
		}
		time.Sleep(pollInterval)
	}
}

// failedOver returns the new master of slot if the failover is complete,
// else nil and why not.
func (c *Cluster) failedOver(slot int, old *Server) (*Server, string) {
	views, err := c.liveViews()
	if err != nil {
		return nil, err.Error()
	}
	var owner *clusterEntry
	var ownerView nodeView
	for _, v := range views {
		if st := infoField(v.info, "cluster_state"); st != "ok" {
			return nil, fmt.Sprintf("node %s: cluster_state is %q; CLUSTER INFO:\n%s", v.node.Addr, st, strings.TrimSpace(v.info))
		}
		var mine *clusterEntry
		for i := range v.nodes {
			if v.nodes[i].serves(slot) {
				mine = &v.nodes[i]
			}
		}
		if mine == nil {
			return nil, fmt.Sprintf("node %s knows no master for slot %d; CLUSTER NODES:\n%s", v.node.Addr, slot, strings.TrimSpace(v.raw))
		}
		if owner == nil {
			owner, ownerView = mine, v
		} else if mine.addr != owner.addr {
			return nil, fmt.Sprintf("nodes disagree on slot %d: %s says %s, %s says %s; CLUSTER NODES of %s:\n%s",
				slot, ownerView.node.Addr, owner.addr, v.node.Addr, mine.addr, v.node.Addr, strings.TrimSpace(v.raw))
		}
	}
	s := c.byAddr(owner.addr)
	switch {
	case s == nil:
		return nil, fmt.Sprintf("slot %d is served by %s, not a node of this cluster", slot, owner.addr)
	case s == old:
		return nil, fmt.Sprintf("slot %d is still served by the killed master %s; CLUSTER NODES of %s:\n%s",
			slot, old.Addr, ownerView.node.Addr, strings.TrimSpace(ownerView.raw))
	}
	for _, v := range views {
		if v.node == s {
			return s, ""
		}
	}
	return nil, fmt.Sprintf("slot %d is served by %s, which does not accept connections; CLUSTER NODES of %s:\n%s",
		slot, s.Addr, ownerView.node.Addr, strings.TrimSpace(ownerView.raw))
}

// Masters returns the live nodes that are currently masters.
func (c *Cluster) Masters() ([]*Server, error) {
	var out []*Server
	for _, s := range c.Nodes {
		r, err := query(s.Addr, []string{"INFO", "replication"})
		if err != nil {
			var dialErr *net.OpError
			if errors.As(err, &dialErr) && dialErr.Op == "dial" {
				continue // killed
			}
			return nil, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		info, err := asString(r[0])
		if err != nil {
			return nil, fmt.Errorf("node %s: INFO replication: %w", s.Addr, err)
		}
		if infoField(info, "role") == "master" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no live master in the cluster")
	}
	return out, nil
}

// Keys returns the keys matching pattern on every live master, sorted.
func (c *Cluster) Keys(pattern string) ([]string, error) {
	return c.scan(context.Background(), pattern, false)
}

// KeysWithoutTTL returns the keys matching pattern that have no TTL, on
// every live master, sorted. It mirrors Server.KeysWithoutTTL.
func (c *Cluster) KeysWithoutTTL(ctx context.Context, pattern string) ([]string, error) {
	return c.scan(ctx, pattern, true)
}

func (c *Cluster) scan(ctx context.Context, pattern string, noTTLOnly bool) ([]string, error) {
	masters, err := c.Masters()
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, s := range masters {
		k, err := scanNode(ctx, s.Addr, pattern, noTTLOnly)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		keys = append(keys, k...)
	}
	sort.Strings(keys)
	return keys, nil
}

// scanNode scans one node's keyspace.
func scanNode(ctx context.Context, addr, pattern string, noTTLOnly bool) ([]string, error) {
	rc, err := dialResp(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var keys []string
	cursor := "0"
	for {
		r, err := rc.do(ctx, []string{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"})
		if err != nil {
			return nil, fmt.Errorf("scanning keys: %w", err)
		}
		arr, ok := r[0].([]any)
		if !ok || len(arr) != 2 {
			return nil, fmt.Errorf("scanning keys: unexpected reply %v", r[0])
		}
		next, _ := arr[0].(string)
		batch, _ := arr[1].([]any)
		var names []string
		for _, k := range batch {
			if s, ok := k.(string); ok {
				names = append(names, s)
			}
		}
		if noTTLOnly && len(names) > 0 {
			cmds := make([][]string, len(names))
			for i, k := range names {
				cmds[i] = []string{"PTTL", k}
			}
			ttls, err := rc.do(ctx, cmds...)
			if err != nil {
				return nil, fmt.Errorf("reading TTLs: %w", err)
			}
			for i, k := range names {
				if ttl, ok := ttls[i].(int64); !ok {
					return nil, fmt.Errorf("reading TTL of %q: %v", k, ttls[i])
				} else if ttl == -1 {
					keys = append(keys, k)
				}
			}
		} else if !noTTLOnly {
			keys = append(keys, names...)
		}
		if next == "0" || next == "" {
			return keys, nil
		}
		cursor = next
	}
}

// CommandCalls returns the sum over live masters of the calls counted in
// INFO commandstats for the given commands (e.g. "evalsha", "eval"; case
// does not matter; subcommands are named like "cluster|info").
func (c *Cluster) CommandCalls(cmds ...string) (int64, error) {
	masters, err := c.Masters()
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, cmd := range cmds {
		want[strings.ToLower(cmd)] = true
	}
	var total int64
	for _, s := range masters {
		r, err := query(s.Addr, []string{"INFO", "commandstats"})
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		info, err := asString(r[0])
		if err != nil {
			return 0, fmt.Errorf("node %s: INFO commandstats: %w", s.Addr, err)
		}
		n, err := commandCalls(info, want)
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", s.Addr, err)
		}
		total += n
	}
	return total, nil
}

// commandCalls sums calls= of the wanted cmdstat_ lines of INFO commandstats.
func commandCalls(info string, want map[string]bool) (int64, error) {
	var total int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, stats, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || !want[strings.TrimPrefix(name, "cmdstat_")] {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("malformed commandstats line %q", line)
				}
				total += n
			}
		}
	}
	return total, nil
}

// infoField returns the value of field in an INFO or CLUSTER INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// A minimal RESP2 client for administrative commands: one connection per
// helper call, explicit deadlines, no background goroutines, and no
// cluster or sentinel discovery (which rueidis would do on its own).

// respError is an error reply of Redis.
type respError string

func (e respError) Error() string { return string(e) }

type respConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialResp(ctx context.Context, addr string) (*respConn, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (rc *respConn) Close() { rc.c.Close() }

// do pipelines cmds and returns one reply per command; error replies are
// returned as respError values, not as err.
func (rc *respConn) do(ctx context.Context, cmds ...[]string) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(adminTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	rc.c.SetDeadline(deadline)
	for _, cmd := range cmds {
		fmt.Fprintf(rc.w, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(rc.w, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if err := rc.w.Flush(); err != nil {
		return nil, err
	}
	out := make([]any, len(cmds))
	for i := range cmds {
		v, err := readReply(rc.r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// query sends cmds to addr on a new connection and returns their replies.
// It fails on the first error reply.
func query(addr string, cmds ...[]string) ([]any, error) {
	rc, err := dialResp(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	out, err := rc.do(context.Background(), cmds...)
	if err != nil {
		return nil, err
	}
	for i, v := range out {
		if e, ok := v.(respError); ok {
			return nil, fmt.Errorf("%s: %w", strings.Join(cmds[i], " "), e)
		}
	}
	return out, nil
}

// readReply reads one RESP2 reply: string, int64, nil, []any or respError.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("malformed bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("malformed array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unsupported reply %q", line)
}

// asString returns a string reply, or the error it is.
func asString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case respError:
		return "", v
	}
	return "", fmt.Errorf("unexpected reply %v", v)
}
