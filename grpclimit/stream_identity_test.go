package grpclimit_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/grpclimit"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/policy"
)

// TestStreamSlotReleasedWhenTheClientGoesAway: a stream holding the one
// concurrency slot of Chat gives it back when the client cancels it
// (RST_STREAM) or its deadline passes, without ever closing its side:
// a client walking away cannot keep the slot from the next one.
func TestStreamSlotReleasedWhenTheClientGoesAway(t *testing.T) {
	t.Parallel() // it waits for deadlines in real time
	b := make([]byte, 16)
	rand.Read(b)
	text := strings.NewReplacer("SECRET", hex.EncodeToString(b), "TRUSTED", "", "DIGEST", identity.KeyDigest(testKey),
		"  - {name: chat, path: /test.Echo/Chat}",
		"  - {name: chat, path: /test.Echo/Chat, concurrency: {limit: 1, per: route}, limit: {algorithm: fixed_window, rate: 1000, period: 1m}}").Replace(policyText)
	p, err := policy.Parse([]byte(text), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			svc, cc := start(t, grpclimit.Options{Policy: p, Store: sc.new(t)})
			// open starts a stream and waits for its first echo: it holds
			// the slot.
			open := func(ctx context.Context) error {
				s, err := cc.NewStream(ctx, &chatDesc, "/test.Echo/Chat")
				if err != nil {
					return err
				}
				if err := s.SendMsg(wrapperspb.String("m")); err != nil {
					return s.RecvMsg(new(wrapperspb.StringValue))
				}
				return s.RecvMsg(new(wrapperspb.StringValue))
			}
			// admittedSoon opens streams until one is admitted (the
			// server ends the previous one asynchronously), for at most 5s.
			admittedSoon := func(ctx context.Context) error {
				give := time.Now().Add(5 * time.Second)
				for {
					err := open(ctx)
					if status.Code(err) != codes.ResourceExhausted || time.Now().After(give) {
						return err
					}
				}
			}
			for i, how := range []string{"cancel", "deadline", "cancel", "deadline"} {
				var ctx context.Context
				var cancel context.CancelFunc
				if how == "cancel" {
					ctx, cancel = context.WithCancel(context.Background())
				} else {
					ctx, cancel = context.WithTimeout(context.Background(), time.Second)
				}
				if err := admittedSoon(ctx); err != nil {
					cancel()
					t.Fatalf("stream %d (%s): %v", i, how, err)
				}
				// While it is open, a second stream is refused.
				other, stop := context.WithTimeout(context.Background(), 5*time.Second)
				if err := open(other); how == "cancel" && status.Code(err) != codes.ResourceExhausted {
					t.Errorf("second stream while %d is open: %v", i, err)
				}
				stop()
				if how == "cancel" {
					cancel()
				} else {
					<-ctx.Done()
					cancel()
				}
			}
			if n := svc.calls.Load(); n != 4 {
				t.Errorf("handler called %d times, want 4", n)
			}
		})
	}
}

// TestCredentialSpellings: whatever way a client spells or repeats its
// credentials in metadata, it is charged to one subject or refused:
// two keys (the same key twice through a case variant, two values,
// a comma list, a key and another bearer) are Unauthenticated, a -bin
// key is not a credential, an unknown scheme is not a key.
func TestCredentialSpellings(t *testing.T) {
	_, cc := start(t, grpclimit.Options{Policy: testPolicy(t, ""), Store: stores()[0].new(t), Now: fixed})
	cases := []struct {
		md   []string
		want string // subject kind, or the status code's name
	}{
		{[]string{"x-api-key", testKey, "x-api-key", "other"}, "Unauthenticated"},
		{[]string{"x-api-key", "other", "x-api-key", testKey}, "Unauthenticated"},
		{[]string{"X-Api-Key", testKey, "x-api-key", testKey}, "Unauthenticated"},
		{[]string{"x-api-key", testKey + ",other"}, "Unauthenticated"},
		{[]string{"x-api-key", testKey, "authorization", "Bearer other"}, "Unauthenticated"},
		{[]string{"authorization", "Bearer " + testKey, "authorization", "Bearer other"}, "Unauthenticated"},
		{[]string{"authorization", "bearer " + testKey}, "key"},
		{[]string{"authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(testKey+":"))}, "key"},
		{[]string{"authorization", "Token " + testKey}, "key"}, // as Rails and Django REST framework read it
		{[]string{"authorization", "Digest " + testKey}, "ip"},
		{[]string{"x-api-key-bin", testKey}, "ip"},
		{[]string{"x-user-id", "alice"}, "ip"}, // no trusted proxies
	}
	for _, c := range cases {
		r := call(cc, "Say", c.md...)
		got := status.Code(r.err).String()
		if r.err == nil {
			got, _, _ = strings.Cut(r.out, "|")
		}
		if got != c.want {
			t.Errorf("%q: %s (%v), want %s", c.md, got, r.err, c.want)
		}
	}
}
