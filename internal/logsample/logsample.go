// Package logsample bounds how many log lines one repeated event can
// write: a [slog.Handler] that passes, per message and level, a burst and
// then a steady rate of records, and counts the rest, so a failure that
// repeats on every request (a store that cannot be reached, a client
// flooding refusals) costs a few lines a second, not one per request.
// Errors are sampled like every other level.
package logsample

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults for [Options].
const (
	DefaultPerSecond   = 1
	DefaultBurst       = 10
	DefaultMaxMessages = 1024
)

// Options configures a [Handler]. The zero value is the default.
type Options struct {
	// PerSecond is the steady rate of records each message may write
	// (default 1).
	PerSecond float64
	// Burst is how many records of one message may be written at once
	// (default 10).
	Burst int
	// MaxMessages bounds the messages given their own budget (default
	// 1,024); messages beyond it share one.
	MaxMessages int
}

// Handler samples the records it passes to the handler it wraps. The
// first record of a message written after others were dropped carries
// the attribute "suppressed", the number dropped since the last one
// written. It is safe for concurrent use; handlers derived from it with
// WithAttrs and WithGroup share its budgets.
type Handler struct {
	next slog.Handler
	s    *sampler
}

type sampler struct {
	opts  Options
	mu    sync.Mutex
	msgs  map[msgKey]*budget
	other budget // shared by messages beyond MaxMessages
}

type msgKey struct {
	level slog.Level
	msg   string
}

type budget struct {
	lim        *rate.Limiter
	suppressed int64
}

// New returns h sampled. A Handler is returned as it is, so wrapping
// twice samples once.
func New(h slog.Handler, opts Options) slog.Handler {
	if s, ok := h.(*Handler); ok {
		return s
	}
	if opts.PerSecond <= 0 {
		opts.PerSecond = DefaultPerSecond
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.MaxMessages <= 0 {
		opts.MaxMessages = DefaultMaxMessages
	}
	s := &sampler{opts: opts, msgs: map[msgKey]*budget{}}
	s.other.lim = rate.NewLimiter(rate.Limit(opts.PerSecond), opts.Burst)
	return &Handler{next: h, s: s}
}

// Logger returns l with its handler sampled with the default options (nil
// means slog.Default()).
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	if _, ok := l.Handler().(*Handler); ok {
		return l
	}
	return slog.New(New(l.Handler(), Options{}))
}

// Enabled implements [slog.Handler].
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements [slog.Handler]: it writes r if r's message has budget
// left, and otherwise counts it.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	n, ok := h.s.take(msgKey{r.Level, r.Message}, r.Time)
	if !ok {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("suppressed", n))
	}
	return h.next.Handle(ctx, r)
}

// take reports whether a record of k at t may be written, and how many of
// k were dropped before it.
func (s *sampler) take(k msgKey, t time.Time) (int64, bool) {
	if t.IsZero() {
		t = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.msgs[k]
	if b == nil {
		if len(s.msgs) >= s.opts.MaxMessages {
			b = &s.other
		} else {
			b = &budget{lim: rate.NewLimiter(rate.Limit(s.opts.PerSecond), s.opts.Burst)}
			s.msgs[k] = b
		}
	}
	if !b.lim.AllowN(t, 1) {
		b.suppressed++
		return 0, false
	}
	n := b.suppressed
	b.suppressed = 0
	return n, true
}

// WithAttrs implements [slog.Handler].
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), s: h.s}
}

// WithGroup implements [slog.Handler].
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), s: h.s}
}
