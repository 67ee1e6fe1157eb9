package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/policy"
)

// slowConfig is the quickstart policy with its upstreams pointed at
// upstream, 127.0.0.1 its only trusted proxy (so 127.0.0.2 and up are
// ordinary clients), and extra settings under listeners:.
func slowConfig(t *testing.T, upstream string, listeners ...string) *policy.Policy {
	t.Helper()
	extra := ""
	for _, l := range listeners {
		extra += "  " + l + "\n"
	}
	return quickstart(t, upstream, `trusted_proxies: [127.0.0.1/32, "::1/128"]`, "trusted_proxies: [127.0.0.1/32]",
		"  admin: 127.0.0.1:9090\n", "  admin: 127.0.0.1:9090\n"+extra)
}

// readingUpstream is a real service that reads the whole request body
// before it answers, as services do. GET /api/big answers 64 MiB.
func readingUpstream(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return // the gateway gave up on the body
		}
		if r.URL.Path == "/api/big" {
			chunk := make([]byte, 64<<10)
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		fmt.Fprintf(w, "read %d bytes\n", n)
	}))
	t.Cleanup(s.Close)
	return s
}

func hostPort(url string) string { return strings.TrimPrefix(url, "http://") }

// dialFrom connects to addr from the loopback address src (every
// 127.0.0.0/8 address is this machine on Linux). It gives a connection
// 15 s: a gateway starved of CPU under an attack accepts late, and a SYN
// its full backlog dropped is sent again after 1, 3 and 7 s.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 15 * time.Second}
	return d.Dial("tcp", addr)
}

// slowOutcome is how one slow connection ended.
type slowOutcome struct {
	status   int           // the response's status; 0 if none came
	lifetime time.Duration // from connecting to the close
	held     bool          // still open when the client gave up
}

// refused reports a connection the gateway closed unanswered well before
// the body deadline: it refused it.
func (o slowOutcome) refused(deadline time.Duration) bool {
	return !o.held && o.status == 0 && o.lifetime < deadline*8/10
}

// dribble sends req (a request head, and perhaps the start of its body)
// from src, then one more byte every interval until the gateway closes the
// connection or giveUp passes. A connection reset while connecting (the
// gateway accepted it and closed it at once) is an outcome, not an error.
// Whether giveUp passed is asked only after a read found the connection
// still open: a client starved of CPU for longer than giveUp (a loaded
// machine) finds a connection the gateway closed meanwhile closed, not
// held. Once an answer's head has come (a route that answers before it
// reads the body), nothing more is sent: the gateway still waits for the
// rest until the body deadline, and then closes a connection with
// nothing unread, so that a client slow to read (starved of CPU) still
// finds the answer, which a reset for bytes unread would have discarded.
func dribble(src, addr, req string, every, giveUp time.Duration) (slowOutcome, error) {
	start := time.Now()
	c, err := dialFrom(src, addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return slowOutcome{lifetime: time.Since(start)}, nil
	}
	if err != nil {
		return slowOutcome{}, err
	}
	defer c.Close()
	var got []byte
	buf := make([]byte, 4096)
	_, werr := io.WriteString(c, req)
	for werr == nil {
		c.SetReadDeadline(time.Now().Add(every))
		n, err := c.Read(buf)
		if len(got) < 64<<10 {
			got = append(got, buf[:n]...)
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			if time.Since(start) > giveUp {
				return slowOutcome{status: status(got), lifetime: time.Since(start), held: true}, nil
			}
			if status(got) == 0 {
				_, werr = io.WriteString(c, " ")
			}
		default: // EOF or reset: the gateway closed the connection
			return slowOutcome{status: status(got), lifetime: time.Since(start)}, nil
		}
	}
	// The write failed: the gateway closed (or reset) the connection.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, _ := c.Read(buf)
	got = append(got, buf[:n]...)
	return slowOutcome{status: status(got), lifetime: time.Since(start)}, nil
}

// status parses the status code of a response head, 0 if there is none.
func status(b []byte) int {
	s, ok := strings.CutPrefix(string(b), "HTTP/1.1 ")
	if !ok || len(s) < 3 {
		return 0
	}
	n, _ := strconv.Atoi(s[:3])
	return n
}

// slowPost is the head of a POST whose body is declared as 1,000 bytes,
// and its first byte.
func slowPost(path string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
}

