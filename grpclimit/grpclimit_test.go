package grpclimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/grpclimit"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/internal/fixture"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
	rstore "github.com/tollgate/tollgate/store/redis"
)

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv, "rl:*")) }

const testKey = "grpc-test-key-1"

// policyText is the test policy; SECRET is replaced by a fresh secret per
// test (so tests sharing the Redis server never share a budget) and
// TRUSTED by the trusted proxies.
const policyText = `version: t1
identity: {secret: SECRET, anonymous_plan: free, user_plan: users, user_header: X-User-ID, trusted_proxies: [TRUSTED]}
plans:
  free: {algorithm: fixed_window, rate: 3, period: 1m}
  users: {algorithm: fixed_window, rate: 5, period: 1m}
  pro: {algorithm: fixed_window, rate: 100, period: 1m}
  brief: {algorithm: fixed_window, rate: 2, period: 1s}
api_keys:
  - {id: k1, digest: "DIGEST", plan: pro}
routes:
  - {name: say, path: /test.Echo/Say}
  - {name: chat, path: /test.Echo/Chat}
  - {name: slow, path: /test.Echo/Slow, concurrency: {limit: 1, per: route}, limit: {algorithm: fixed_window, rate: 1000, period: 1m}}
  - {name: pay, path: /test.Echo/Pay, on_store_failure: fail_closed}
  - {name: brief, path: /test.Echo/Brief, limit: {algorithm: fixed_window, rate: 2, period: 1s}}
  - {name: login, path: /test.Echo/Login, login: {account_field: username, failure_statuses: [401], max_failures: 3, lock: 1h, max_lock: 1h, ip_failures: {algorithm: fixed_window, rate: 4, period: 10m}}}
`

func testPolicy(t *testing.T, trusted string) *policy.Policy {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	text := strings.NewReplacer("SECRET", hex.EncodeToString(b), "TRUSTED", trusted, "DIGEST", identity.KeyDigest(testKey)).Replace(policyText)
	p, err := policy.Parse([]byte(text), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fixedNow is the clock of the counting tests: fixed windows cannot roll
// over during them.
var fixedNow = time.Date(2026, 11, 29, 12, 0, 10, 0, time.UTC)

func fixed() time.Time { return fixedNow }

type storeCase struct {
	name string
	new  func(t *testing.T) tollgate.Store
}

func stores() []storeCase {
	return []storeCase{
		{"memory", func(t *testing.T) tollgate.Store {
			s := memory.New(memory.Options{})
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) tollgate.Store {
			s, err := rstore.New(srv.NewClient(t), rstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

// service is a hand-written gRPC service, test.Echo, whose messages are
// wrapperspb.StringValue: Say, Pay, Brief and Login answer the caller's
// subject ("kind|addr"), Slow waits for release, Chat echoes a stream.
type service struct {
	calls   atomic.Int64
	release chan struct{}
	entered chan struct{}
}

func (s *service) unary(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	s.calls.Add(1)
	info, ok := grpclimit.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no info")
	}
	out := info.Subject.Kind + "|" + info.Subject.Addr.String()
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-user-id")) > 0 {
		out += "|" + strings.Join(md.Get("x-user-id"), ",")
	}
	return wrapperspb.String(out), nil
}

func unaryDesc(name string, h func(*service, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*service)
		call := func(ctx context.Context, req any) (any, error) { return h(s, ctx, req.(*wrapperspb.StringValue)) }
		if icpt == nil {
			return call(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/" + name}, call)
	}}
}

var chatDesc = grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true,
	Handler: func(srv any, ss grpc.ServerStream) error {
		srv.(*service).calls.Add(1)
		for {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if err := ss.SendMsg(in); err != nil {
				return err
			}
		}
	}}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unaryDesc("Say", (*service).unary),
		unaryDesc("Pay", (*service).unary),
		unaryDesc("Brief", (*service).unary),
		unaryDesc("Login", (*service).unary),
		unaryDesc("Slow", func(s *service, ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			s.calls.Add(1)
			s.entered <- struct{}{}
			<-s.release
			return in, nil
		}),
	},
	Streams: []grpc.StreamDesc{chatDesc},
}

// start serves test.Echo behind the interceptors on loopback and returns
// it with a client connection made with dialOpts.
func start(t *testing.T, opts grpclimit.Options, dialOpts ...grpc.DialOption) (*service, *grpc.ClientConn) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary()), grpc.ChainStreamInterceptor(l.Stream()))
	svc := &service{release: make(chan struct{}), entered: make(chan struct{}, 10)}
	gs.RegisterService(&serviceDesc, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return svc, cc
}

