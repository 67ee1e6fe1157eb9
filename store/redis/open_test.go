package redis_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/internal/redistest"
	rstore "github.com/tollgate/tollgate/store/redis"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestWaitConnected: a store from Open reports when it has reached Redis,
// and while it cannot, says why: ErrNotConnected with the last attempt's
// error, so a refused connection or a wrong password is not a bare "not
// connected yet".
func TestWaitConnected(t *testing.T) {
	locked := redistest.Start(t)
	admin := locked.NewClient(t)
	if err := admin.Do(context.Background(), admin.B().ConfigSet().ParameterValue().ParameterValue("requirepass", "right").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, why string
		opt       rueidis.ClientOption
		wait      time.Duration
		wantErr   string // "" for connected
	}{
		{"a healthy Redis", "it is reached at the first attempt, well within the wait",
			rueidis.ClientOption{InitAddress: []string{srv.Addr}}, 10 * time.Second, ""},
		{"the right password", "the store authenticates as its URL says",
			rueidis.ClientOption{InitAddress: []string{locked.Addr}, Password: "right"}, 10 * time.Second, ""},
		{"a closed port", "nothing listens: the wait ends, and the error says the connection was refused",
			rueidis.ClientOption{InitAddress: []string{closedAddr(t)}}, 300 * time.Millisecond, "connection refused"},
		{"a wrong password", "Redis answers but refuses the store: the error says so",
			rueidis.ClientOption{InitAddress: []string{locked.Addr}, Password: "wrong"}, 300 * time.Millisecond, "WRONGPASS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opt.DisableCache = true
			s, err := rstore.Open(c.opt, rstore.Options{ConnectRetry: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), c.wait)
			defer cancel()
			err = s.WaitConnected(ctx)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("WaitConnected: %v, want connected (%s)", err, c.why)
			case c.wantErr == "":
				if _, err := s.Client(); err != nil {
					t.Fatalf("connected, but Client: %v", err)
				}
			case !errors.Is(err, rstore.ErrNotConnected) || !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("WaitConnected: %v, want ErrNotConnected saying %q (%s)", err, c.wantErr, c.why)
			default:
				if _, cerr := s.Client(); !errors.Is(cerr, rstore.ErrNotConnected) || !strings.Contains(cerr.Error(), c.wantErr) {
					t.Fatalf("Client: %v, want ErrNotConnected saying %q", cerr, c.wantErr)
				}
			}
		})
	}
}

// TestWaitConnectedAfterClose: a closed store that never connected ends
// the wait at once.
func TestWaitConnectedAfterClose(t *testing.T) {
	s, err := rstore.Open(rueidis.ClientOption{InitAddress: []string{closedAddr(t)}}, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.WaitConnected(context.Background()); !errors.Is(err, rstore.ErrNotConnected) {
		t.Fatalf("WaitConnected after Close: %v, want ErrNotConnected", err)
	}
}
