package resilience_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/resilience"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// TestLongSubjectsBounded: what the store remembers of Redis' answers for
// the fallback is bounded by a number of keys, so a key's length must not
// count: 2,000 subjects of 60 KiB (a caller keying by a header's value)
// kept 130 MiB. Long subjects are remembered by a digest, and the
// fallback still starts each from its own last answer.
func TestLongSubjectsBounded(t *testing.T) {
	rs := redistest.Start(t)
	st, err := rstore.New(rs.NewClient(t), rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := resilience.New(st, memory.New(memory.Options{}), resilience.Options{Timeout: testenv.StoreTimeout})
	defer s.Close()
	ctx := context.Background()
	l := algo.Limit{Algorithm: algo.GCRA, Rate: 10, Period: time.Hour}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	pad := strings.Repeat("x", 60<<10)
	for i := range 2000 {
		if _, err := s.Allow(ctx, algo.Request{Name: "api", Subject: strconv.Itoa(i) + pad, Tag: "t" + pad, Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if grew := int64(heap()) - int64(before); grew > 16<<20 {
		t.Errorf("2,000 long subjects kept %d MiB", grew>>20)
	}
	// The fallback starts a long subject from Redis' last answer: 10 an
	// hour, 10 spent on Redis, none left once Redis is gone.
	long := algo.Request{Name: "api", Subject: "victim" + pad, Limit: l, Cost: 1}
	for range 10 {
		if d, err := s.Allow(ctx, long); err != nil || !d.Allowed {
			t.Fatalf("on Redis: %+v %v", d, err)
		}
	}
	rs.Kill()
	if d, err := s.Fallback(ctx, long); err != nil || d.Allowed {
		t.Fatalf("the fallback after 10 of 10 on Redis: %+v %v, want refused", d, err)
	}
}