type result struct {
	out             string
	err             error
	header, trailer metadata.MD
}

func call(cc *grpc.ClientConn, method string, md ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	var r result
	out := new(wrapperspb.StringValue)
	r.err = cc.Invoke(ctx, "/test.Echo/"+method, wrapperspb.String("hi"), out, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	r.out = out.GetValue()
	return r
}

func retryInfo(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

func TestAdmissionAndRefusal(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t), Now: fixed})
			for i := range 3 {
				r := call(cc, "Say")
				if r.err != nil || r.out != "ip|127.0.0.1" {
					t.Fatalf("call %d: %q %v", i, r.out, r.err)
				}
				if got, want := strings.Join(r.header.Get("ratelimit"), ""), `"free";r=`+string(rune('2'-i))+`;t=50`; got != want {
					t.Errorf("call %d: ratelimit %q, want %q", i, got, want)
				}
				if got := strings.Join(r.header.Get("ratelimit-policy"), ""); got != `"free";q=3;w=60` {
					t.Errorf("call %d: ratelimit-policy %q", i, got)
				}
			}
			r := call(cc, "Say")
			if status.Code(r.err) != codes.ResourceExhausted || svc.calls.Load() != 3 {
				t.Fatalf("4th call: %v, handler called %d times", r.err, svc.calls.Load())
			}
			if d, ok := retryInfo(r.err); !ok || d != 50*time.Second {
				t.Errorf("RetryInfo %v %v, want 50s", d, ok)
			}
			if got := r.trailer.Get(grpclimit.PushbackKey); len(got) != 1 || got[0] != "50000" {
				t.Errorf("pushback %q, want 50000", got)
			}
			if got := strings.Join(r.trailer.Get("ratelimit"), ""); got != `"free";r=0;t=50` {
				t.Errorf("refusal ratelimit %q", got)
			}
			if d, ok := grpclimit.RetryDelay(r.err, r.trailer); !ok || d != 50*time.Second {
				t.Errorf("RetryDelay %v %v", d, ok)
			}
			// A valid key has its own plan and budget; a bad one is
			// Unauthenticated and reaches nothing.
			for _, md := range [][]string{{"authorization", "Bearer " + testKey}, {"x-api-key", testKey}} {
				if r := call(cc, "Say", md...); r.err != nil || r.out != "key|127.0.0.1" ||
					!strings.HasPrefix(strings.Join(r.header.Get("ratelimit"), ""), `"pro";`) {
					t.Fatalf("key %v: %q %v %v", md, r.out, r.err, r.header)
				}
			}
			for _, md := range [][]string{{"x-api-key", "nope"}, {"authorization", "Bearer "}, {"x-api-key", testKey, "authorization", "Bearer other"}} {
				if r := call(cc, "Say", md...); status.Code(r.err) != codes.Unauthenticated {
					t.Errorf("bad key %v: %v", md, r.err)
				}
			}
			if svc.calls.Load() != 5 {
				t.Errorf("handler called %d times, want 5", svc.calls.Load())
			}
			// Login routes are not supported: refused before anything.
			if r := call(cc, "Login"); status.Code(r.err) != codes.FailedPrecondition {
				t.Errorf("login route: %v", r.err)
			}
		})
	}
}

