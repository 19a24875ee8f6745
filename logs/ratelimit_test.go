package logs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// clock is an injected clock the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} }
func lines(b *bytes.Buffer) []string     { return strings.Split(strings.TrimSpace(b.String()), "\n") }
func textHandler(b *bytes.Buffer) slog.Handler {
	return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
}

// TestRateLimit: a burst of one kind is written once an interval with the
// count left out; other kinds and info records are not held back; a kind
// that falls silent gets its count written by the next record of any kind
// after its interval, or by Flush.
func TestRateLimit(t *testing.T) {
	var buf bytes.Buffer
	c := newClock()
	h := RateLimit(textHandler(&buf), RateLimitConfig{Now: c.now})
	log := slog.New(h).With("component", "bundler")

	// 1,000 failed commits in 2.5 s: written at 0 s, 1 s and 2 s.
	for i := 0; i < 1000; i++ {
		log.Warn("push commit failed", "err", "connection refused", "i", i)
		c.advance(2500 * time.Microsecond)
	}
	got := lines(&buf)
	want := []string{
		`level=WARN msg="push commit failed" component=bundler err="connection refused" i=0`,
		`level=WARN msg="push commit failed" component=bundler err="connection refused" i=400 suppressed=399`,
		`level=WARN msg="push commit failed" component=bundler err="connection refused" i=800 suppressed=399`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Another kind, an error and info records pass at once.
	buf.Reset()
	log.Warn("push commit skipped a partition")
	log.Error("push commit failed")
	log.Info("push commit failed")
	log.Info("push commit failed")
	eq(t, 4, len(lines(&buf)), "lines of other kinds and levels:\n%s", buf.String())

	// The outage ends: 199 left out since 2 s are written by the next
	// record after the interval, whatever its kind.
	buf.Reset()
	c.advance(time.Second)
	log.Warn("broker ready again")
	got = lines(&buf)
	want = []string{
		`level=WARN msg="push commit failed" component=bundler suppressed=199`,
		`level=WARN msg="broker ready again" component=bundler`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Flush writes what is left out now.
	buf.Reset()
	log.Warn("push commit failed")
	log.Warn("push commit failed")
	log.Warn("push commit failed")
	h.Flush(context.Background())
	got = lines(&buf)
	want = []string{
		`level=WARN msg="push commit failed" component=bundler`,
		`level=WARN msg="push commit failed" component=bundler suppressed=2`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRateLimitMaxKinds: past MaxKinds the oldest kind is forgotten and its
// count written.
func TestRateLimitMaxKinds(t *testing.T) {
	var buf bytes.Buffer
	c := newClock()
	log := slog.New(RateLimit(textHandler(&buf), RateLimitConfig{Now: c.now, MaxKinds: 2}))
	log.Warn("a")
	log.Warn("a")
	c.advance(time.Millisecond)
	log.Warn("b")
	c.advance(time.Millisecond)
	log.Warn("c")
	want := []string{`level=WARN msg=a`, `level=WARN msg=b`, `level=WARN msg=a suppressed=1`, `level=WARN msg=c`}
	if got := lines(&buf); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func eq(t *testing.T, want, got any, format string, args ...any) {
	t.Helper()
	if want != got {
		t.Fatalf("%s: got %v, want %v", fmt.Sprintf(format, args...), got, want)
	}
}
