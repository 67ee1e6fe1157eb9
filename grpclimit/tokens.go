package grpclimit

import (
	"context"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/engine"
)

// The trailer keys a handler of a token route (policy.Route.Tokens) sets
// to report what its call used, in tokens: they settle the call's token
// budgets when it ends. A call is estimated, when it arrives, at the
// route's default_output. A handler that sets neither leaves its call at
// the estimate, unless it fails (a non-OK status), which used nothing.
const (
	InputTokensKey  = "tollgate-input-tokens"
	OutputTokensKey = "tollgate-output-tokens"
)

// trailers records the trailers a handler sets, for the usage they report.
type trailers struct {
	mu sync.Mutex
	md metadata.MD
}

func (t *trailers) add(md metadata.MD) {
	t.mu.Lock()
	t.md = metadata.Join(t.md, md)
	t.mu.Unlock()
}

// usage returns what the trailers report, for a handler that returned
// err.
func (t *trailers) usage(err error) engine.Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	in, inOK, inBad := count(t.md, InputTokensKey)
	out, outOK, outBad := count(t.md, OutputTokensKey)
	switch {
	case inBad || outBad:
		return engine.Usage{Input: in, Output: out, Reported: true, Impossible: true}
	case inOK || outOK:
		return engine.Usage{Input: in, Output: out, Reported: true}
	}
	return engine.Usage{Failed: err != nil}
}

// count reads the one count md gives under key: ok when it gives one,
// bad when it gives one that is not a whole number of at least 0, or
// gives several.
func count(md metadata.MD, key string) (n int64, ok, bad bool) {
	vs := md.Get(key)
	if len(vs) == 0 {
		return 0, false, false
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || n < 0 || len(vs) > 1 {
		return 0, true, true
	}
	return n, true, false
}

// usageStream is a unary call's transport stream, recording the trailers
// its handler sets (grpc.SetTrailer).
type usageStream struct {
	grpc.ServerTransportStream
	t *trailers
}

func (s *usageStream) SetTrailer(md metadata.MD) error {
	s.t.add(md)
	return s.ServerTransportStream.SetTrailer(md)
}

// withTrailers returns ctx whose transport stream records into t the
// trailers a unary handler sets, or ctx when it has none.
func withTrailers(ctx context.Context, t *trailers) context.Context {
	ts := grpc.ServerTransportStreamFromContext(ctx)
	if ts == nil {
		return ctx
	}
	return grpc.NewContextWithServerTransportStream(ctx, &usageStream{ServerTransportStream: ts, t: t})
}