func TestIdentityFromMetadataAndPeer(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Run("trusted peer", func(t *testing.T) {
				svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, "127.0.0.1"), Store: sc.new(t), Now: fixed})
				for i := range 3 {
					if r := call(cc, "Say", "x-forwarded-for", "198.51.100.9, 203.0.113.7"); r.err != nil || r.out != "ip|203.0.113.7" {
						t.Fatalf("call %d from 203.0.113.7: %q %v", i, r.out, r.err)
					}
				}
				if r := call(cc, "Say", "x-forwarded-for", "203.0.113.7"); status.Code(r.err) != codes.ResourceExhausted {
					t.Fatalf("4th from 203.0.113.7: %v", r.err)
				}
				if r := call(cc, "Say", "x-forwarded-for", "203.0.113.8"); r.err != nil || r.out != "ip|203.0.113.8" {
					t.Fatalf("another client: %q %v", r.out, r.err)
				}
				for i := range 5 {
					if r := call(cc, "Say", "x-user-id", "alice", "x-forwarded-for", "203.0.113.7"); r.err != nil || r.out != "user|203.0.113.7|alice" {
						t.Fatalf("user call %d: %q %v", i, r.out, r.err)
					}
				}
				if r := call(cc, "Say", "x-user-id", "alice"); status.Code(r.err) != codes.ResourceExhausted {
					t.Fatalf("6th user call: %v", r.err)
				}
				if r := call(cc, "Say", "x-user-id", "alice", "x-user-id", "bob"); status.Code(r.err) != codes.InvalidArgument {
					t.Fatalf("two user ids: %v", r.err)
				}
				if svc.calls.Load() != 9 {
					t.Errorf("handler called %d times, want 9", svc.calls.Load())
				}
			})
			t.Run("untrusted peer", func(t *testing.T) {
				svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, "10.0.0.0/8"), Store: sc.new(t), Now: fixed})
				for i, xff := range []string{"203.0.113.7", "203.0.113.8", "203.0.113.9"} {
					if r := call(cc, "Say", "x-forwarded-for", xff, "x-user-id", "alice"); r.err != nil || r.out != "ip|127.0.0.1" {
						t.Fatalf("call %d: %q %v", i, r.out, r.err)
					}
				}
				if r := call(cc, "Say", "x-forwarded-for", "203.0.113.10", "forwarded", "for=203.0.113.11"); status.Code(r.err) != codes.ResourceExhausted {
					t.Fatalf("4th call with a fresh forwarded address: %v", r.err)
				}
				if svc.calls.Load() != 3 {
					t.Errorf("handler called %d times, want 3", svc.calls.Load())
				}
			})
		})
	}
}

func chat(cc *grpc.ClientConn, messages int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := cc.NewStream(ctx, &chatDesc, "/test.Echo/Chat")
	if err != nil {
		return err
	}
	for range messages {
		if err := s.SendMsg(wrapperspb.String("m")); err != nil {
			break // the error is RecvMsg's
		}
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
	}
	s.CloseSend()
	if err := s.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func TestStreamCountsOnce(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t), Now: fixed})
			for i := range 3 {
				if err := chat(cc, 5); err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
			}
			err := chat(cc, 5)
			if status.Code(err) != codes.ResourceExhausted || svc.calls.Load() != 3 {
				t.Fatalf("4th stream: %v, handler called %d times", err, svc.calls.Load())
			}
			if d, ok := retryInfo(err); !ok || d != 50*time.Second {
				t.Errorf("stream RetryInfo %v %v", d, ok)
			}
		})
	}
}

