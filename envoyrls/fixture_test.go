package envoyrls_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// envoyConfig is envoyproxy/ratelimit's integration-test configuration
// (basic.yaml, another.yaml), and domains for replaces, shadow mode and
// wildcards.
var envoyConfig = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`,
	"another.yaml": `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
  - key: free
    rate_limit:
      unlimited: true
  - key: nothing
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: outer
    value: a
    descriptors:
      - key: inner
        rate_limit:
          unit: minute
          requests_per_unit: 3
`,
	"sub/replaces.yaml": `domain: replaces
descriptors:
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
      name: foo_limit
  - key: bar
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: foo_limit
`,
	"shadow.yaml": `domain: shadow
descriptors:
  - key: tried
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: enforced
    rate_limit:
      unit: minute
      requests_per_unit: 3
`,
	"wild.yaml": `domain: wild
on_store_failure: fail_closed
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: path
    value: /api/*
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 5
  - key: tuned
    rate_limit:
      unit: minute
      requests_per_unit: 4
      algorithm: gcra
`,
}

// fixture is a rate-limit service on a real gRPC listener, its engine on
// a store (memory or a real Redis) and a clock the test walks.
type fixture struct {
	client  rlspb.RateLimitServiceClient
	conn    *grpc.ClientConn
	srv     *envoyrls.Server
	reg     *prometheus.Registry
	dir     string
	addr    string
	mu      sync.Mutex
	now     time.Time
	redis   *redistest.Server
	metrics *envoyrls.Metrics
	engine  *engine.Metrics
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// base is the start of a window of every unit up to a week (a multiple
// of 604,800 s since the epoch).
var base = time.Unix(1_799_884_800, 0)

// storeKinds lists the stores every behaviour is checked on.
var storeKinds = []string{"memory", "redis"}

func writeConfig(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type fixtureOptions struct {
	server  envoyrls.Options
	store   tollgate.Store // overrides kind
	files   map[string]string
	noClock bool
}

func newFixture(t *testing.T, kind string, fo fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{now: base.Add(10 * time.Second), dir: t.TempDir(), reg: prometheus.NewRegistry()}
	files := fo.files
	if files == nil {
		files = envoyConfig
	}
	writeConfig(t, f.dir, files)
	cfg, err := envoyrls.Load(f.dir, envoyrls.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var now func() time.Time
	if !fo.noClock {
		now = f.clock
	}
	st := fo.store
	if st == nil {
		switch kind {
		case "memory":
			m := memory.New(memory.Options{Now: now})
			t.Cleanup(func() { m.Close() })
			st = m
		case "redis":
			f.redis = redistest.Start(t)
			rs, err := rstore.New(f.redis.NewClient(t), rstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st = rs
		}
	}
	em, err := engine.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.engine = em
	eng, err := engine.New(engine.Options{Store: st, Now: now, Metrics: em, DenyCacheSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	f.metrics, err = envoyrls.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	opts := fo.server
	opts.Engine, opts.Metrics = eng, f.metrics
	if now != nil {
		opts.Now = now
	}
	f.srv, err = envoyrls.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	f.srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	f.conn, err = grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	f.client = rlspb.NewRateLimitServiceClient(f.conn)
	return f
}

// desc is a descriptor of key/value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (f *fixture) ask(t *testing.T, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := f.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// decide asks the server in process, without gRPC, as the gRPC service
// does (ShouldRateLimit is all it registers). It is for the tests of what
// the server keeps over thousands of requests: there the round trip under
// -race was most of the cost and none of the property.
func (f *fixture) decide(t *testing.T, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// counter reads one of envoyproxy/ratelimit's statistics.
func (f *fixture) counter(vec *prometheus.CounterVec, domain, key1, key2, descriptor string) int {
	return int(testutil.ToFloat64(vec.WithLabelValues(domain, key1, key2, descriptor)))
}

type status struct {
	code      rlspb.RateLimitResponse_Code
	limit     uint32 // 0: no current_limit
	remaining uint32
	reset     int64
}

func statusOf(s *rlspb.RateLimitResponse_DescriptorStatus) status {
	st := status{code: s.Code, remaining: s.LimitRemaining, reset: s.GetDurationUntilReset().GetSeconds()}
	if s.CurrentLimit != nil {
		st.limit = s.CurrentLimit.RequestsPerUnit
	}
	return st
}

func expect(t *testing.T, what string, resp *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, want ...status) {
	t.Helper()
	if resp.OverallCode != overall || len(resp.Statuses) != len(want) {
		t.Fatalf("%s: overall %v with %d statuses, want %v with %d: %v", what, resp.OverallCode, len(resp.Statuses), overall, len(want), resp)
	}
	for i, w := range want {
		if got := statusOf(resp.Statuses[i]); got != w {
			t.Fatalf("%s: status %d is %+v, want %+v", what, i, got, w)
		}
	}
}

type rlv3Descriptor = rlv3.RateLimitDescriptor

func testutilDomainNotFound(f *fixture, domain string) float64 {
	return testutil.ToFloat64(f.metrics.DomainNotFound.WithLabelValues(domain))
}

// reflectionLists reports whether the server's reflection service lists
// the service.
func reflectionLists(t *testing.T, conn *grpc.ClientConn, service string) bool {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetListServicesResponse().GetService() {
		if s.Name == service {
			return true
		}
	}
	return false
}

func testutilCounter(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
