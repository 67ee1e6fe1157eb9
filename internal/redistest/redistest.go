// Package redistest starts real redis-server processes for tests. Tollgate's
// tests never mock Redis: a test that needs it gets a private server on a
// free loopback port, and fails (never skips) when redis-server is missing.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Server is a redis-server process owned by a test.
type Server struct {
	Addr string // host:port on loopback

	bin   string
	port  int
	extra []string
	mu    sync.Mutex
	cmd   *exec.Cmd
	dir   string
	done  chan struct{}
	once  sync.Once
}

// binary returns the path of redis-server, or an error telling how to get it.
func binary() (string, error) {
	if p := os.Getenv("TOLLGATE_REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found in PATH: Tollgate's tests run a real Redis; " +
			"install it (Debian: apt-get install redis-server) or set TOLLGATE_REDIS_SERVER")
	}
	return p, nil
}

// StartServer starts a redis-server on a free loopback port with
// persistence off, extra arguments appended, and waits until it answers.
func StartServer(extra ...string) (*Server, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("starting redis: %w", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, port: port, extra: extra}
		if lastErr = s.launch(); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("starting redis: %w", lastErr)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the process on s.port and waits until it answers.
func (s *Server) launch() error {
	dir, err := os.MkdirTemp("", "tollgate-redis-")
	if err != nil {
		return err
	}
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning",
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	detach(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("running %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.dir, s.done = cmd, dir, done
	s.mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			os.RemoveAll(dir)
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(logs.String()))
		default:
		}
		if ping(s.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d did not answer within 10s", s.port)
}

// Kill stops the server abruptly (SIGKILL), as a crash would; its data is
// gone. Restart brings it back on the same port.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, dir, done := s.cmd, s.dir, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
	os.RemoveAll(dir)
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() error {
	s.Kill()
	return s.launch()
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// Close kills the server for good and removes its directory.
func (s *Server) Close() {
	s.once.Do(s.Kill)
}

// Start starts a server for one test and stops it when the test ends.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := StartServer(extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewClient returns a new rueidis client (own connections, no client-side
// cache) for the server, closed when the test ends.
func (s *Server) NewClient(tb testing.TB) rueidis.Client {
	return closedAtEnd(tb)(s.Client())
}

// Client returns a new rueidis client for the server; the caller closes it.
func (s *Server) Client() (rueidis.Client, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("connecting to redis at %s: %w", s.Addr, err)
	}
	return c, nil
}

// KeysWithoutTTL returns the keys matching pattern that have no TTL.
func (s *Server) KeysWithoutTTL(ctx context.Context, pattern string) ([]string, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var bad []string
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("scanning keys: %w", err)
		}
		for _, k := range e.Elements {
			ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				return nil, fmt.Errorf("reading TTL of %q: %w", k, err)
			}
			if ttl == -1 {
				bad = append(bad, k)
			}
		}
		if e.Cursor == 0 {
			return bad, nil
		}
		cursor = e.Cursor
	}
}

// Main runs a test binary around one shared server: it starts the server,
// stores it in *srv, runs the tests, and then fails the run if any key
// matching pattern was left without a TTL. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv, "rl:*")) }
func Main(m *testing.M, srv **Server, pattern string) int {
	s, err := StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	*srv = s
	code := m.Run()
	bad, err := s.KeysWithoutTTL(context.Background(), pattern)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "checking TTLs:", err)
		return 1
	case len(bad) > 0:
		fmt.Fprintf(os.Stderr, "FAIL: %d keys left without a TTL, e.g. %q\n", len(bad), bad[0])
		return 1
	}
	return code
}

// closedAtEnd returns a function that takes a client (or its error), fails
// tb on the error, and closes the client when the test ends.
func closedAtEnd(tb testing.TB) func(rueidis.Client, error) rueidis.Client {
	tb.Helper()
	return func(c rueidis.Client, err error) rueidis.Client {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(c.Close)
		return c
	}
}