func TestConcurrencyLeaseHeldForTheCall(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t), Now: fixed})
			first := make(chan result, 1)
			go func() { first <- call(cc, "Slow") }()
			<-svc.entered
			r := call(cc, "Slow")
			if status.Code(r.err) != codes.ResourceExhausted || !strings.Contains(status.Convert(r.err).Message(), "in flight") {
				t.Fatalf("second call while the first runs: %v", r.err)
			}
			if _, ok := retryInfo(r.err); !ok || len(r.trailer.Get(grpclimit.PushbackKey)) != 1 {
				t.Errorf("concurrency refusal without retry hints: %v %v", r.err, r.trailer)
			}
			svc.release <- struct{}{}
			if r := <-first; r.err != nil {
				t.Fatalf("first call: %v", r.err)
			}
			for i := range 3 {
				done := make(chan result, 1)
				go func() { done <- call(cc, "Slow") }()
				<-svc.entered
				svc.release <- struct{}{}
				if r := <-done; r.err != nil {
					t.Fatalf("call %d after release: %v", i, r.err)
				}
			}
			if svc.calls.Load() != 4 {
				t.Errorf("handler called %d times, want 4", svc.calls.Load())
			}
		})
	}
}

// TestFailClosed uses a Redis store whose server has been stopped: a
// fail_open method proceeds, a fail_closed one is Unavailable with retry
// hints.
func TestFailClosed(t *testing.T) {
	s := fixture.DeadRedisStore(t)
	svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: s})
	if r := call(cc, "Say"); r.err != nil {
		t.Fatalf("fail_open method: %v", r.err)
	}
	r := call(cc, "Pay")
	if status.Code(r.err) != codes.Unavailable || svc.calls.Load() != 1 {
		t.Fatalf("fail_closed method: %v, handler called %d times", r.err, svc.calls.Load())
	}
	if d, ok := retryInfo(r.err); !ok || d != time.Second {
		t.Errorf("RetryInfo %v %v", d, ok)
	}
	if got := r.trailer.Get(grpclimit.PushbackKey); len(got) != 1 || got[0] != "1000" {
		t.Errorf("pushback %q", got)
	}
}

// TestClientInterceptor: a client retrying with the interceptor gets every
// call of a burst through a limit of 2 per second, waiting as told, and
// one whose deadline is too near for the wait gets the refusal at once.
func TestClientInterceptor(t *testing.T) {
	t.Parallel() // it waits for calendar seconds in real time
	retry := grpclimit.UnaryClientInterceptor(grpclimit.RetryOptions{MaxRetries: 5, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t)}, grpc.WithUnaryInterceptor(retry))
			begin := time.Now()
			for i := range 5 {
				if r := call(cc, "Brief"); r.err != nil {
					t.Fatalf("call %d: %v", i, r.err)
				}
			}
			// Five calls at 2 per (calendar) second span at least two
			// window boundaries. Time is the property (the client waited
			// as told), and a lower bound: load only lengthens it.
			if el := time.Since(begin); el < time.Second {
				t.Errorf("5 calls through a limit of 2/s took %v", el)
			}
			if svc.calls.Load() != 5 {
				t.Errorf("handler called %d times, want 5", svc.calls.Load())
			}

			// Near its deadline, on a still clock: the free plan's 4th
			// call in a minute is told to wait 50 s, and one with 10 s
			// left is refused at once, tried once. "At once" is under 5 s
			// (one round trip, milliseconds, needs far less): a client
			// that waited would be held the whole 10 s.
			var tries atomic.Int64
			counting := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				tries.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			_, near := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t), Now: fixed}, grpc.WithChainUnaryInterceptor(retry, counting))
			for i := range 3 {
				if r := call(near, "Say"); r.err != nil {
					t.Fatalf("call %d of the free plan's 3: %v", i, r.err)
				}
			}
			tries.Store(0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			begin = time.Now()
			err := near.Invoke(ctx, "/test.Echo/Say", wrapperspb.String("x"), new(wrapperspb.StringValue))
			el := time.Since(begin)
			if d, ok := retryInfo(err); status.Code(err) != codes.ResourceExhausted || !ok || d != 50*time.Second {
				t.Fatalf("near deadline: %v, want the refusal with its 50 s to wait", err)
			}
			if n := tries.Load(); n != 1 || el > 5*time.Second {
				t.Errorf("near deadline: tried %d times over %v before giving up, want once at once", n, el)
			}
		})
	}
}

