package envoyrls_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

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
// (fixture.decide), and the series counted from the collector itself: a
// Gather of the registry's 50,000 series under -race cost seconds.
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
	series := make(chan prometheus.Metric, 1024)
	go func() {
		f.metrics.TotalHits.Collect(series)
		close(series)
	}()
	n := 0
	for m := range series {
		n++
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.Label {
			if len(l.GetValue()) > 256 {
				t.Fatalf("a label of %d bytes", len(l.GetValue()))
			}
		}
	}
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
