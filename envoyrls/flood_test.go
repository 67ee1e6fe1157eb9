package envoyrls_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// subjectSpy is a real store that notes the longest subject it is asked
// about.
type subjectSpy struct {
	tollgate.Store
	mu      sync.Mutex
	longest int
}

func (s *subjectSpy) note(reqs ...tollgate.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		s.longest = max(s.longest, len(r.Subject))
	}
}

func (s *subjectSpy) Allow(ctx context.Context, r tollgate.Request) (tollgate.Decision, error) {
	s.note(r)
	return s.Store.Allow(ctx, r)
}

func (s *subjectSpy) AllowAll(ctx context.Context, rs []tollgate.Request) ([]tollgate.Decision, error) {
	s.note(rs...)
	return s.Store.AllowAll(ctx, rs)
}

// TestLongValuesBounded: descriptor values are request data (a header's
// value, up to Envoy's 60 KiB of headers); a client sending a new long
// value each time must not make the service keep each: as `tollgate rls`
// runs by default (Redis behind the fallback, whose memory of Redis'
// answers holds 100,000 keys, and a deny cache of as many), 2,000 values
// of 60 KiB kept 130 MiB. Every subject the store sees is at most 64
// bytes, and long values still count apart, each in its own budget. The
// 2,000 are asked in process (fixture.decide), the rest through gRPC.
// The store deadline is the generous one: the budgets counted are Redis'.
func TestLongValuesBounded(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := rstore.New(srv.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spy := &subjectSpy{Store: resilience.New(rs, memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout})}
	f := newFixture(t, "", fixtureOptions{store: spy})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	pad := strings.Repeat("x", 60<<10)
	for i := range 2000 {
		f.decide(t, "another", 1, desc("key2", strconv.Itoa(i)+pad))
	}
	if grew := int64(heap()) - int64(before); grew > 16<<20 {
		t.Errorf("2,000 long descriptor values kept %d MiB", grew>>20)
	}
	if spy.longest > 64 {
		t.Errorf("the store was asked about a subject of %d bytes", spy.longest)
	}
	// Each long value is its own budget, counted as any other: key2 is
	// 20 a minute.
	for range 20 {
		f.ask(t, "another", 1, desc("key2", "a"+pad))
	}
	expect(t, "21st of one long value", f.ask(t, "another", 1, desc("key2", "a"+pad)), over, status{over, 20, 0, 50})
	expect(t, "another long value", f.ask(t, "another", 1, desc("key2", "b"+pad)), ok, status{ok, 20, 19, 50})
	// A value that looks like a digest is no other value's budget.
	expect(t, "h: value", f.ask(t, "another", 1, desc("key2", "h:0123")), ok, status{ok, 20, 19, 50})
}

// TestDetailedMetricBounded: with detailed_metric, a descriptor's values
// are in its metrics' labels, as envoyproxy/ratelimit puts them; values
// are request data, so a client sending a new one each time (or one of
// 60 KiB) made a series of each, in Prometheus and in the service's own
// map of counters, without end. The first maxDetailedKeys keys (each of
// at most 256 bytes) get their series; any other is counted under the
// descriptor's configured key. The values are asked in process
// (fixture.decide), and the series counted from the collector itself
// (seriesOf).
func TestDetailedMetricBounded(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{"d.yaml": `domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
`}})
	const max = 10_000 // envoyrls' maxDetailedKeys
	for i := range max + 500 {
		f.decide(t, "d", 1, desc("user", strconv.Itoa(i)))
	}
	f.ask(t, "d", 1, desc("user", strings.Repeat("x", 60<<10)))
	n := seriesOf(t, f.metrics.TotalHits)
	if n > max+1 {
		t.Errorf("%d series of total_hits after %d values", n, max+501)
	}
	if got := f.counter(f.metrics.TotalHits, "d", "user_0", "", "user_0"); got != 1 {
		t.Errorf("the first value's own series: %d hits, want 1", got)
	}
	if got := f.counter(f.metrics.TotalHits, "d", "user", "", "user"); got != 501 {
		t.Errorf("the configured key's series: %d hits, want the 501 past the bound", got)
	}
}