// TestGRPCRetryPolicy: grpc-go's own retry policy (service config, no
// interceptor) retries RESOURCE_EXHAUSTED after the pushback the server
// sends, so a burst gets through; without the policy it does not.
func TestGRPCRetryPolicy(t *testing.T) {
	t.Parallel() // it waits for calendar seconds in real time
	const config = `{"methodConfig": [{"name": [{"service": "test.Echo"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.05s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t)}, grpc.WithDefaultServiceConfig(config))
			begin := time.Now()
			for i := range 5 {
				if r := call(cc, "Brief"); r.err != nil {
					t.Fatalf("call %d: %v", i, r.err)
				}
			}
			if el := time.Since(begin); el < time.Second {
				t.Errorf("5 calls through a limit of 2/s took %v", el)
			}
			if svc.calls.Load() != 5 {
				t.Errorf("handler called %d times, want 5", svc.calls.Load())
			}
			// Without a retry policy, the burst is refused.
			_, plain := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: sc.new(t)})
			refused := 0
			for range 5 {
				if status.Code(call(plain, "Brief").err) == codes.ResourceExhausted {
					refused++
				}
			}
			if refused == 0 {
				t.Error("no refusal without a retry policy")
			}
		})
	}
}

// TestClientInterceptorLeavesOtherErrors: errors without a retry hint are
// returned at once, untried again.
func TestClientInterceptorLeavesOtherErrors(t *testing.T) {
	svc, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: stores()[0].new(t), Now: fixed},
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.RetryOptions{})))
	if r := call(cc, "Say", "x-api-key", "nope"); status.Code(r.err) != codes.Unauthenticated {
		t.Fatalf("bad key: %v", r.err)
	}
	if r := call(cc, "Login"); status.Code(r.err) != codes.FailedPrecondition {
		t.Fatalf("login: %v", r.err)
	}
	if svc.calls.Load() != 0 {
		t.Errorf("handler called %d times", svc.calls.Load())
	}
}

// TestRouteKeyedByMetadata: a route limit counted per a header is
// counted per that metadata key over gRPC too (Brief: 2 a second per
// x-org, whoever calls), and the metadata given twice is refused.
func TestRouteKeyedByMetadata(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			text := strings.Replace(policyText, "limit: {algorithm: fixed_window, rate: 2, period: 1s}}",
				`limit: {algorithm: fixed_window, rate: 2, period: 1s}, limit_key: ["header:X-Org"]}`, 1)
			b := make([]byte, 16)
			rand.Read(b)
			text = strings.NewReplacer("SECRET", hex.EncodeToString(b), "TRUSTED", "", "DIGEST", identity.KeyDigest(testKey)).Replace(text)
			p, err := policy.Parse([]byte(text), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			_, cc := start(t, grpclimit.Options{Policy: p, Store: sc.new(t), Now: fixed})
			for i, c := range []struct {
				md   []string
				want codes.Code
			}{
				{[]string{"x-org", "acme"}, codes.OK},
				{[]string{"x-org", "acme", "x-api-key", testKey}, codes.OK},
				{[]string{"x-org", "ACME"}, codes.ResourceExhausted},
				{[]string{"x-org", "other"}, codes.OK},
				{[]string{"x-org", "a", "x-org", "b"}, codes.InvalidArgument},
			} {
				if r := call(cc, "Brief", c.md...); status.Code(r.err) != c.want {
					t.Errorf("call %d %v: %v, want %v", i, c.md, r.err, c.want)
				}
			}
		})
	}
}
