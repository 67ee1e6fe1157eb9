// Package overload is an adaptive concurrency limit: it bounds the
// requests in flight to an upstream by the upstream's own latency, with
// no number chosen in advance, and sheds the lower classes (plans) first
// when the limit binds. It is pure: every method takes the time it is
// called at, and nothing in it reads a clock or sleeps.
//
// The algorithm is Envoy's adaptive_concurrency filter, its gradient
// controller
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/adaptive_concurrency_filter),
// with its parameters and defaults:
//
//   - every sample window (concurrency_update_interval; Config.Window,
//     default 100 ms) the latencies of the requests that ended in it are
//     summarised by their 50th percentile (sample_aggregate_percentile),
//     the sample RTT;
//   - gradient = (minRTT × (1 + buffer)) / sampleRTT, clamped to [0.5, 2]
//     (Config.Buffer, min_rtt_calc_params.buffer, default 25 %);
//   - limit = limit × gradient + √(limit × gradient) (the burst headroom),
//     clamped to [min_limit, max_limit] (min_concurrency, default 3;
//     max_concurrency_limit, default 1000);
//   - the minimum RTT is measured when the limiter starts and again every
//     min_rtt_interval (default 60 s, plus up to 10 % jitter): the limit
//     drops to min_limit until min_rtt_samples requests (request_count,
//     default 50) have ended, and their 50th percentile is the new
//     minimum RTT; then the limit before the window is restored. So an
//     upstream that got slower or faster for good is followed within one
//     interval.
//
// Three refinements on Envoy's controller, each stated where it acts: a
// minimum RTT window counts only the requests admitted in it (one
// admitted before it waited behind a larger limit, and would measure the
// queue, not the upstream); the limit does not grow in a window whose
// peak in flight stayed under half of it (Netflix concurrency-limits'
// Gradient2 rule for an application-limited client), so an idle upstream
// is not granted max_limit at once the moment load arrives; and each
// window moves the limit half-way to the gradient's, not all the way
// (Gradient2's smoothing), which damps the swings of a limit recomputed
// from latencies one window old: in a simulation of the gateway test's
// saturated upstream, they made the p99 of the admitted requests about
// 1.8 times the unloaded one, and damped it is about 1.5 times; a halved
// capacity is followed in about 3 windows where it took 2.
//
// Shedding by priority: each class is guaranteed its share of the limit
// (Config.Shares, rounded up) and may borrow what the others leave
// unused; a request is admitted while the requests in flight, plus the
// slots the other classes are guaranteed and do not use, stay under the
// limit. So when the limit binds, the classes with no share (or a
// smaller one) are refused first.
package overload

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Config configures a Limiter; the zero value of each field is its
// default (Envoy's).
type Config struct {
	// MinLimit is the least the limit falls to, and the limit while the
	// minimum RTT is measured. Default 3.
	MinLimit int
	// MaxLimit is the most the limit grows to. Default 1000.
	MaxLimit int
	// Window is how often the limit is recomputed from the latencies
	// sampled since. Default 100 ms.
	Window time.Duration
	// MinRTTInterval is how often the minimum RTT is measured again.
	// Default 60 s.
	MinRTTInterval time.Duration
	// MinRTTSamples is how many requests measure the minimum RTT.
	// Default 50.
	MinRTTSamples int
	// Buffer is the fraction of the minimum RTT added to it before it is
	// compared with the sample RTT (min_rtt_calc_params.buffer): the
	// latency the limit lets a queue add, for stability against natural
	// variation. Less keeps latency nearer the minimum, at the risk of a
	// limit below what the upstream could serve. Default 0.25; set
	// NoBuffer for none.
	Buffer float64
	// Shares are the fractions of the limit each class is guaranteed,
	// indexed by class; their sum is at most 1. A class past the end (or
	// a negative one) has no share: it only borrows.
	Shares []float64
	// Seed seeds the jitter of MinRTTInterval, so that gateways sharing
	// an upstream do not measure it all at once.
	Seed uint64
}

// The fixed parameters of Envoy's gradient controller.
const (
	percentile = 0.5  // sample_aggregate_percentile
	jitter     = 0.10 // min_rtt_calc_params.jitter
	maxSamples = 4096 // latencies kept per window: more say nothing new
	// smoothing is how far each window moves the limit towards the
	// gradient's (Netflix Gradient2's smoothing; Envoy moves it all the
	// way).
	smoothing = 0.5
)

// NoBuffer is the Buffer of no buffer at all (zero is the default).
const NoBuffer = -1

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.MinLimit == 0 {
		c.MinLimit = 3
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = max(1000, c.MinLimit)
	}
	if c.Window == 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.MinRTTInterval == 0 {
		c.MinRTTInterval = time.Minute
	}
	if c.MinRTTSamples == 0 {
		c.MinRTTSamples = 50
	}
	if c.Buffer == 0 {
		c.Buffer = 0.25 // NoBuffer stays: the defaults apply again in New
	}
	return c
}

// Limiter is one adaptive concurrency limit. It is not safe for
// concurrent use: its caller locks around it.
type Limiter struct {
	cfg   Config
	rng   *rand.Rand
	limit int
	// in flight, in all and per class (the last entry: no share).
	total    int
	inFlight []int
	peak     int // the most in flight in this window

	minRTT     time.Duration // 0 until first measured
	nextUpdate time.Time     // when the window ends
	samples    []time.Duration
	measuring  bool    // in a minimum RTT window
	epoch      uint64  // counts minimum RTT windows: a slot's says when it was admitted
	deferred   float64 // the estimate to restore after the window
	// estimate is the limit before it is rounded: the smoothing moves it
	// by less than one.
	estimate    float64
	nextMeasure time.Time // when the next minimum RTT window begins
}

