// Package logs holds the broker's log handler wrapper that keeps the log
// readable during an outage: repeated records of one kind are written at
// most once an interval, with the count of those left out (RateLimit).
package logs

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RateLimitConfig configures RateLimit. Zero fields take their defaults.
type RateLimitConfig struct {
	// Interval is the least time between two written records of one kind;
	// default 1 s.
	Interval time.Duration
	// Level is the lowest level limited; records below it (info and debug
	// by default) always pass. Default slog.LevelWarn.
	Level slog.Leveler
	// MaxKinds bounds the kinds remembered at once (default 1024); past it
	// the oldest are forgotten first, their suppressed counts written.
	MaxKinds int
	// Now is the clock; default time.Now. Tests inject one.
	Now func() time.Time
}

// SuppressedKey is the attribute a written record carries when records of
// its kind were left out since the last one of that kind was written: their
// count.
const SuppressedKey = "suppressed"

// RateLimit wraps inner so that records at or above cfg.Level of one kind
// (same level and message; attributes do not count) are written at most
// once per cfg.Interval. The first record of a kind is written at once;
// those that follow within the interval are counted and dropped; the next
// one written after it carries "suppressed=<count>". When a kind falls
// silent with records left out, a record with its level and message and
// only "suppressed=<count>" is written by the next call to Handle (of any
// kind) after its interval ended, or by Flush: no count is lost while the
// process keeps logging.
//
// Handlers derived with WithAttrs and WithGroup share the limiter: a kind
// is counted across them.
func RateLimit(inner slog.Handler, cfg RateLimitConfig) *Handler {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Level == nil {
		cfg.Level = slog.LevelWarn
	}
	if cfg.MaxKinds <= 0 {
		cfg.MaxKinds = 1024
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{inner: inner, st: &limiter{cfg: cfg, kinds: map[kind]*kindState{}}}
}

// Handler is the slog.Handler RateLimit returns.
type Handler struct {
	inner slog.Handler
	st    *limiter
}

type kind struct {
	level slog.Level
	msg   string
}

type kindState struct {
	since      time.Time // when the last record of this kind was written
	suppressed int       // records left out since then
	inner      slog.Handler
}

type limiter struct {
	cfg       RateLimitConfig
	mu        sync.Mutex
	kinds     map[kind]*kindState
	lastSweep time.Time
}

// pending is a count of left-out records to write as their own record.
type pending struct {
	k     kind
	n     int
	inner slog.Handler
	at    time.Time
}

// Enabled reports whether inner handles the level.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// WithAttrs returns a Handler over inner.WithAttrs sharing h's limiter.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(as), st: h.st}
}

// WithGroup returns a Handler over inner.WithGroup sharing h's limiter.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), st: h.st}
}

// Handle writes r through the inner handler, or counts and drops it (see
// RateLimit). It first writes the counts of kinds that fell silent.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.st.cfg.Level.Level() {
		return h.inner.Handle(ctx, r)
	}
	now := h.st.cfg.Now()
	write, n, stale := h.st.admit(kind{r.Level, r.Message}, h.inner, now)
	flushPending(ctx, stale)
	if !write {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int(SuppressedKey, n))
	}
	return h.inner.Handle(ctx, r)
}

// Flush writes the counts of every kind with records left out, now (at
// shutdown).
func (h *Handler) Flush(ctx context.Context) {
	h.st.mu.Lock()
	var out []pending
	for k, ks := range h.st.kinds {
		if ks.suppressed > 0 {
			out = append(out, pending{k, ks.suppressed, ks.inner, h.st.cfg.Now()})
			ks.suppressed = 0
		}
	}
	h.st.mu.Unlock()
	flushPending(ctx, out)
}

// admit decides for one record of kind k at now: write it, with n records
// left out before it; stale are other kinds' counts to write now.
func (l *limiter) admit(k kind, inner slog.Handler, now time.Time) (write bool, n int, stale []pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= l.cfg.Interval {
		l.lastSweep = now
		for ok, ks := range l.kinds {
			if ok == k || now.Sub(ks.since) < l.cfg.Interval {
				continue
			}
			if ks.suppressed > 0 {
				stale = append(stale, pending{ok, ks.suppressed, ks.inner, now})
			}
			delete(l.kinds, ok)
		}
	}
	ks := l.kinds[k]
	if ks != nil && now.Sub(ks.since) < l.cfg.Interval {
		ks.suppressed++
		ks.inner = inner
		return false, 0, stale
	}
	if ks == nil {
		if len(l.kinds) >= l.cfg.MaxKinds {
			stale = append(stale, l.forgetOldest(now)...)
		}
		ks = &kindState{}
		l.kinds[k] = ks
	}
	n = ks.suppressed
	ks.since, ks.suppressed, ks.inner = now, 0, inner
	return true, n, stale
}

// forgetOldest drops the kind written longest ago, returning its count.
func (l *limiter) forgetOldest(now time.Time) []pending {
	var oldest kind
	var os *kindState
	for k, ks := range l.kinds {
		if os == nil || ks.since.Before(os.since) {
			oldest, os = k, ks
		}
	}
	if os == nil {
		return nil
	}
	delete(l.kinds, oldest)
	if os.suppressed == 0 {
		return nil
	}
	return []pending{{oldest, os.suppressed, os.inner, now}}
}

func flushPending(ctx context.Context, ps []pending) {
	for _, p := range ps {
		r := slog.NewRecord(p.at, p.k.level, p.k.msg, 0)
		r.AddAttrs(slog.Int(SuppressedKey, p.n))
		_ = p.inner.Handle(ctx, r)
	}
}
