package redistest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
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

// sentinelReadyTimeout bounds how long NewSentinel waits for the replica to
// sync and for the sentinels to discover each other and the replica.
const sentinelReadyTimeout = 30 * time.Second

// Sentinel is a master, one replica and three Redis Sentinels monitoring
// them, owned by a test. The sentinels need 2 votes (quorum 2) and consider
// the master down after 1 s without an answer.
type Sentinel struct {
	MasterName string // "tollgate"

	master, replica *Server
	sentinels       []*sentinelProc
	dir             string
	once            sync.Once
}

// StartSentinel starts a sentinel setup for one test and stops it when the
// test ends.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s, err := NewSentinel()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewSentinel starts a master, a replica of it and three sentinels, and
// waits until the replica is in sync and every sentinel knows the master,
// the replica and the two other sentinels. The caller closes it.
func NewSentinel() (*Sentinel, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	s := &Sentinel{MasterName: "tollgate"}
	fail := func(err error) (*Sentinel, error) {
		s.Close()
		return nil, fmt.Errorf("starting redis sentinel setup: %w", err)
	}
	if s.dir, err = os.MkdirTemp("", "tollgate-sentinel-"); err != nil {
		return fail(err)
	}
	// Replicas would otherwise wait 5 s for a diskless full sync.
	if s.master, err = StartServer("--repl-diskless-sync-delay", "0"); err != nil {
		return fail(fmt.Errorf("master: %w", err))
	}
	if s.replica, err = StartServer("--repl-diskless-sync-delay", "0",
		"--replicaof", "127.0.0.1", strconv.Itoa(s.master.port)); err != nil {
		return fail(fmt.Errorf("replica: %w", err))
	}
	// Sentinels learn replicas from the master's INFO, which they read at
	// once on connecting and then only every 10 s: start them once the
	// replica is attached.
	if err := waitFor(sentinelReadyTimeout, func() string { return replicaNotReady(s.replica) }); err != nil {
		return fail(err)
	}
	for i := 1; i <= 3; i++ {
		p, err := startSentinelProc(bin, filepath.Join(s.dir, "sentinel"+strconv.Itoa(i)), s.MasterName, s.master.port)
		if err != nil {
			return fail(fmt.Errorf("sentinel %d: %w", i, err))
		}
		s.sentinels = append(s.sentinels, p)
	}
	if err := waitFor(sentinelReadyTimeout, s.notReady); err != nil {
		return fail(err)
	}
	return s, nil
}

// waitFor polls notReady until it returns "" or timeout passes.
func waitFor(timeout time.Duration, notReady func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		why := notReady()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %s", timeout, why)
		}
		time.Sleep(pollInterval)
	}
}

// replicaNotReady returns why a replica is not in sync with its master, or "".
func replicaNotReady(r *Server) string {
	v, err := query(r.Addr, []string{"INFO", "replication"})
	if err != nil {
		return fmt.Sprintf("replica %s: %v", r.Addr, err)
	}
	info, _ := v[0].(string)
	if infoField(info, "role") != "slave" || infoField(info, "master_link_status") != "up" ||
		infoField(info, "master_sync_in_progress") != "0" {
		return fmt.Sprintf("replica %s not in sync; INFO replication:\n%s", r.Addr, strings.TrimSpace(info))
	}
	return ""
}

// notReady returns why a sentinel does not yet see the whole setup, or "".
func (s *Sentinel) notReady() string {
	want := []string{"127.0.0.1", strconv.Itoa(s.master.port)}
	for _, p := range s.sentinels {
		if !p.alive() {
			return fmt.Sprintf("sentinel %s exited; output:\n%s", p.Addr, p.logs.String())
		}
		r, err := query(p.Addr,
			[]string{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName},
			[]string{"SENTINEL", "MASTER", s.MasterName},
			[]string{"SENTINEL", "REPLICAS", s.MasterName})
		if err != nil {
			return fmt.Sprintf("sentinel %s: %v", p.Addr, err)
		}
		if got := stringList(r[0]); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			return fmt.Sprintf("sentinel %s: master %q is at %v, want %v", p.Addr, s.MasterName, got, want)
		}
		m := fieldMap(r[1])
		if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return fmt.Sprintf("sentinel %s: SENTINEL MASTER %s: flags=%s num-slaves=%s num-other-sentinels=%s, want master, 1, 2",
				p.Addr, s.MasterName, m["flags"], m["num-slaves"], m["num-other-sentinels"])
		}
		reps, _ := r[2].([]any)
		if len(reps) != 1 {
			return fmt.Sprintf("sentinel %s: knows %d replicas, want 1", p.Addr, len(reps))
		}
		if rm := fieldMap(reps[0]); rm["flags"] != "slave" || rm["master-link-status"] != "ok" {
			return fmt.Sprintf("sentinel %s: replica %s:%s has flags=%s master-link-status=%s, want slave, ok",
				p.Addr, rm["ip"], rm["port"], rm["flags"], rm["master-link-status"])
		}
	}
	return ""
}

