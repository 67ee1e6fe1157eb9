package gateway_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/policy"
)

var srv *redistest.Server

// TestMain runs the tests around one shared Redis (srv). The tests that
// call t.Parallel share none of it (no srv, no environment, a gateway of
// their own each) and mostly wait: for a deadline to fire, a browser's
// time budget (which Chromium spends in real time), a body deadline.
// -parallel defaults to GOMAXPROCS, 2 on the machines the suite must
// pass on, which leaves them waiting in turn with the CPU idle; unless
// -parallel is given, they run up to parallelTests at once.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
	os.Exit(redistest.Main(m, &srv, "rl:*"))
}

// parallelTests is how many t.Parallel tests run at once by default.
const parallelTests = 8

const (
	freeKey = fixture.FreeKey
	proKey  = fixture.ProKey
)

// config is the quickstart policy with its upstreams pointed at upstream
// and the given trusted proxies.
func config(t *testing.T, upstream string, trusted string) *policy.Policy {
	t.Helper()
	return quickstart(t, upstream, fixture.Trusting(trusted)...)
}

// quickstart is examples/quickstart.yaml with its upstreams pointed at
// upstream and edits applied (fixture.QuickstartTo).
var quickstart = fixture.QuickstartTo

// upstream is a real HTTP server that counts what reaches it.
type upstream struct {
	*httptest.Server
	hits  atomic.Int64
	delay time.Duration
	mu    sync.Mutex
	last  http.Header
	uri   string // the last request's target, as it came
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.last = r.Header.Clone()
		u.uri = r.RequestURI
		u.mu.Unlock()
		if u.delay > 0 {
			select {
			case <-time.After(u.delay):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

// running is a gateway serving on loopback.
type running struct {
	g             *gateway.Gateway
	public, admin string
	logs          *fixture.SyncBuffer
	cancel        context.CancelFunc
	done          chan error
}

func start(t *testing.T, p *policy.Policy, redisURL string) *running {
	t.Helper()
	r := startClock(t, p, redisURL, nil)
	if redisURL != "" {
		r.waitReady(t)
	}
	return r
}

// stillTime is the time on startStill's clock.
var stillTime = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)

// startStill starts a gateway whose clock stands still at noon in the
// quickstart's zone (05:00 UTC) on a fixed day, for tests that count
// against fixed windows or calendar quotas and need no time to pass. On
// the real clock such a test fails whenever a window's boundary falls
// within it: the top of a minute, midnight UTC for a period of 1d, local
// midnight (17:00 UTC) for the free plan's daily quota. A still clock
// crosses none, whenever the test runs. Its decisions carry an explicit
// time, so on Redis too they do not follow Redis' clock.
// Tokens it is to accept are issued at stillTime: it verifies them on
// its clock.
func startStill(t *testing.T, p *policy.Policy, redisURL string) *running {
	t.Helper()
	r := startClock(t, p, redisURL, func() time.Time { return stillTime })
	if redisURL != "" {
		r.waitReady(t)
	}
	return r
}

// zoneAtNoon names a fixed-offset zone in which it is now between 11:00
// and 13:00, for tests on the real clock that must not see a calendar
// quota reset: its midnight is at least 11 hours away.
func zoneAtNoon() string {
	off := 12 - time.Now().UTC().Hour() // -11 … 12: within Etc/GMT's -12 … +14
	switch {
	case off == 0:
		return "Etc/GMT"
	case off > 0:
		return fmt.Sprintf("Etc/GMT-%d", off) // POSIX signs: Etc/GMT-7 is UTC+7
	default:
		return fmt.Sprintf("Etc/GMT+%d", -off)
	}
}

// startNoWait starts a gateway without waiting for its store.
func startNoWait(t *testing.T, p *policy.Policy, redisURL string) *running {
	return startClock(t, p, redisURL, nil)
}

// Store deadlines. A gateway the harness starts on Redis (start,
// startStill, startNoWait, startClock, startWith) gets the generous
// deadline testenv.StoreTimeout, written into its policy: its test tests
// what is decided, and the deadline the quickstart states and policy.Parse
// fills in (20 ms, the production default) is missed by a sound Redis on
// a loaded machine, which sends the decision to the fallback the test does
// not expect. A test of the deadline itself (Redis killed, paused or slow)
// says so with withStoreDeadline, and the harness keeps what it set.
var deadlineTests sync.Map // *policy.Policy → true: withStoreDeadline's

// withStoreDeadline sets p's store deadline to d (testenv.ShortStoreTimeout
// for the production default), for a test of the deadline: the harness
// keeps it instead of giving testenv.StoreTimeout.
func withStoreDeadline(p *policy.Policy, d time.Duration) *policy.Policy {
	p.Store.Timeout = d
	deadlineTests.Store(p, true)
	return p
}

// giveStoreDeadline gives p the generous store deadline when the gateway
// will decide on Redis, unless p's test marked it withStoreDeadline. It
// writes p only when the deadline changes, so that a second gateway on
// the same policy does not write what the first one reads.
func giveStoreDeadline(p *policy.Policy, redisURL string) {
	if redisURL == "" && p.Store.Type != "redis" {
		return // the memory store has no deadline
	}
	if _, kept := deadlineTests.Load(p); kept || p.Store.Timeout == testenv.StoreTimeout {
		return
	}
	p.Store.Timeout = testenv.StoreTimeout
}

// startClock starts a gateway whose decisions use clock (nil: the store's),
// with its options changed by each of with.
func startClock(t *testing.T, p *policy.Policy, redisURL string, clock func() time.Time, with ...func(*gateway.Options)) *running {
	t.Helper()
	giveStoreDeadline(p, redisURL)
	logs := &fixture.SyncBuffer{}
	opts := gateway.Options{Policy: p, RedisURL: redisURL, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		ShutdownTimeout: 5 * time.Second, Clock: clock}
	for _, f := range with {
		f(&opts)
	}
	g, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{g: g, public: "http://" + pub.Addr().String(), admin: "http://" + adm.Addr().String(), logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- g.Serve(ctx, pub, adm) }()
	t.Cleanup(func() {
		// Connections the client dialed but never used count as in
		// flight for a while (net/http); close them so shutdown need not
		// wait for them.
		client.CloseIdleConnections()
		cancel()
		<-r.done
		g.Close()
	})
	return r
}

// waitReady waits until /readyz reports the store reachable.
func (r *running) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, body := getBody(t, r.admin+"/readyz"); strings.Contains(string(body), `"status":"ready"`) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("gateway never became ready")
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func getBody(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// admitUntilRefused sends requests until the first 429 (at most max) and
// returns how many were admitted.
func admitUntilRefused(t *testing.T, url string, max int, header ...string) (int, *http.Response, []byte) {
	t.Helper()
	for i := 0; i < max; i++ {
		resp, body := getBody(t, url, header...)
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			return i, resp, body
		default:
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	return max, nil, nil
}

// flushShared empties the package's shared Redis, so a test starts clean
// even when the suite runs more than once (-count).
func flushShared(t *testing.T) {
	t.Helper()
	c := srv.NewClient(t)
	if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

func TestTwoGatewaysShareRedis(t *testing.T) {
	flushShared(t)
	up := newUpstream(t)
	url := "redis://" + srv.Addr + "/0"
	p := config(t, up.URL, "[]")
	a, b := start(t, p, url), start(t, p, url)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(g *running) {
			defer wg.Done()
			for j := 0; j < 30; j++ {
				resp := get(t, g.public+"/api/items", "X-API-Key", freeKey)
				if resp.StatusCode == 200 {
					admitted.Add(1)
				} else if resp.StatusCode != 429 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}([]*running{a, b}[i%2])
	}
	wg.Wait()
	if admitted.Load() != 100 || up.hits.Load() != 100 {
		t.Fatalf("two gateways admitted %d (upstream saw %d), want exactly 100", admitted.Load(), up.hits.Load())
	}
}

// TestForwardedForTrustedProxy: behind a trusted proxy, the upstream gets
// X-Forwarded-For with the client the gateway charged and the proxy
// appended. (Which address is charged is httplimit's
// TestForwardedForTrustedProxy.)
func TestForwardedForTrustedProxy(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[127.0.0.0/8]"), "")
	if resp := get(t, g.public+"/api/items", "X-Forwarded-For", "6.6.6.6, 203.0.113.6"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	up.mu.Lock()
	xff := up.last.Get("X-Forwarded-For")
	up.mu.Unlock()
	if !strings.HasSuffix(xff, "127.0.0.1") || !strings.Contains(xff, "203.0.113.6") {
		t.Errorf("upstream X-Forwarded-For = %q", xff)
	}
}

func TestHostileInput(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[127.0.0.0/8]"), "")
	t.Run("1MiB header", func(t *testing.T) {
		if resp := get(t, g.public+"/api/items", "X-Junk", strings.Repeat("a", 1<<20)); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d, want 431", resp.StatusCode)
		}
	})
	t.Run("thousands of X-Forwarded-For entries", func(t *testing.T) {
		var b strings.Builder
		for i := 0; i < 3000; i++ {
			fmt.Fprintf(&b, "10.%d.%d.%d, ", i/65536%256, i/256%256, i%256)
		}
		b.WriteString("203.0.113.77")
		if resp := get(t, g.public+"/api/items", "X-Forwarded-For", b.String()); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("control characters and invalid UTF-8 in keys", func(t *testing.T) {
		// Sent raw: Go's client refuses to write such headers. net/http
		// itself answers 400 for bytes it will not parse; whatever reaches
		// Tollgate must get 401 (or 429 once the IP is over its budget).
		before := up.hits.Load()
		for _, k := range []string{"\x01\x02", "\xff\xfe\xfd", "key with spaces", strings.Repeat("k", 5000), "ünï", "\t"} {
			code := rawStatus(t, strings.TrimPrefix(g.public, "http://"), "GET /api/items HTTP/1.1\r\nHost: x\r\nX-API-Key: "+k+"\r\nConnection: close\r\n\r\n")
			if code != 400 && code != 401 && code != 429 {
				t.Errorf("key %.10q: status %d, want 400, 401 or 429", k, code)
			}
		}
		if up.hits.Load() != before {
			t.Errorf("a malformed key reached the upstream")
		}
	})
	t.Run("path tricks match the cleaned path", func(t *testing.T) {
		resp, body := getBody(t, g.public+"/api/x/../../api/export", "X-API-Key", proKey)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "/api/export") {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"pro";r=990;`) {
			t.Errorf("export via a dotted path was not charged as an export: %q", got)
		}
	})
	t.Run("unmatched route", func(t *testing.T) {
		if resp := get(t, g.public+"/nowhere"); resp.StatusCode != 404 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel() // its own gateways; it mostly waits for the slow upstream
	up := newUpstream(t)
	up.delay = 2 * time.Second
	p := config(t, up.URL, "[]")
	p.UpstreamTimeout = 100 * time.Millisecond
	g := start(t, p, "")
	resp, body := getBody(t, g.public+"/api/slow", "X-API-Key", proKey)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), httplimit.ProblemUpstreamSlow) {
		t.Fatalf("slow upstream: %d %s", resp.StatusCode, body)
	}
	dead := newUpstream(t)
	dead.Close()
	g2 := start(t, config(t, dead.URL, "[]"), "")
	resp, body = getBody(t, g2.public+"/api/x", "X-API-Key", proKey)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("dead upstream: %d %s", resp.StatusCode, body)
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel() // its own gateway; it mostly waits for the request in flight
	up := newUpstream(t)
	up.delay = 300 * time.Millisecond
	g := start(t, config(t, up.URL, "[]"), "")
	result := make(chan int, 1)
	go func() {
		resp, err := client.Get(g.public + "/api/slow")
		if err != nil {
			result <- -1
			return
		}
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	for up.hits.Load() == 0 { // wait until the request is in flight
		time.Sleep(5 * time.Millisecond)
	}
	g.cancel()
	if code := <-result; code != 200 {
		t.Fatalf("in-flight request during shutdown: %d, want 200", code)
	}
	if err := <-g.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	g.done <- nil // for the cleanup
	if _, err := client.Get(g.public + "/api/x"); err == nil {
		t.Fatal("gateway still accepting after shutdown")
	}
}

func TestAdminEndpoints(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "redis://"+srv.Addr+"/0")
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if resp := get(t, g.admin+path); resp.StatusCode != 200 {
			t.Errorf("admin %s: %d", path, resp.StatusCode)
		}
		if resp := get(t, g.public+path); resp.StatusCode == 200 {
			t.Errorf("public listener serves %s", path)
		}
	}
}

// TestNoRawSecretsAnywhere scans Redis keys, logs and metrics for raw API
// keys, user ids and client IPs after traffic that includes refusals.
func TestNoRawSecretsAnywhere(t *testing.T) {
	flushShared(t)
	up := newUpstream(t)
	p := config(t, up.URL, "[127.0.0.1/32]")
	g := start(t, p, "redis://"+srv.Addr+"/0")
	admitUntilRefused(t, g.public+"/api/items", 200, "X-API-Key", freeKey)
	admitUntilRefused(t, g.public+"/api/items", 200, "X-User-ID", "carol@example.com")
	admitUntilRefused(t, g.public+"/api/items", 200, "X-Forwarded-For", "198.51.100.23")
	for i := 0; i < 12; i++ {
		get(t, g.public+"/api/items", "X-API-Key", "wrong-secret-key-"+strconv.Itoa(i), "X-Forwarded-For", "198.51.100.24")
	}
	_, metrics := getBody(t, g.admin+"/metrics")
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys, err := c.Do(context.Background(), c.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil || len(keys) == 0 {
		t.Fatalf("redis keys: %v %v", keys, err)
	}
	haystacks := map[string]string{"redis keys": strings.Join(keys, "\n"), "logs": g.logs.String(), "metrics": string(metrics)}
	for where, text := range haystacks {
		for _, secret := range []string{freeKey, "wrong-secret-key", "carol@example.com", "198.51.100.23", "198.51.100.24", "free-demo"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contain %q", where, secret)
			}
		}
	}
	if !strings.Contains(g.logs.String(), `"msg":"refused"`) {
		t.Error("no refusal was logged")
	}
}

// rawStatus sends a raw HTTP request and returns the response status code.
func rawStatus(t *testing.T, addr, req string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdminToken: with a token configured, every admin endpoint refuses
// requests without it, but for the probes, which answer anyone with the
// status alone (orchestrators' probes cannot carry a secret).
func TestAdminToken(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_ADMIN_TOKEN", "s3cret-admin-token-0123")
	up := newUpstream(t)
	p := quickstart(t, up.URL, "  admin: 127.0.0.1:9090\n", "  admin: 0.0.0.0:9090\n  admin_token_env: TOLLGATE_TEST_ADMIN_TOKEN\n")
	g := start(t, p, "")
	for _, path := range []string{"/metrics", "/policy", "/overrides", "/dashboard"} {
		if resp := get(t, g.admin+path); resp.StatusCode != 401 {
			t.Errorf("%s without the token: %d", path, resp.StatusCode)
		}
		if resp := get(t, g.admin+path, "Authorization", "Bearer wrong-token-wrong-token"); resp.StatusCode != 401 {
			t.Errorf("%s with a wrong token: %d", path, resp.StatusCode)
		}
		if resp := get(t, g.admin+path, "Authorization", "Bearer s3cret-admin-token-0123"); resp.StatusCode != 200 {
			t.Errorf("%s with the token: %d", path, resp.StatusCode)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		for _, auth := range []string{"", "Bearer wrong-token-wrong-token", "Bearer s3cret-admin-token-0123"} {
			var resp *http.Response
			var body []byte
			if auth == "" {
				resp, body = getBody(t, g.admin+path)
			} else {
				resp, body = getBody(t, g.admin+path, "Authorization", auth)
			}
			detailed := strings.Contains(string(body), "policy_version")
			if resp.StatusCode != 200 || path == "/readyz" && detailed != (auth == "Bearer s3cret-admin-token-0123") {
				t.Errorf("%s with %q: %d %s (details only with the token)", path, auth, resp.StatusCode, body)
			}
		}
	}
	if code := rawStatus(t, strings.TrimPrefix(g.admin, "http://"), "POST /healthz HTTP/1.0\r\n\r\n"); code != 401 {
		t.Errorf("POST /healthz without the token: %d", code)
	}
	// Off loopback without a token, the policy does not load.
	b, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "  admin: 127.0.0.1:9090\n", "  admin: 0.0.0.0:9090\n", 1)
	if _, err := policy.Parse([]byte(bad), "admin.yaml"); err == nil || !strings.Contains(err.Error(), "admin_token_env") {
		t.Fatalf("exposed admin listener without a token: %v", err)
	}
}
