package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/grpclimit"
)

// TestClientInterceptorCapsServerHints is the attack of a hostile (or
// broken) server on its clients: refusals asking for centuries, in the
// RetryInfo detail or in a pushback trailer whose milliseconds overflow a
// time.Duration, on a call without a deadline. The client must neither
// stall (waiting the centuries) nor hammer (an overflowed wait firing at
// once): a hint over MaxWait is returned at once, untried again.
func TestClientInterceptorCapsServerHints(t *testing.T) {
	century := 100 * 365 * 24 * time.Hour
	withInfo := func(d *durationpb.Duration) error {
		st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	cases := []struct {
		name    string
		err     error
		trailer string
	}{
		{"RetryInfo of a century", withInfo(durationpb.New(century)), ""},
		{"RetryInfo of 10000 years", withInfo(&durationpb.Duration{Seconds: 315576000000}), ""},
		{"pushback of a century", status.Error(codes.ResourceExhausted, "slow down"), "3153600000000"},
		{"pushback overflowing to negative", status.Error(codes.Unavailable, "slow down"), "18446744073709"},
		{"pushback of MaxInt64 ms", status.Error(codes.ResourceExhausted, "slow down"), "9223372036854775807"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				calls++
				if c.trailer != "" {
					for _, o := range opts {
						if to, ok := o.(grpc.TrailerCallOption); ok {
							*to.TrailerAddr = metadata.Pairs(grpclimit.PushbackKey, c.trailer)
						}
					}
				}
				return c.err
			}
			ic := grpclimit.UnaryClientInterceptor(grpclimit.RetryOptions{MaxRetries: 5})
			ctx, cancel := context.WithCancel(context.Background()) // no deadline
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- ic(ctx, "/test.Echo/Say", nil, nil, nil, invoker) }()
			// Time is the property (the client does not stall on the
			// hint): 5 s, where returning at once takes microseconds.
			select {
			case err := <-res:
				if status.Code(err) != status.Code(c.err) {
					t.Errorf("returned %v, want the refusal", err)
				}
			case <-time.After(5 * time.Second):
				cancel()
				<-res
				t.Fatal("the client was still waiting on the server's hint after 5s")
			}
			if calls != 1 {
				t.Errorf("the call was tried %d times, want once (the hint is over MaxWait)", calls)
			}
		})
	}
}

// TestRetryDelaySaturates: a pushback trailer too large for a
// time.Duration reads as the longest one, never as a wrapped-around
// (negative or small) delay.
func TestRetryDelaySaturates(t *testing.T) {
	err := status.Error(codes.ResourceExhausted, "slow down")
	for _, ms := range []string{"18446744073709", "9223372036854775807", "9223372036854776"} {
		d, ok := grpclimit.RetryDelay(err, metadata.Pairs(grpclimit.PushbackKey, ms))
		if !ok || d < 100*365*24*time.Hour {
			t.Errorf("pushback %s ms read as %v, %v; want at least a century", ms, d, ok)
		}
	}
}