// stringList converts an array reply of strings.
func stringList(v any) []string {
	arr, _ := v.([]any)
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// fieldMap converts a flat array reply of field, value pairs.
func fieldMap(v any) map[string]string {
	l := stringList(v)
	m := make(map[string]string, len(l)/2)
	for i := 0; i+1 < len(l); i += 2 {
		m[l[i]] = l[i+1]
	}
	return m
}

// SentinelAddrs returns the addresses of the three sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		out[i] = p.Addr
	}
	return out
}

// Master returns the server that was master when the setup started.
func (s *Sentinel) Master() *Server { return s.master }

// Replica returns the server that was the replica when the setup started.
func (s *Sentinel) Replica() *Server { return s.replica }

// URL returns a rueidis URL that reaches the master through the sentinels:
// redis://<sentinel1>?addr=<sentinel2>&addr=<sentinel3>&master_set=tollgate
func (s *Sentinel) URL() string {
	addrs := s.SentinelAddrs()
	var b strings.Builder
	b.WriteString("redis://" + addrs[0] + "?")
	for _, a := range addrs[1:] {
		b.WriteString("addr=" + a + "&")
	}
	b.WriteString("master_set=" + url.QueryEscape(s.MasterName))
	return b.String()
}

// Client returns a new rueidis sentinel client (no client-side cache) for
// the master; the caller closes it.
func (s *Sentinel) Client() (rueidis.Client, error) {
	opt, err := rueidis.ParseURL(s.URL())
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", s.URL(), err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connecting to redis through sentinels %s: %w", strings.Join(s.SentinelAddrs(), ","), err)
	}
	return c, nil
}

// NewClient returns a new rueidis sentinel client, closed when the test ends.
func (s *Sentinel) NewClient(tb testing.TB) rueidis.Client {
	return closedAtEnd(tb)(s.Client())
}

// Close kills the sentinels (first, so they start no failover), the
// replica and the master, and removes their directories.
func (s *Sentinel) Close() {
	s.once.Do(func() {
		for _, p := range s.sentinels {
			p.kill()
		}
		if s.replica != nil {
			s.replica.Close()
		}
		if s.master != nil {
			s.master.Close()
		}
		if s.dir != "" {
			os.RemoveAll(s.dir)
		}
	})
}

// sentinelProc is a redis-server --sentinel process.
type sentinelProc struct {
	Addr string
	logs *SyncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startSentinelProc starts a sentinel on a free port with its config file
// in dir, retrying with another port if the one picked was taken.
func startSentinelProc(bin, dir, masterName string, masterPort int) (*sentinelProc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p := &sentinelProc{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), logs: &SyncBuffer{}}
		if lastErr = p.launch(bin, dir, masterName, port, masterPort); lastErr == nil {
			return p, nil
		}
	}
	return nil, lastErr
}

func (p *sentinelProc) launch(bin, dir, masterName string, port, masterPort int) error {
	// Sentinels rewrite their config file: write a fresh, writable one.
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %q
logfile ""
loglevel notice
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
`, port, dir, masterName, masterPort, masterName, masterName)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s --sentinel: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			p.kill()
			return fmt.Errorf("sentinel on port %d exited: %s", port, strings.TrimSpace(p.logs.String()))
		default:
		}
		if ping(p.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	return fmt.Errorf("sentinel on port %d did not answer within 10s: %s", port, strings.TrimSpace(p.logs.String()))
}

func (p *sentinelProc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the sentinel and waits for it to exit.
func (p *sentinelProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads: a
// server's or a test's log.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
