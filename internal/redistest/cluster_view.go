package redistest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

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