// override is a descriptor of key/value pairs carrying its own limit (an
// Envoy limit override) of n a minute.
func override(n uint32, kv ...string) *rlv3Descriptor {
	d := desc(kv...)
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_MINUTE}
	return d
}

// seriesOf counts a vector's series, failing t on a label longer than
// 256 bytes. It collects from the vector itself: a Gather of a registry
// of 50,000 series under -race costs seconds.
func seriesOf(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	n := 0
	for m := range ch {
		n++
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.Label {
			if len(l.GetValue()) > 256 {
				t.Errorf("a %s label of %d bytes", l.GetName(), len(l.GetValue()))
			}
		}
	}
	return n
}

// TestOverrideKeysBounded: a descriptor carrying its own limit (an Envoy
// limit override) is counted under its descriptor keys, which are
// request data like its values: a caller naming new keys each time made
// a series of each in the five ratelimit_service families and in
// tollgate_decisions_total, without end (14,000 calls: a 535 MB
// /metrics). Every name made of request data is bounded: at most
// maxDetailedKeys of them, each of at most 256 bytes, after which they
// are counted as "<domain>._other"; and each override is still its own
// budget, however long its keys and however many came before.
func TestOverrideKeysBounded(t *testing.T) {
	f := newFixture(t, "memory", fixtureOptions{})
	const max = 10_000 // envoyrls' maxDetailedKeys
	pad := strings.Repeat("k", 4<<10)
	for i := range max + 500 {
		f.decide(t, "basic", 1, override(5, pad+strconv.Itoa(i), "v"))
	}
	for _, c := range []struct {
		name string
		vec  *prometheus.CounterVec
		max  int
	}{
		{"total_hits", f.metrics.TotalHits, max + 1},
		{"within_limit", f.metrics.WithinLimit, max + 1},
		{"tollgate_decisions_total", f.engine.Decisions, max + 1},
	} {
		if n := seriesOf(t, c.vec); n > c.max {
			t.Errorf("%s: %d series after %d overrides with new keys", c.name, n, max+500)
		}
	}
	if got := f.counter(f.metrics.TotalHits, "basic", "_other", "", "_other"); got < 500 {
		t.Errorf("the overrides past the bound: %d hits under basic._other, want at least 500", got)
	}
	// Past the bound, long keys still count apart, each in its own budget.
	a, b := override(2, pad+"a", "v"), override(2, pad+"b", "v")
	expect(t, "a", f.decide(t, "basic", 1, a), ok, status{ok, 2, 1, 50})
	expect(t, "a's 2nd", f.decide(t, "basic", 1, a), ok, status{ok, 2, 0, 50})
	expect(t, "a's 3rd", f.decide(t, "basic", 1, a), over, status{over, 2, 0, 50})
	expect(t, "b", f.decide(t, "basic", 1, b), ok, status{ok, 2, 1, 50})
}

// TestOverrideStoreKeysBounded: on Redis, 5,000 overrides with new keys
// of 4 KB left 5,000 keys of 4 KB names (each living the override's
// window). Every key the store writes has a name of bounded length, and
// overrides whose long keys differ only at the end still count apart.
func TestOverrideStoreKeysBounded(t *testing.T) {
	f := newFixture(t, "redis", fixtureOptions{})
	pad := strings.Repeat("k", 4<<10)
	for i := range 20 {
		expect(t, "an override", f.decide(t, "basic", 1, override(1, pad+strconv.Itoa(i), strings.Repeat("v", 4<<10))), ok, status{ok, 1, 0, 50})
	}
	expect(t, "the first again", f.decide(t, "basic", 1, override(1, pad+"0", strings.Repeat("v", 4<<10))), over, status{over, 1, 0, 50})
	c := f.redis.NewClient(t)
	keys, err := c.Do(context.Background(), c.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 20 {
		t.Fatalf("%d keys in Redis after 20 overrides: %q", len(keys), keys)
	}
	for _, k := range keys {
		if len(k) > 512 {
			t.Errorf("a key of %d bytes: %.80q...", len(k), k)
		}
	}
}
