package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/faultproxy"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
)

// timed sends one request and returns its status and latency.
func timed(t *testing.T, method, url string, header ...string) (int, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return timedDo(t, req)
}

// timedLogin posts one wrong password for an account to a login route
// and returns the status and latency.
func timedLogin(t *testing.T, url string) (int, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"username":"probe","password":"wrong"}`))
	req.Header.Set("Content-Type", "application/json")
	return timedDo(t, req)
}

func timedDo(t *testing.T, req *http.Request) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)*99)/100]
}

// metric returns the value of one sample line of the gateway's /metrics.
func metric(t *testing.T, g *running, name string) float64 {
	t.Helper()
	_, body := getBody(t, g.admin+"/metrics")
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
			return v
		}
	}
	return 0
}

// evalCalls counts script and function calls Redis has executed (INFO
// commandstats).
func evalCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return redistest.Calls(t, c, "evalsha", "eval", "fcall")
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
	return 0
}

// breakerLogsChanges checks that the breaker's log lines are its changes
// of state, each from the state the one before went to, starting closed:
// no line a request. How many changes there were is the load's doing (a
// loaded machine misses the 20 ms deadline with Redis up too, and the
// breaker opens then as well), so it is not counted.
func breakerLogsChanges(t *testing.T, g *running) {
	t.Helper()
	state, n := "closed", 0
	for _, line := range strings.Split(g.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"store circuit breaker `) {
			continue
		}
		var m struct{ From, To string }
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.From != state || m.To == m.From {
			t.Fatalf("breaker log line %d in state %s: %s (logging per request?)", n, state, line)
		}
		state, n = m.To, n+1
	}
	t.Logf("%d breaker changes logged", n)
}

func readyz(t *testing.T, g *running) string {
	_, body := getBody(t, g.admin+"/readyz")
	return string(body)
}

