package grpclimit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RetryOptions configures [UnaryClientInterceptor]; the zero value of
// every field is the default.
type RetryOptions struct {
	// MaxRetries is how many times a refused call is tried again; zero
	// means 3, a negative value none.
	MaxRetries int
	// BaseDelay is the backoff of the first retry; zero means 100ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff; zero means 10s.
	MaxDelay time.Duration
	// MaxWait is the longest server delay the interceptor honours: a
	// refusal asking for longer is returned at once, untried again, so a
	// server's hint (of centuries, say) never stalls a call without a
	// deadline; zero means 1 minute.
	MaxWait time.Duration
}

// UnaryClientInterceptor retries calls refused with
// codes.ResourceExhausted or codes.Unavailable that say when to retry (a
// google.rpc.RetryInfo detail or the grpc-retry-pushback-ms trailer, as
// the server interceptors send them): it waits the server's delay plus a
// capped exponential backoff with full jitter (a random wait between zero
// and min(MaxDelay, BaseDelay·2^n) for the n-th retry), so that clients
// refused together do not come back together, and tries again, up to
// MaxRetries times. It never waits past the call's deadline nor longer
// than MaxWait plus the backoff: when the server's delay is over MaxWait,
// or the wait would end after the deadline, the refusal is returned at
// once. Errors
// without a retry hint (a connection that cannot be made, a refusal of
// another service) are returned as they are.
func UnaryClientInterceptor(o RetryOptions) grpc.UnaryClientInterceptor {
	o = o.withDefaults()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for n := 0; ; n++ {
			var trailer metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
			if err == nil || n >= o.MaxRetries {
				return err
			}
			wait, ok := o.retryWait(ctx, err, trailer, n)
			if !ok || !sleep(ctx, wait) {
				return err
			}
		}
	}
}

// withDefaults returns o with every zero field set to its default.
func (o RetryOptions) withDefaults() RetryOptions {
	if o.MaxRetries == 0 {
		o.MaxRetries = 3
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 100 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 10 * time.Second
	}
	if o.MaxWait <= 0 {
		o.MaxWait = time.Minute
	}
	return o
}

// retryWait returns how long to wait before the n-th retry of a call
// refused with err and trailer: the server's delay plus the backoff. ok
// is false when the call is not to be tried again: the refusal has no
// retry hint, the hint is over MaxWait, or the wait would end after the
// call's deadline.
func (o RetryOptions) retryWait(ctx context.Context, err error, trailer metadata.MD, n int) (time.Duration, bool) {
	hint, ok := RetryDelay(err, trailer)
	if !ok || hint > o.MaxWait {
		return 0, false
	}
	// Both terms are capped (MaxWait, MaxDelay), so the sum is a
	// real wait; one that overflowed would fire at once.
	wait := hint + jitter(o.BaseDelay, o.MaxDelay, n)
	if wait < hint {
		return 0, false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		return 0, false
	}
	return wait, true
}

// sleep waits for d, and reports whether it did before ctx was done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C:
		return true
	}
}

// jitter returns a random duration in [0, min(max, base·2^n)).
func jitter(base, maxDelay time.Duration, n int) time.Duration {
	d := maxDelay
	if n < 30 && base<<n > 0 && base<<n < maxDelay {
		d = base << n
	}
	return rand.N(d)
}

// RetryDelay returns how long the server asks a refused call to wait
// before it is tried again: its RetryInfo detail, else the
// grpc-retry-pushback-ms value in trailer. ok is false for codes other
// than ResourceExhausted and Unavailable and for refusals without either.
// A delay too long for a time.Duration is the longest one (as RetryInfo's
// is), never a wrapped-around one.
func RetryDelay(err error, trailer metadata.MD) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	if d, ok := retryInfoDelay(st); ok {
		return d, true
	}
	return pushbackDelay(trailer)
}

// retryInfoDelay returns the delay of st's first RetryInfo detail that
// holds a delay that is not negative.
func retryInfoDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if dur := ri.GetRetryDelay().AsDuration(); dur >= 0 {
				return dur, true
			}
		}
	}
	return 0, false
}

// pushbackDelay returns the delay of the one grpc-retry-pushback-ms value
// in trailer, the longest time.Duration for one past it; ok is false for
// none, several, or one that is not a number of milliseconds.
func pushbackDelay(trailer metadata.MD) (time.Duration, bool) {
	vs := trailer.Get(PushbackKey)
	if len(vs) != 1 {
		return 0, false
	}
	ms, err := strconv.ParseUint(vs[0], 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if err != nil || ms > math.MaxInt64/uint64(time.Millisecond) {
		return math.MaxInt64, true
	}
	return time.Duration(ms) * time.Millisecond, true
}
