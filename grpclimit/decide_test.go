package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/grpclimit"
	"github.com/tollgate/tollgate/internal/decidetest"
)

// TestDecideTable runs the engine's table (internal/decidetest) through
// the unary interceptor: each call's path as its full method, its headers
// as metadata, its address as the peer's, and each answer read back from
// the status and the ratelimit metadata. Cases that need HTTP are not
// run.
func TestDecideTable(t *testing.T) {
	var cases []decidetest.Case
	for _, c := range decidetest.Cases {
		if !c.HTTP {
			cases = append(cases, c)
		}
	}
	decidetest.Run(t, cases, decidetest.MemoryStore, func(t *testing.T, f decidetest.Front) (func(decidetest.Call) decidetest.Answer, func()) {
		l, err := grpclimit.New(grpclimit.Options{Policy: f.Policy, Store: f.Store, Now: decidetest.Clock, RequireRoute: f.RequireRoute})
		if err != nil {
			t.Fatal(err)
		}
		return grpcFront(t, l.Unary())
	})
}

func grpcFront(t *testing.T, unary grpc.UnaryServerInterceptor) (func(decidetest.Call) decidetest.Answer, func()) {
	release := make(chan struct{})
	call := func(c decidetest.Call) decidetest.Answer {
		md := metadata.MD{}
		for k, v := range c.Header {
			md.Set(strings.ToLower(k), v)
		}
		addr, err := net.ResolveTCPAddr("tcp", c.RemoteAddr)
		if err != nil {
			t.Fatal(err)
		}
		st := &transportStream{method: c.Path}
		ctx := grpc.NewContextWithServerTransportStream(peer.NewContext(metadata.NewIncomingContext(context.Background(), md), &peer.Peer{Addr: addr}), st)
		var kind string
		entered := make(chan struct{})
		handler := func(ctx context.Context, _ any) (any, error) {
			info, _ := grpclimit.FromContext(ctx)
			kind = info.Subject.Kind
			close(entered)
			if c.Hold {
				<-release
			}
			return nil, nil
		}
		done := make(chan error, 1)
		go func() {
			_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: c.Path}, handler)
			done <- err
		}()
		select {
		case <-entered:
			if !c.Hold {
				err = <-done
			}
		case err = <-done:
		}
		return grpcAnswer(err, st, kind)
	}
	return call, func() { close(release) }
}

// grpcAnswer reads the table's answer off a call's end: admitted when the
// handler ran, the refusal from the status, the budget from the ratelimit
// metadata (the header, or the trailer of a refusal), the wait from the
// pushback, in whole seconds rounded up.
func grpcAnswer(err error, st *transportStream, kind string) decidetest.Answer {
	a := decidetest.Answer{Admitted: kind != "", Kind: kind}
	rl := append(st.header.Get("ratelimit"), st.trailer.Get("ratelimit")...)
	if len(rl) > 0 {
		name, rest, _ := strings.Cut(strings.TrimPrefix(rl[0], `"`), `";r=`)
		r, _, _ := strings.Cut(rest, ";")
		a.Budget = name
		a.Remaining, _ = strconv.ParseInt(r, 10, 64)
	}
	if a.Admitted {
		return a
	}
	if p := st.trailer.Get(grpclimit.PushbackKey); len(p) > 0 {
		ms, _ := strconv.ParseInt(p[0], 10, 64)
		a.RetryAfter = (ms + 999) / 1000
	}
	s := status.Convert(err)
	switch {
	case s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "limit of"):
		a.Refusal = decidetest.Rate
	case s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "in flight"):
		a.Refusal = decidetest.Concurrency
	case s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "invalid API keys"):
		a.Refusal = decidetest.InvalidKeys
	case s.Code() == codes.Unauthenticated:
		a.Refusal = decidetest.InvalidKey
	case s.Code() == codes.InvalidArgument:
		a.Refusal = decidetest.BadRequest
	case s.Code() == codes.Unavailable && strings.Contains(s.Message(), "identity provider's keys"):
		a.Refusal = decidetest.KeysUnavailable
	case s.Code() == codes.Unavailable:
		a.Refusal = decidetest.Unavailable
	case s.Code() == codes.Unimplemented:
		a.Refusal = decidetest.NoRoute
	default:
		a.Refusal = decidetest.Other
	}
	return a
}

// transportStream is the server side of a call as grpc.SetHeader and
// grpc.SetTrailer reach it, keeping what they set.
type transportStream struct {
	method          string
	header, trailer metadata.MD
}

func (s *transportStream) Method() string { return s.method }
func (s *transportStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *transportStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *transportStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}
