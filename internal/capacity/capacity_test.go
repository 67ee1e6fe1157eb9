package capacity_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/capacity"
)

// TestQueues: under its capacity (4 workers of 50 ms: 80/s) every
// request takes the service time; offered twice it, the queue makes the
// later ones wait, and it serves no more than its capacity.
func TestQueues(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		rate         float64
		slow         bool // the p99 is well past the service time
	}{
		{name: "under", reason: "at half the capacity nobody waits", rate: 40},
		{name: "over", reason: "at twice the capacity the queue grows by 80 a second", rate: 160, slow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := capacity.New(4, 50*time.Millisecond)
			srv := httptest.NewServer(up)
			defer srv.Close()
			defer up.Stop()
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
			defer c.CloseIdleConnections()
			start := time.Now()
			s := capacity.Summarize(capacity.Offer(context.Background(), c, srv.URL, tc.rate, 2*time.Second, func(int) (string, http.Header) { return "x", nil }), 0, 2*time.Second)
			took := time.Since(start)
			if s.OK != s.Sent || s.P50 < 50*time.Millisecond {
				t.Fatalf("%+v: want every request served, none under 50 ms (%s)", s, tc.reason)
			}
			if slow := s.P99 > 500*time.Millisecond; slow != tc.slow {
				t.Errorf("p99 %v: slow %v, want %v (%s)", s.P99, slow, tc.slow, tc.reason)
			}
			if rate := float64(up.Served()) / took.Seconds(); rate > 80*1.05 {
				t.Errorf("served %.0f/s, more than its capacity of 80/s", rate)
			}
		})
	}
}
