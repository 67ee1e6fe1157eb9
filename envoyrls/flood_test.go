package envoyrls_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/redistest"
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
// bytes, and long values still count apart, each in its own budget.
func TestLongValuesBounded(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := rstore.New(srv.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spy := &subjectSpy{Store: resilience.New(rs, memory.New(memory.Options{}), resilience.Options{Timeout: time.Second})}
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
		f.ask(t, "another", 1, desc("key2", strconv.Itoa(i)+pad))
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