// Slot is a request admitted by a Limiter, to give back with Release.
type Slot struct {
	class int
	epoch uint64
}

// New returns a limiter under cfg (its defaults applied) that starts, at
// now, by measuring the minimum RTT.
func New(cfg Config, now time.Time) *Limiter {
	cfg = cfg.WithDefaults()
	l := &Limiter{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		limit: cfg.MinLimit, estimate: float64(cfg.MinLimit), inFlight: make([]int, len(cfg.Shares)+1), nextUpdate: now.Add(cfg.Window)}
	l.startMeasuring()
	return l
}

// Limit returns the current limit.
func (l *Limiter) Limit() int { return l.limit }

// MinRTT returns the last measured minimum RTT, 0 before the first.
func (l *Limiter) MinRTT() time.Duration { return l.minRTT }

// InFlight returns the requests in flight.
func (l *Limiter) InFlight() int { return l.total }

// Measuring reports whether the minimum RTT is being measured (the limit
// is then MinLimit).
func (l *Limiter) Measuring() bool { return l.measuring }

func (l *Limiter) classOf(class int) int {
	if class < 0 || class >= len(l.cfg.Shares) {
		return len(l.cfg.Shares)
	}
	return class
}

// guaranteed returns how many slots of the limit class is guaranteed:
// its share, rounded up (a class with a share has at least one slot).
func (l *Limiter) guaranteed(class int) int {
	if class >= len(l.cfg.Shares) {
		return 0
	}
	return int(math.Ceil(l.cfg.Shares[class] * float64(l.limit)))
}

// Admits reports whether a request of class would be admitted now: the
// requests in flight, and the slots the other classes are guaranteed and
// leave unused, are fewer than the limit.
func (l *Limiter) Admits(class int, now time.Time) bool {
	l.tick(now)
	class = l.classOf(class)
	reserved := 0
	for c := range l.cfg.Shares {
		if c != class {
			reserved += max(0, l.guaranteed(c)-l.inFlight[c])
		}
	}
	return l.total+reserved < l.limit
}

// Acquire admits a request of class at now if Admits, and counts it in
// flight until its Release; force admits it regardless (shadow mode, which
// counts what it would refuse and refuses nothing). It reports whether the
// request was within the limit.
func (l *Limiter) Acquire(class int, force bool, now time.Time) (Slot, bool) {
	ok := l.Admits(class, now)
	if !ok && !force {
		return Slot{}, false
	}
	class = l.classOf(class)
	l.total++
	l.inFlight[class]++
	l.peak = max(l.peak, l.total)
	return Slot{class: class, epoch: l.epoch}, ok
}

// Release ends s's request at now, with the latency it took when sampled
// (false: it ended without a sample, e.g. the client went away, or the
// upstream failed at once, which says nothing of its queue).
func (l *Limiter) Release(s Slot, latency time.Duration, sampled bool, now time.Time) {
	l.total--
	l.inFlight[s.class]--
	if sampled && (!l.measuring || s.epoch == l.epoch) && len(l.samples) < maxSamples {
		l.samples = append(l.samples, latency)
	}
	if l.measuring && len(l.samples) >= l.cfg.MinRTTSamples {
		l.minRTT = l.aggregate()
		l.measuring = false
		l.setLimit(l.deferred)
		l.nextMeasure = now.Add(l.cfg.MinRTTInterval + time.Duration(l.rng.Float64()*jitter*float64(l.cfg.MinRTTInterval)))
		l.nextUpdate = now.Add(l.cfg.Window)
		l.peak = l.total
	}
	l.tick(now)
}

// tick recomputes the limit at the end of each window, and begins a
// minimum RTT window when one is due.
func (l *Limiter) tick(now time.Time) {
	if l.measuring {
		return // the limit waits for the minimum RTT
	}
	if !now.Before(l.nextMeasure) {
		l.startMeasuring()
		return
	}
	if now.Before(l.nextUpdate) {
		return
	}
	l.nextUpdate = now.Add(l.cfg.Window)
	if len(l.samples) == 0 {
		return // nothing ended: nothing learnt
	}
	sample := l.aggregate()
	gradient := float64(l.minRTT) * (1 + max(0, l.cfg.Buffer)) / float64(max(sample, 1))
	gradient = min(2, max(0.5, gradient))
	if gradient > 1 && 2*l.peak < l.limit {
		l.peak = l.total
		return // application-limited: no evidence the upstream takes more
	}
	limit := l.estimate * gradient
	limit += math.Sqrt(limit)
	l.setLimit((1-smoothing)*l.estimate + smoothing*limit)
	l.peak = l.total
}

// startMeasuring begins a minimum RTT window: the limit drops to
// MinLimit until MinRTTSamples requests admitted in it have ended.
func (l *Limiter) startMeasuring() {
	l.measuring = true
	l.epoch++
	l.deferred = l.estimate
	l.setLimit(float64(l.cfg.MinLimit))
	l.samples = l.samples[:0]
}

// setLimit sets the estimate to e within [MinLimit, MaxLimit], and the
// limit to it rounded.
func (l *Limiter) setLimit(e float64) {
	l.estimate = min(float64(l.cfg.MaxLimit), max(float64(l.cfg.MinLimit), e))
	l.limit = int(math.Round(l.estimate))
}

// aggregate returns the percentile of the samples, and clears them.
func (l *Limiter) aggregate() time.Duration {
	slices.Sort(l.samples)
	d := l.samples[int(percentile*float64(len(l.samples)-1))]
	l.samples = l.samples[:0]
	return d
}