// TestRedisKilledAndRestarted kills Redis under load: fail_open routes go on
// within this instance's share (instances: 2, so 49 of the 99 Free had
// left; its daily quota too, with calendar_fallback: share), only the
// fail_closed /login answers 5xx, and the added latency stays near the
// store deadline. Then Redis comes back empty on the same port: scripts are
// reloaded, the breaker closes and limiting is shared again, charged with
// what the fallback admitted.
func TestRedisKilledAndRestarted(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	// The production deadline: the latency it adds while Redis is down
	// is reported against it.
	p := withStoreDeadline(config(t, up.URL, "[]"), testenv.ShortStoreTimeout)
	p.Store.Instances = 2
	p.Store.CalendarFallback = "share"
	g := start(t, p, "redis://"+rs.Addr+"/0")
	// Redis decides one free request (a call that misses the deadline on
	// a loaded machine fails closed: the instance knows nothing yet of
	// the key's daily quota).
	waitFor(t, "a free request decided on Redis", 15*time.Second, func() bool {
		code, _ := timed(t, "GET", g.public+"/api/items", "X-API-Key", freeKey)
		return code == 200
	})

	// Baseline latency, Redis up (the pro key's 1,000 leave room).
	var before []time.Duration
	for i := 0; i < 300; i++ {
		code, d := timed(t, "GET", g.public+"/api/items", "X-API-Key", proKey)
		if code != 200 {
			t.Fatalf("baseline: %d", code)
		}
		before = append(before, d)
	}

	rs.Kill()
	var during []time.Duration
	var mu sync.Mutex
	var admitted, refused, login503, other atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				code, d := timed(t, "GET", g.public+"/api/items", "X-API-Key", freeKey)
				mu.Lock()
				during = append(during, d)
				mu.Unlock()
				switch code {
				case 200:
					admitted.Add(1)
				case 429:
					refused.Add(1)
				default:
					other.Add(1)
				}
				if i%10 == 0 {
					if code, _ := timedLogin(t, g.public+"/login"); code == 503 {
						login503.Add(1)
					} else {
						other.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("Redis down: free key admitted %d of 200 (local share of the 99 left: 49), refused %d; /login 503 x%d; other statuses %d",
		admitted.Load(), refused.Load(), login503.Load(), other.Load())
	t.Logf("latency p99: Redis up %v, Redis down %v, added %v (store deadline %v)",
		p99(before), p99(during), p99(during)-p99(before), p.Store.Timeout)
	if other.Load() != 0 {
		t.Fatalf("%d responses were neither 200/429 on fail_open nor 503 on fail_closed", other.Load())
	}
	if a := admitted.Load(); a != 49 {
		t.Fatalf("admitted %d during the outage, want the local share of what was left, 49", a)
	}
	if login503.Load() != 20 {
		t.Fatalf("/login answered 503 %d times of 20", login503.Load())
	}
	// Open, or half-open: open_for (1 s) passed since it opened, as it
	// does while a loaded machine sends the requests above, and no call
	// has tried Redis since.
	if metric(t, g, "tollgate_store_breaker_state") == 0 || !strings.Contains(readyz(t, g), "degraded") {
		t.Fatalf("breaker not open / readyz not degraded: %s", readyz(t, g))
	}
	if !strings.Contains(g.logs.String(), "store circuit breaker open") {
		t.Fatal("no log line for the breaker opening")
	}
	breakerLogsChanges(t, g)

	// Redis comes back, empty.
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	gap := waitFor(t, "shared limiting resumes", 20*time.Second, func() bool {
		code, _ := timed(t, "GET", g.public+"/api/other", "X-API-Key", proKey)
		return code == 200 && evalCalls(t, rs) > 0 && metric(t, g, "tollgate_store_breaker_state") == 0
	})
	t.Logf("Redis restarted: decisions back on Redis (scripts reloaded, breaker closed) after %v", gap)
	// Shared again: the free key's fresh Redis budget is the whole 100,
	// less the 49 the fallback admitted, which its first request charges.
	// A call that misses the 20ms deadline on a loaded machine is decided
	// locally instead (and counted): allow for exactly those.
	// The free plan's budgets are free.minute and free.day (a decision
	// falls back under its first); there is no budget "free", whose
	// series, always 0, allowed for no such call at all.
	freeFallbacks := func() float64 {
		return metric(t, g, `tollgate_fallback_decisions_total{budget="free.minute",mode="fail_open"}`) +
			metric(t, g, `tollgate_fallback_decisions_total{budget="free.day",mode="fail_open"}`)
	}
	fb := freeFallbacks()
	n, _, _ := admitUntilRefused(t, g.public+"/api/items", 150, "X-API-Key", freeKey)
	extra := freeFallbacks() - fb
	if want := 100 - int(admitted.Load()); extra == 0 && n != want || extra > 0 && (n > want || float64(n) < float64(want)-extra) {
		t.Fatalf("after the restart the free key got %d (%v local fallbacks), want %d from Redis", n, extra, want)
	}
	if !strings.Contains(readyz(t, g), `"status":"ready"`) {
		t.Fatalf("readyz after recovery: %s", readyz(t, g))
	}
}

// TestLatencyInjected puts 5 s of latency between the gateway and Redis:
// calls time out at the 20ms deadline, the breaker opens, the fallback
// decides; without the latency, service returns to normal. Time is the
// property (the deadline fires): a request it did not cut would wait the
// whole 5 s, 250 times the deadline and several times the longest a
// request waited for the CPU on a loaded machine (0.7 s seen).
func TestLatencyInjected(t *testing.T) {
	const latency = 5 * time.Second
	rs := redistest.Start(t)
	fp, err := faultproxy.Start(rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	up := newUpstream(t)
	p := withStoreDeadline(config(t, up.URL, "[]"), testenv.ShortStoreTimeout) // the deadline under test
	g := start(t, p, "redis://"+fp.Addr+"/0")
	if code, _ := timed(t, "GET", g.public+"/api/x", "X-API-Key", proKey); code != 200 {
		t.Fatal(code)
	}
	fp.SetLatency(latency)
	var lat []time.Duration
	for i := 0; i < 40; i++ {
		code, d := timed(t, "GET", g.public+"/api/x", "X-API-Key", proKey)
		if code != 200 {
			t.Fatalf("request %d with slow Redis: %d", i, code)
		}
		lat = append(lat, d)
	}
	t.Logf("%v Redis latency: first request %v, max %v, p99 %v (deadline %v)", latency, lat[0], maxDur(lat), p99(lat), p.Store.Timeout)
	if maxDur(lat) >= latency {
		t.Fatalf("a request waited %v: the deadline did not cut it", maxDur(lat))
	}
	if metric(t, g, "tollgate_store_breaker_state") == 0 { // open, or half-open once open_for (1 s) passed
		t.Fatal("breaker did not open")
	}
	if metric(t, g, `tollgate_fallback_decisions_total{budget="pro",mode="fail_open"}`) < 35 {
		t.Fatal("fallback decisions were not counted")
	}
	// What was sent meanwhile still waits out its latency in the proxy.
	fp.SetLatency(0)
	gap := waitFor(t, "normal service", 30*time.Second, func() bool {
		timed(t, "GET", g.public+"/api/x", "X-API-Key", proKey)
		return metric(t, g, "tollgate_store_breaker_state") == 0
	})
	t.Logf("latency removed: breaker closed after %v", gap)
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// TestHotKeyDenyCache sends 2,000 requests from one key far over its limit
// (100) and counts the script calls Redis executed: the admitted ones
// each make one, and the refusals next to none (the deny cache answers
// them), at most one in 25 (they were 10,000: 1,900 refusals tell a cache
// from none as well, 1,900 calls against a few).
func TestHotKeyDenyCache(t *testing.T) {
	const workers, each = 8, 250
	rs := redistest.Start(t)
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "redis://"+rs.Addr+"/0") // count calls, not timeouts: the harness's generous deadline
	before := evalCalls(t, rs)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				code := get(t, g.public+"/api/items", "X-API-Key", freeKey).StatusCode
				if code == 200 {
					ok.Add(1)
				} else if code == 429 {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	calls := evalCalls(t, rs) - before
	t.Logf("hot key: %d requests, %d admitted, %d refused, %d Redis script calls (%.3f per refusal)",
		workers*each, ok.Load(), refused.Load(), calls, float64(calls-ok.Load())/float64(refused.Load()))
	if ok.Load() != 100 || refused.Load() != workers*each-100 {
		t.Fatalf("admitted %d refused %d", ok.Load(), refused.Load())
	}
	if extra := calls - ok.Load(); extra*25 > refused.Load() {
		t.Fatalf("%d Redis calls for %d requests, %d admitted: %d for %d refusals, want at most one in 25", calls, workers*each, ok.Load(), extra, refused.Load())
	}
	// A refusal from the cache carries the same contract as one from Redis.
	resp, body := getBody(t, g.public+"/api/items", "X-API-Key", freeKey)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"free.minute";r=0;t=`) ||
		!strings.Contains(string(body), `"retry_after"`) {
		t.Fatalf("cached refusal: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestStartsWithoutRedis starts the gateway while Redis is down: it serves
// by policy (degraded), then takes Redis when it appears.
func TestStartsWithoutRedis(t *testing.T) {
	t.Parallel() // its own Redis and gateway; it mostly waits for Redis to be taken back
	rs := redistest.Start(t)
	rs.Kill()
	up := newUpstream(t)
	p := config(t, up.URL, "[]")
	g2 := startNoWait(t, p, "redis://"+rs.Addr+"/0")
	if code, _ := timed(t, "GET", g2.public+"/api/x", "X-API-Key", proKey); code != 200 {
		t.Fatalf("fail_open route without Redis: %d", code)
	}
	if code, _ := timedLogin(t, g2.public+"/login"); code != 503 {
		t.Fatalf("fail_closed route without Redis: %d", code)
	}
	if !strings.Contains(readyz(t, g2), "degraded") {
		t.Fatalf("readyz: %s", readyz(t, g2))
	}
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	gap := waitFor(t, "Redis taken back", 15*time.Second, func() bool {
		timed(t, "GET", g2.public+"/api/x", "X-API-Key", proKey)
		return strings.Contains(readyz(t, g2), `"status":"ready"`) && evalCalls(t, rs) > 0
	})
	t.Logf("gateway started without Redis; Redis taken back %v after it appeared", gap)
	if code, _ := timedLogin(t, g2.public+"/login"); code == 503 {
		t.Fatal("fail_closed route still refused after Redis came back")
	}
}

// TestFallbackWorstCase is the timeline through the gateway: a
// subject limited to 100 per window spends about 60, then Redis is paused
// (SIGSTOP) for half a window. Before, the fallback granted a full budget
// and Redis then its own rest: about 200 in one window. Now the fallback
// starts from what Redis last said remained and charges Redis what it
// admitted, so that one instance admits at most the limit and what was in
// flight (the worst case of docs/operations/redis-failure-and-fallback.md,
// C + k). Meanwhile a daily quota that was used up on Redis is never
// granted again: refused (the deny cache remembers the refusal) or failing
// closed (503), and so after a restart of the gateway with Redis down.
func TestFallbackWorstCase(t *testing.T) {
	t.Parallel() // its own Redis and gateways; it mostly waits out the windows, and what it counts only load can lower
	const (
		c       = 100
		period  = 3 * time.Second
		workers = 4
	)
	rs := redistest.Start(t)
	up := newUpstream(t)
	p := quickstart(t, up.URL,
		`pro:       {algorithm: sliding_log, rate: 1000, period: 1m}`, `pro:       {algorithm: sliding_log, rate: 100, period: 3s}`,
		`{name: day, calendar: day, rate: 1000}`, `{name: day, calendar: day, rate: 30}`,
		// On the real clock (Redis is paused for real): a zone whose
		// midnight, when the used-up quota would come back, is hours away.
		"time_zone: Asia/Ho_Chi_Minh", "time_zone: "+zoneAtNoon())
	// A deadline short beside the pause (a tenth of a window, a fifth of
	// the pause), so that calls to the stopped Redis give up and the
	// fallback decides for most of it; and long beside a call to a
	// running Redis on a loaded machine, so that the daily quota is spent
	// on Redis first (a call past the deadline would fail it closed: 503).
	withStoreDeadline(p, period/10)
	g := start(t, p, "redis://"+rs.Addr+"/0")
	// The free key spends its daily 30 on Redis, until Redis refuses it. A
	// call that misses the deadline on a loaded machine fails closed (503:
	// no share of a calendar quota without Redis), whether or not Redis
	// then charged it: asked again, and allowed for.
	admitted, late := 0, 0
	for refused := false; !refused; {
		switch code := get(t, g.public+"/api/items", "X-API-Key", freeKey).StatusCode; {
		case code == 200:
			admitted++
		case code == 429:
			refused = true
		case code == 503 && late < 20:
			late++
		default:
			t.Fatalf("free key, request %d on Redis: %d (%d late)", admitted+late, code, late)
		}
	}
	if admitted > 30 || admitted+late < 30 {
		t.Fatalf("free key: %d admitted on Redis (%d late), want its daily 30", admitted, late)
	}

	type span struct{ sent, got time.Time }
	var (
		mu                   sync.Mutex
		adm                  []span
		other                atomic.Int64
		freeAdmitted, freeOK atomic.Int64
	)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	gap := period * workers / (4 * c) // four times the limit in all
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				sent := time.Now()
				code, _ := timed(t, "GET", g.public+"/api/items", "X-API-Key", proKey)
				got := time.Now()
				switch code {
				case 200:
					mu.Lock()
					adm = append(adm, span{sent, got})
					mu.Unlock()
				case 429:
				default:
					other.Add(1)
				}
				if i%10 == 0 {
					switch code, _ := timed(t, "GET", g.public+"/api/items", "X-API-Key", freeKey); code {
					case 200:
						freeAdmitted.Add(1)
					case 429, 503: // refused (from the deny cache), or failing closed
						freeOK.Add(1)
					}
				}
				time.Sleep(gap - time.Since(sent))
			}
		}()
	}
	start := time.Now()
	time.Sleep(period * 3 / 20)
	began := time.Now()
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(period / 2)
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*period - period*3/20 - period/2)
	stop()
	wg.Wait()

	before, most := 0, 0
	var at time.Time
	sort.Slice(adm, func(i, j int) bool { return adm[i].sent.Before(adm[j].sent) })
	for i, a := range adm {
		if a.got.Before(began) {
			before++
		}
		// Certainly decided within one window (a millisecond shorter:
		// the algorithms count whole milliseconds).
		n := 0
		for _, b := range adm[i:] {
			if b.got.Before(a.sent.Add(period - time.Millisecond)) {
				n++
			}
		}
		if n > most {
			most, at = n, a.sent
		}
	}
	fb := metric(t, g, `tollgate_fallback_decisions_total{budget="pro",mode="fail_open"}`)
	t.Logf("Redis paused from %v to %v of a %v window: pro key admitted %d before, %d in all, most in one window %d (from %v), %v fallback decisions; "+
		"free key (daily quota used up) admitted %d, refused or 503 %d times",
		began.Sub(start).Round(time.Millisecond), began.Sub(start).Round(time.Millisecond)+period/2, period,
		before, len(adm), most, at.Sub(start).Round(time.Millisecond), fb, freeAdmitted.Load(), freeOK.Load())
	if other.Load() != 0 {
		t.Fatalf("%d pro responses were neither 200 nor 429", other.Load())
	}
	if fb == 0 {
		t.Fatal("no fallback decision: the pause was not seen")
	}
	if most > c+workers {
		t.Fatalf("%d admitted in one window, above the worst case C + k = %d", most, c+workers)
	}
	if freeAdmitted.Load() != 0 || freeOK.Load() == 0 {
		t.Fatalf("the used-up daily quota: %d admitted, %d refused or 503 during the outage", freeAdmitted.Load(), freeOK.Load())
	}

	// A restarted gateway, Redis down: the daily quota still fails closed.
	rs.Kill()
	g2 := startNoWait(t, p, "redis://"+rs.Addr+"/0")
	if code, _ := timed(t, "GET", g2.public+"/api/items", "X-API-Key", freeKey); code != 503 {
		t.Fatalf("restarted gateway, Redis down, daily quota: %d, want 503", code)
	}
	if code, _ := timed(t, "GET", g2.public+"/api/items", "X-API-Key", proKey); code != 200 {
		t.Fatalf("restarted gateway, Redis down, pro key: %d, want 200 from the fallback", code)
	}
}