// scrape returns one sample of the admin /metrics (0 if absent), without
// failing the test, for use off the test goroutine.
func scrape(c *http.Client, admin, name string) (float64, error) {
	resp, err := c.Get(admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// clientFrom is an HTTP client that opens a fresh connection from src for
// every request.
func clientFrom(src string) *http.Client {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

// attack is what the attacking process is told to do.
type attack struct {
	Addr        string        // the gateway's public listener
	Sources     []string      // the addresses it attacks from
	PerSource   int           // connections each source tries to hold
	For         time.Duration // how long it goes on
	BodyTimeout time.Duration // the gateway's, to tell refusals from cuts
}

// attackReport is what it saw.
type attackReport struct {
	Refused, Cut, Held, DialErrs int
	DialErr                      string
	Longest                      time.Duration // the longest a cut connection lived
	Statuses                     map[int]int   // of the cut connections
	Took                         time.Duration
}

func (r attackReport) attempts() int { return r.Refused + r.Cut + r.Held + r.DialErrs }

// giveUp is how long after connecting a slow connection counts as held:
// 30 times the body deadline. The deadline runs from when the gateway
// reads the request, which a gateway starved of CPU does late: beside
// stress-ng a connection waited in the listener's backlog and the cut
// came up to 13 s after the connect. Only a connection the gateway never
// cuts waits that long, so the attack takes no longer for it.
func (a attack) giveUp() time.Duration { return 30 * a.BodyTimeout }

// run makes the attack: each source tries to hold PerSource connections
// that send a request's headers and then dribble its body at 4 bytes a
// second, half on the login route (whose guard reads the body before any
// check), half on a proxied route. It ramps up over its first second; a
// connection that got in is re-opened as soon as it is closed, to hold its
// place, and one refused tries again a second or two later. Each makes at
// least one attempt, however starved of CPU the machine.
func (a attack) run() attackReport {
	t0 := time.Now()
	ctx, stop := context.WithTimeout(context.Background(), a.For)
	defer stop()
	var (
		mu  sync.Mutex
		rep = attackReport{Statuses: map[int]int{}}
		wg  sync.WaitGroup
	)
	for _, src := range a.Sources {
		for i := range a.PerSource {
			path := "/login"
			if i%2 == 1 {
				path = "/api/upload"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(rand.N(time.Second))
				for first := true; first || ctx.Err() == nil; first = false {
					o, err := dribble(src, a.Addr, slowPost(path), 250*time.Millisecond, a.giveUp())
					mu.Lock()
					switch {
					case err != nil:
						rep.DialErrs++
						rep.DialErr = err.Error()
					case o.held:
						rep.Held++
					case o.refused(a.BodyTimeout):
						rep.Refused++
					default:
						rep.Cut++
						rep.Longest = max(rep.Longest, o.lifetime)
						rep.Statuses[o.status]++
					}
					mu.Unlock()
					if err != nil || o.refused(a.BodyTimeout) {
						select {
						case <-time.After(time.Second + rand.N(time.Second)):
						case <-ctx.Done():
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	rep.Took = time.Since(t0)
	return rep
}

// attackEnv carries an attack to the attacking process.
const attackEnv = "TOLLGATE_TEST_ATTACK"

// The attacking process is this test binary again: it attacks and prints
// its report instead of running tests.
func init() {
	if spec := os.Getenv(attackEnv); spec != "" {
		var a attack
		if err := json.Unmarshal([]byte(spec), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		json.NewEncoder(os.Stdout).Encode(a.run())
		os.Exit(0)
	}
}

// startAttack runs a in a process of its own, as an attacker's machine
// would: its CPU is not the gateway's (it is niced, so that on a small
// test machine it does not take the gateway's share either). It returns a
// channel closed when the attack ends and a function that returns the
// attacker's report.
func startAttack(t *testing.T, a attack) (<-chan struct{}, func() attackReport) {
	t.Helper()
	spec, _ := json.Marshal(a)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), attackEnv+"="+string(spec))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 10)
	done := make(chan struct{})
	var werr error
	go func() {
		werr = cmd.Wait()
		close(done)
	}()
	return done, func() attackReport {
		t.Helper()
		<-done
		if werr != nil {
			t.Fatalf("attacking process: %v: %s", werr, errb.String())
		}
		var rep attackReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("attacking process's report %q: %v (%s)", out.String(), err, errb.String())
		}
		return rep
	}
}

// TestSlowBodiesFromTwoAddresses is the reported attack: two client
// addresses each try to hold many connections that send a request's
// headers and then dribble its body (the report had 2,000 each; 500, five
// times the cap, show the cap as well, for a quarter of the CPU). The
// gateway must keep each address to its connection cap, close every slow
// body at its deadline, and answer ordinary clients (new connections from
// a third address) and the admin /healthz throughout, not held up behind
// the slow bodies.
func TestSlowBodiesFromTwoAddresses(t *testing.T) {
	const (
		perAddr     = 500
		capPerAddr  = 100
		bodyTimeout = time.Second
		attackFor   = 3 * time.Second
	)
	up := readingUpstream(t)
	g := start(t, slowConfig(t, up.URL, "body_timeout: 1s", "max_conns_per_client: 100"), "")
	ordinary := clientFrom("127.0.0.4")
	admin := clientFrom("127.0.0.1")
	request := func(c *http.Client, url string, header ...string) (int, time.Duration, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(t0), nil
	}

	// Ordinary latency before the attack.
	var before []time.Duration
	for range 40 {
		code, d, err := request(ordinary, g.public+"/api/ordinary", "X-API-Key", proKey)
		if err != nil || code != http.StatusOK {
			t.Fatalf("before the attack: %d %v", code, err)
		}
		before = append(before, d)
	}

	attacking, report := startAttack(t, attack{Addr: hostPort(g.public), Sources: []string{"127.0.0.2", "127.0.0.3"}, PerSource: perAddr,
		For: attackFor, BodyTimeout: bodyTimeout})

	// Meanwhile: ordinary requests, /healthz, and the open-connection gauge.
	time.Sleep(300 * time.Millisecond)
	var (
		mu             sync.Mutex
		during, health []time.Duration
		failures       []string
		maxOpen        float64
		wg             sync.WaitGroup
	)
	on := func() bool {
		select {
		case <-attacking:
			return false
		default:
			return true
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for on() {
			code, d, err := request(admin, g.admin+"/healthz")
			mu.Lock()
			if err != nil || code != http.StatusOK {
				failures = append(failures, fmt.Sprintf("/healthz: %d %v", code, err))
			} else {
				health = append(health, d)
			}
			mu.Unlock()
			if v, err := scrape(admin, g.admin, `tollgate_connections_open{listener="public"}`); err == nil {
				mu.Lock()
				maxOpen = max(maxOpen, v)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for on() {
			code, d, err := request(ordinary, g.public+"/api/ordinary", "X-API-Key", proKey)
			mu.Lock()
			if err != nil || code != http.StatusOK {
				failures = append(failures, fmt.Sprintf("ordinary request: %d %v", code, err))
			} else {
				during = append(during, d)
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	rep := report()

	refusedMetric := metric(t, g, `tollgate_connections_refused_total{listener="public",reason="per_client"}`)
	t.Logf("slow connections: %d attempts in %v: %d refused at once (the gateway counted %v), %d closed at the body deadline (longest %v; statuses %v), %d held open, %d dial errors (%s)",
		rep.attempts(), rep.Took.Round(time.Millisecond), rep.Refused, refusedMetric, rep.Cut, rep.Longest.Round(time.Millisecond), rep.Statuses,
		rep.Held, rep.DialErrs, rep.DialErr)
	t.Logf("ordinary requests: before p50 %v p99 %v (n=%d); during p50 %v p99 %v max %v (n=%d); /healthz p50 %v p99 %v (n=%d); max open public connections %v",
		quantile(before, .5), quantile(before, .99), len(before), quantile(during, .5), quantile(during, .99), quantile(during, 1), len(during),
		quantile(health, .5), quantile(health, .99), len(health), maxOpen)

	for i, f := range failures {
		if i < 5 {
			t.Error(f)
		}
	}
	if rep.DialErrs > 0 {
		t.Errorf("%d connections could not even connect (%s): the listener's backlog filled", rep.DialErrs, rep.DialErr)
	}
	// Without a body deadline every slow connection that is let in stays
	// open (hundreds); with one, a rare connection may still outlive the
	// slack when -race and the other packages' tests share the two cores
	// (with 5 s of it: 1 of 4,435 in the whole suite; 18 of 1,003 beside
	// stress-ng, and with 10 s 10 of 1,000).
	if rep.Held > max(1, rep.attempts()/500) {
		t.Errorf("%d of %d slow connections were still open %v after connecting: no body deadline", rep.Held, rep.attempts(), attack{BodyTimeout: bodyTimeout}.giveUp())
	}
	if rep.attempts() < 2*perAddr || rep.Cut == 0 {
		t.Errorf("the attack made %d attempts, %d of them let in; want at least %d", rep.attempts(), rep.Cut, 2*perAddr)
	}
	// Each address holds at most capPerAddr connections at a time, and
	// each lives about bodyTimeout, so all but a few hundred of the
	// attempts must have been refused by the gateway.
	if let := 2 * capPerAddr * (int(rep.Took/bodyTimeout) + 1); refusedMetric < float64(rep.attempts()-let) {
		t.Errorf("the gateway refused %v connections over the per-client cap, want at least %d", refusedMetric, rep.attempts()-let)
	}
	if maxOpen > 2*capPerAddr+4 {
		t.Errorf("up to %v public connections open at once, want at most %d", maxOpen, 2*capPerAddr+4)
	}
	// Every ordinary request and health check was answered (failures,
	// above), and they went on throughout: a few at least while the
	// attack lasted (at least 3 s; at their pace, dozens).
	if len(during) < 5 || len(health) < 3 {
		t.Errorf("only %d ordinary requests and %d health checks answered during the attack", len(during), len(health))
	} else {
		// What the attack could do to them is hold them up behind the
		// slow bodies, up to the body deadline. Time is the property; the
		// median is held to half the deadline, over 10 times what it is
		// on a loaded machine (a few ms; the tail, which one CPU spike
		// decides, is only logged).
		if p := quantile(during, .5); p > bodyTimeout/2 {
			t.Errorf("ordinary requests during the attack: p50 %v (before: %v), want under %v", p, quantile(before, .5), bodyTimeout/2)
		}
		if p := quantile(health, .5); p > bodyTimeout/2 {
			t.Errorf("/healthz during the attack: p50 %v, want under %v", p, bodyTimeout/2)
		}
	}
	if n := metric(t, g, `tollgate_connection_timeouts_total{listener="public",phase="body"}`); n == 0 {
		t.Error("no body timeouts counted")
	}
	waitFor(t, "public connections back to 0", 10*time.Second, func() bool {
		v, err := scrape(admin, g.admin, `tollgate_connections_open{listener="public"}`)
		return err == nil && v == 0
	})
	if strings.Contains(g.logs.String(), "127.0.0.2") || strings.Contains(g.logs.String(), "127.0.0.3") {
		t.Error("a client address reached the logs")
	}
	if !strings.Contains(g.logs.String(), "connections refused") {
		t.Error("refusals were not logged")
	}
	if n := strings.Count(g.logs.String(), "connections refused"); n > int(rep.Took/time.Second)+2 {
		t.Errorf("%d refusal log lines in %v: not sampled", n, rep.Took)
	}
}

// TestSlowClientTimeouts: every way of holding a connection open slowly is
// cut off at its deadline: a body dribbled on any route (proxied, the
// login guard, no route, refused by a limit, the admin listener), headers
// dribbled, a keep-alive connection left idle, and a response not read.
//
// Time is the property: each deadline is 1 s, and a connection must close
// after it (a lower bound, which load only helps to meet) and within 10
// times it (a connection never cut is held until the client gives up at
// 20 s; the defaults, 10 s and more, are at or past the bound). The cases
// only wait, each from its own address: they run in parallel. The
// gateway's clock stands still: the rate-limited case spends the
// anonymous plan (20 a minute, one back every 3 s), which on the real
// clock gave one back while a loaded machine sent the 25 requests, and
// its slow request was admitted.
func TestSlowClientTimeouts(t *testing.T) {
	t.Parallel()
	const (
		deadline = time.Second
		within   = 10 * deadline
		every    = deadline / 5 // a byte this often: the connection is never idle
		giveUp   = 2 * within
	)
	up := readingUpstream(t)
	g := startStill(t, slowConfig(t, up.URL, "body_timeout: 1s", "header_timeout: 1s", "idle_timeout: 1s", "send_timeout: 1s"), "")
	pub, adm := hostPort(g.public), hostPort(g.admin)
	cut := func(t *testing.T, what string, o slowOutcome, least time.Duration) {
		t.Helper()
		if o.held || o.lifetime > within || o.lifetime < least {
			t.Fatalf("%s: %+v; want the connection closed after %v, within %v", what, o, least, within)
		}
	}

	bodies := []struct {
		name, src, addr, req string
		status               int
	}{
		// The login guard reads the body before anything else; what it
		// answers when the body times out is its own affair (net/http has
		// cancelled the request's context by then), so any status will do.
		{"login", "127.0.0.2", pub, slowPost("/login"), 0},
		{"proxied", "127.0.0.3", pub, slowPost("/api/upload"), http.StatusRequestTimeout},
		{"no route", "127.0.0.4", pub, slowPost("/nowhere"), http.StatusNotFound},
		// Refused before the body is read: an upload, which no framework
		// reads a credential from (a JSON or form body is read first, for
		// the access_token it may hold: then the timeout answers).
		{"rate limited", "127.0.0.5", pub, strings.Replace(slowPost("/api/upload"), "application/json", "application/octet-stream", 1), http.StatusTooManyRequests},
		// The admin listener bounds the whole request: headers and body.
		{"admin", "127.0.0.1", adm, strings.Replace(slowPost("/keys/k9"), "POST", "PUT", 1), 0},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range bodies {
			t.Run("body/"+tt.name, func(t *testing.T) {
				t.Parallel()
				if tt.status == http.StatusTooManyRequests {
					for range 25 { // spend the anonymous plan's 20 a minute
						c := clientFrom(tt.src)
						if resp, err := c.Get(g.public + "/api/x"); err == nil {
							resp.Body.Close()
						}
					}
				}
				o, err := dribble(tt.src, tt.addr, tt.req, every, giveUp)
				if err != nil {
					t.Fatal(err)
				}
				cut(t, "dribbled body", o, deadline*9/10)
				if tt.status != 0 && o.status != tt.status {
					t.Errorf("status %d, want %d", o.status, tt.status)
				}
			})
		}

		t.Run("headers", func(t *testing.T) {
			t.Parallel()
			o, err := dribble("127.0.0.6", pub, "GET /api/x HTTP/1.1\r\nHost: tollgate\r\nX-Slow: ", every, giveUp)
			if err != nil {
				t.Fatal(err)
			}
			cut(t, "dribbled headers", o, deadline*9/10)
		})

		t.Run("idle", func(t *testing.T) {
			t.Parallel()
			c, err := dialFrom("127.0.0.7", pub)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			// The gateway's idle time runs from its answer, which is
			// after the request was sent and before it was read here.
			sent := time.Now()
			io.WriteString(c, "GET /api/x HTTP/1.1\r\nHost: tollgate\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			read := time.Now()
			c.SetReadDeadline(time.Now().Add(giveUp))
			if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("idle keep-alive connection: %v", err)
			}
			if d, idle := time.Since(sent), time.Since(read); d < deadline*9/10 || idle > within {
				t.Fatalf("idle keep-alive connection closed %v after the request, %v after the answer was read; want after %v, within %v", d, idle, deadline, within)
			}
		})

		t.Run("unread response", func(t *testing.T) {
			t.Parallel()
			c, err := dialFrom("127.0.0.8", pub)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET /api/big HTTP/1.1\r\nHost: tollgate\r\n\r\n")
			// Read nothing: the gateway's writes stall, until it gives up
			// on this client (the only one here that reads nothing).
			waitFor(t, "the stalled response cut off", 20*time.Second, func() bool {
				return metric(t, g, `tollgate_connection_timeouts_total{listener="public",phase="send"}`) >= 1
			})
			c.SetReadDeadline(time.Now().Add(giveUp))
			n, err := io.Copy(io.Discard, c)
			if errors.Is(err, os.ErrDeadlineExceeded) || n >= 64<<20 {
				t.Fatalf("a client that reads nothing got %d bytes (%v): the response was never cut off", n, err)
			}
		})
	})

	took := waitFor(t, "public connections back to 0", 10*time.Second, func() bool {
		return metric(t, g, `tollgate_connections_open{listener="public"}`) == 0
	})
	t.Logf("public connections back to 0 %v after the cases", took)
}

// TestShapedBodiesArriveInTime: a request the gateway holds to shape it
// (up to max_delay) sent its body on time, all of it, while it waited; its
// body deadline runs from when the gateway reads it, so it is not
// answered 408.
func TestShapedBodiesArriveInTime(t *testing.T) {
	t.Parallel() // its own gateway; it mostly waits out the delays
	up := readingUpstream(t)
	// On a still clock the twelve are decided at one instant however the
	// machine schedules them, so the last is held 1.1 s, past the body
	// deadline (on the real clock, a loaded machine spread them out and
	// held none that long).
	g := startStill(t, slowConfig(t, up.URL, "body_timeout: 500ms"), "")
	body := strings.Repeat("x", 256<<10)
	codes := make([]int, 12) // shaped to 10/s: the last waits 1.1 s
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", g.public+"/api/webhooks", strings.NewReader(body))
			req.Header.Set("X-API-Key", proKey)
			// An upload: a form, JSON or untyped POST body is read before
			// the decision instead, for the credential it may hold.
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("shaped request %d: %d, want 200 (statuses %v)", i, c, codes)
		}
	}
}
