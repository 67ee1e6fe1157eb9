package grpclimit_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/grpclimit"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

const tokenPolicyText = `version: t1
identity: {secret: 0123456789abcdef0123456789abcdef}
plans:
  free:
    limits:
      - {name: tpm, algorithm: fixed_window, rate: 1000, period: 1m, unit: tokens}
routes:
  - {name: complete, path: /test.LLM/Complete, tokens: {default_output: 100, bytes_per_input_token: 0}}
  - {name: stream, path: /test.LLM/Stream, tokens: {default_output: 100, bytes_per_input_token: 0}}
`

// report sets the usage trailers a request asks for: "input,output", or
// "" for none, "fail" to fail having set none, "bad" for a count that is
// not one.
func report(set func(metadata.MD), ask string) error {
	switch ask {
	case "":
		return nil
	case "fail":
		return status.Error(codes.Unavailable, "the model is overloaded")
	case "bad":
		set(metadata.Pairs(grpclimit.OutputTokensKey, "-3"))
		return nil
	}
	in, out, _ := strings.Cut(ask, ",")
	set(metadata.Pairs(grpclimit.InputTokensKey, in, grpclimit.OutputTokensKey, out))
	return nil
}

var llmDesc = grpc.ServiceDesc{
	ServiceName: "test.LLM",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Complete", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			err := report(func(md metadata.MD) { grpc.SetTrailer(ctx, md) }, req.(*wrapperspb.StringValue).GetValue())
			return in, err
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.LLM/Complete"}, h)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil && err != io.EOF {
			return err
		}
		if err := ss.SendMsg(in); err != nil {
			return err
		}
		return report(ss.SetTrailer, in.GetValue())
	}}},
}

// TestTokenTrailers: a token route's handler settles its call with the
// trailers it sets, unary or streamed; a call estimated at the route's
// default (100) that reports none keeps it, one that fails used nothing.
func TestTokenTrailers(t *testing.T) {
	p, err := policy.Parse([]byte(tokenPolicyText), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := memory.New(memory.Options{})
	t.Cleanup(func() { s.Close() })
	l, err := grpclimit.New(grpclimit.Options{Policy: p, Store: s, Now: fixed})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary()), grpc.ChainStreamInterceptor(l.Stream()))
	gs.RegisterService(&llmDesc, nil)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	unary := func(ask string) (metadata.MD, error) {
		var h metadata.MD
		err := cc.Invoke(context.Background(), "/test.LLM/Complete", wrapperspb.String(ask), new(wrapperspb.StringValue), grpc.Header(&h))
		return h, err
	}
	streamed := func(ask string) (metadata.MD, error) {
		st, err := cc.NewStream(context.Background(), &llmDesc.Streams[0], "/test.LLM/Stream")
		if err != nil {
			return nil, err
		}
		if err := st.SendMsg(wrapperspb.String(ask)); err != nil {
			return nil, err
		}
		st.CloseSend()
		h, _ := st.Header()
		for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
		}
		return h, nil
	}
	// remaining is the RateLimit header of a probe that uses nothing: a
	// call settles before its answer is sent, so it counts every call
	// before it, and its own estimate (100) until it settles.
	remaining := func() string {
		h, err := unary("0,0")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(h.Get("ratelimit"), "")
	}
	steps := []struct {
		call func(string) (metadata.MD, error)
		ask  string
		want string // the probe's RateLimit after it: 1000 − what was charged − the probe's 100 (t: the window's 50 s left)
		why  string
	}{
		{unary, "10,20", `"free.tpm";r=870;t=50`, "a unary call settled at its trailers: 30"},
		{streamed, "5,5", `"free.tpm";r=860;t=50`, "a stream settled at its trailers: 10"},
		{unary, "", `"free.tpm";r=760;t=50`, "no trailers: the estimate, 100, stands"},
		{unary, "fail", `"free.tpm";r=760;t=50`, "a failed call used nothing"},
		{streamed, "bad", `"free.tpm";r=660;t=50`, "a count that is not one: the estimate stands"},
	}
	for _, s := range steps {
		if _, err := s.call(s.ask); err != nil && s.ask != "fail" {
			t.Fatalf("%s: %v", s.why, err)
		}
		if got := remaining(); got != s.want {
			t.Errorf("%s: RateLimit %s, want %s", s.why, got, s.want)
		}
	}
}
