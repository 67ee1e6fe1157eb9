package overload_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/overload"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// phase offers load requests each window, for windows windows, each
// admitted request ending at the window's end having taken latency.
type phase struct {
	latency time.Duration
	windows int
	load    int
}

// drive runs phases on l from now, and returns the time they end.
func drive(l *overload.Limiter, now time.Time, window time.Duration, phases ...phase) time.Time {
	for _, p := range phases {
		for range p.windows {
			var slots []overload.Slot
			for range p.load {
				if s, ok := l.Acquire(0, false, now); ok {
					slots = append(slots, s)
				}
			}
			now = now.Add(window)
			for _, s := range slots {
				l.Release(s, p.latency, true, now)
			}
		}
	}
	return now
}

// TestLimit: the gradient over the minimum RTT lowers the limit when the
// latency rises above it, raises it when the latency falls back, keeps it
// within [MinLimit, MaxLimit], and follows an upstream that got slower or
// faster for good once the minimum RTT is measured again.
func TestLimit(t *testing.T) {
	const ms = time.Millisecond
	cfg := overload.Config{MinLimit: 3, MaxLimit: 200, Window: 100 * ms, MinRTTInterval: time.Minute, MinRTTSamples: 30}
	warm := phase{latency: 20 * ms, windows: 30, load: 400} // measures 20 ms, then grows
	noBuffer := cfg
	noBuffer.Buffer = overload.NoBuffer
	for _, tc := range []struct {
		name, reason string
		cfg          *overload.Config // cfg if nil
		phases       []phase
		lo, hi       int           // the limit after them
		minRTT       time.Duration // measured by then
	}{
		{name: "starts measuring", reason: "a new limiter admits MinLimit until it has measured the minimum RTT",
			phases: []phase{{latency: 20 * ms, windows: 5, load: 100}}, lo: 3, hi: 3},
		{name: "grows at the minimum", reason: "latency at the minimum RTT gives a gradient of 1.25 (the buffer), plus the headroom: the limit grows to MaxLimit",
			phases: []phase{warm}, lo: 200, hi: 200, minRTT: 20 * ms},
		{name: "falls when slower", reason: "latency 3x the minimum gives a gradient of 0.5 each window: the limit falls to MinLimit",
			phases: []phase{warm, {latency: 60 * ms, windows: 20, load: 400}}, lo: 3, hi: 6, minRTT: 20 * ms},
		{name: "settles", reason: "latency 1.5x the minimum is a gradient of 5/6 each window, which the headroom balances at g/(1-g)^2 = 30",
			phases: []phase{warm, {latency: 30 * ms, windows: 100, load: 400}}, lo: 25, hi: 31, minRTT: 20 * ms},
		{name: "no buffer", reason: "without a buffer latency 1.25x the minimum is a gradient of 0.8, balanced at g/(1-g)^2 = 20 (with the default buffer it would be 1: the limit would grow to MaxLimit); defaults applied twice, as the policy and New do, keep no buffer",
			cfg: ptr(noBuffer.WithDefaults()), phases: []phase{warm, {latency: 25 * ms, windows: 100, load: 400}}, lo: 17, hi: 21, minRTT: 20 * ms},
		{name: "rises back", reason: "once the latency is back at the minimum, the limit grows back to MaxLimit",
			phases: []phase{warm, {latency: 60 * ms, windows: 20, load: 400}, {latency: 20 * ms, windows: 20, load: 400}}, lo: 200, hi: 200, minRTT: 20 * ms},
		{name: "application-limited", reason: "a window whose peak in flight is under half the limit is no evidence the upstream takes more: the limit stays",
			phases: []phase{{latency: 20 * ms, windows: 30, load: 10}}, lo: 3, hi: 30, minRTT: 20 * ms},
		{name: "slower for good", reason: "an upstream 4x slower for good first drives the limit to MinLimit; a minute on, the minimum RTT measured again is 80 ms, and the limit grows back",
			phases: []phase{warm, {latency: 80 * ms, windows: 660, load: 400}}, lo: 200, hi: 200, minRTT: 80 * ms},
		{name: "faster for good", reason: "an upstream faster for good is measured again too: the new minimum is 5 ms",
			phases: []phase{warm, {latency: 5 * ms, windows: 660, load: 400}}, lo: 200, hi: 200, minRTT: 5 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				c = *tc.cfg
			}
			l := overload.New(c, t0)
			drive(l, t0, c.Window, tc.phases...)
			if got := l.Limit(); got < tc.lo || got > tc.hi {
				t.Errorf("limit %d, want %d to %d: %s", got, tc.lo, tc.hi, tc.reason)
			}
			if got := l.MinRTT(); got != tc.minRTT {
				t.Errorf("min RTT %v, want %v: %s", got, tc.minRTT, tc.reason)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestBounds: whatever the latencies, the limit stays in [MinLimit,
// MaxLimit].
func TestBounds(t *testing.T) {
	cfg := overload.Config{MinLimit: 5, MaxLimit: 50, MinRTTSamples: 10, Window: time.Second}
	l := overload.New(cfg, t0)
	now := t0
	lat := []time.Duration{time.Millisecond, time.Second, 10 * time.Millisecond, time.Hour, 0, 3 * time.Millisecond}
	for i := range 2000 {
		now = drive(l, now, time.Second, phase{latency: lat[i%len(lat)] * time.Duration(1+i%7), windows: 1, load: 100})
		if got := l.Limit(); got < 5 || got > 50 {
			t.Fatalf("window %d: limit %d, outside [5, 50]", i, got)
		}
	}
}

// TestMinRTTWindow: the minimum RTT is measured only on requests admitted
// in its window (one admitted before it waited behind a larger limit),
// the limit is MinLimit meanwhile, and the limit before it is restored.
func TestMinRTTWindow(t *testing.T) {
	const ms = time.Millisecond
	cfg := overload.Config{MinLimit: 2, MaxLimit: 100, Window: 100 * ms, MinRTTInterval: 10 * time.Second, MinRTTSamples: 4}
	l := overload.New(cfg, t0)
	now := drive(l, t0, cfg.Window, phase{latency: 10 * ms, windows: 40, load: 200})
	before := l.Limit()
	if before != 100 {
		t.Fatalf("limit %d before the window, want 100", before)
	}
	var old []overload.Slot
	for range 50 {
		s, _ := l.Acquire(0, false, now)
		old = append(old, s)
	}
	now = t0.Add(12 * time.Second) // past the interval and its jitter
	if l.Admits(0, now); !l.Measuring() || l.Limit() != 2 {
		t.Fatalf("at the interval: measuring %v, limit %d; want a window at MinLimit 2", l.Measuring(), l.Limit())
	}
	for _, s := range old {
		l.Release(s, 500*ms, true, now) // queued behind the old limit: not the upstream's minimum
	}
	if !l.Measuring() {
		t.Fatal("requests admitted before the window ended it")
	}
	for range 2 {
		a, _ := l.Acquire(0, false, now)
		b, _ := l.Acquire(0, false, now)
		if _, ok := l.Acquire(0, false, now); ok {
			t.Fatal("admitted a third request in a window at MinLimit 2")
		}
		l.Release(a, 12*ms, true, now)
		l.Release(b, 12*ms, true, now)
	}
	if l.Measuring() || l.MinRTT() != 12*ms || l.Limit() != before {
		t.Fatalf("after the window: measuring %v, min RTT %v, limit %d; want done, 12ms, %d", l.Measuring(), l.MinRTT(), l.Limit(), before)
	}
}

// TestShares: each class is guaranteed its share of the limit, rounded
// down, and borrows what the others leave unused; a class without a
// share only borrows.
func TestShares(t *testing.T) {
	// A limiter at MinLimit 10 while it measures: a limit of 10.
	cfg := overload.Config{MinLimit: 10, MaxLimit: 10, Shares: []float64{0.6, 0.2}}
	const pro, free, none = 0, 1, 5
	for _, tc := range []struct {
		name, reason string
		held         map[int]int // in flight per class
		class        int
		want         bool
	}{
		{name: "idle", reason: "nothing in flight: any class is admitted", class: none, want: true},
		{name: "free borrows", reason: "free may hold 4 (10 less pro's 6 unused), so its 3rd is admitted",
			held: map[int]int{free: 2}, class: free, want: true},
		{name: "free stops at pro's share", reason: "free holds 4: pro's 6 unused slots are pro's",
			held: map[int]int{free: 4}, class: free, want: false},
		{name: "pro under its share", reason: "pro is guaranteed 6 whatever free holds", held: map[int]int{free: 4, pro: 5}, class: pro, want: true},
		{name: "limit binds for pro", reason: "10 in flight: nobody, pro included, gets past the limit", held: map[int]int{free: 4, pro: 6}, class: pro, want: false},
		{name: "no share, free unused", reason: "a class without a share leaves free's 2 and pro's 6 unless they are used: 2 left",
			held: map[int]int{none: 1}, class: none, want: true},
		{name: "no share, reserved", reason: "the shareless class holds 2; the other 8 are pro's and free's", held: map[int]int{none: 2}, class: none, want: false},
		{name: "pro borrows free's", reason: "pro past its 6 borrows the 2 nobody is guaranteed; free uses its own 2",
			held: map[int]int{pro: 7, free: 2}, class: pro, want: true},
		{name: "pro leaves free's", reason: "pro holds 8: free's 2 are free's", held: map[int]int{pro: 8}, class: pro, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := overload.New(cfg, t0)
			for c, n := range tc.held {
				for range n {
					l.Acquire(c, true, t0)
				}
			}
			if got := l.Admits(tc.class, t0); got != tc.want {
				t.Errorf("admits %v, want %v: %s", got, tc.want, tc.reason)
			}
		})
	}
}

// TestForce: a forced acquire (shadow mode) is admitted and counted in
// flight, and reports it was past the limit.
func TestForce(t *testing.T) {
	l := overload.New(overload.Config{MinLimit: 1, MaxLimit: 1}, t0)
	if _, ok := l.Acquire(0, true, t0); !ok {
		t.Fatal("the first request is within a limit of 1")
	}
	if _, ok := l.Acquire(0, true, t0); ok {
		t.Fatal("the second request is past a limit of 1, yet reported within")
	}
	if l.InFlight() != 2 {
		t.Fatalf("in flight %d, want 2: a forced request is in flight", l.InFlight())
	}
}
