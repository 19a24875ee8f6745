package loadtest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/consumers"
	"github.com/queen-mq/queen-go/loadtest/produce"
)

func TestProgressShowsConsumers(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Duration = 10 * time.Second
	start := time.Now()
	c, cc := &produce.Counters{}, &consumers.Counters{}
	c.Sent.Store(1000)
	cc.Acked.Store(900)
	cc.DeadLettered.Store(7)
	p := &progress{c: c, cc: cc, start: start, dur: cfg.Duration}
	line := p.line(start.Add(3*time.Second), 100, 1234)
	require.Contains(t, line, "consumed: 1,234 acked/s, acked 900")
	require.Contains(t, line, "dead-lettered 7")
	p.draining()
	require.Contains(t, p.line(time.Now(), 0, 10), "(consumers draining for 0s)")
	require.Contains(t, p.short(start.Add(12*time.Second), 0, 10), "acked 900 (10/s) dlq 7 draining")
}

// lockedBuffer is a bytes.Buffer the progress loop writes while the test
// read, and tells of each write on wrote (when not nil; never blocking).
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		select {
		case l.wrote <- struct{}{}:
		default:
		}
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A broker run logging to a file (not a terminal) has its load-time lines
// written by the timeline sampler, which stops with the load: from the
// drain on, the progress line itself is written (every DrainProgressEvery;
// here shortened), with the drain's duration and the consumers' figures,
// and nothing after finish.
func TestProgressWhileDrainingToALog(t *testing.T) {
	t.Parallel()
	require.Equal(t, 10*time.Second, DrainProgressEvery)
	out := lockedBuffer{wrote: make(chan struct{}, 1)}
	cfg := DefaultConfig()
	cfg.Duration, cfg.Progress, cfg.ProgressLive = 10*time.Second, &out, false
	c, cc := &produce.Counters{}, &consumers.Counters{}
	c.Sent.Store(1000)
	cc.Acked.Store(900)
	cc.DeadLettered.Store(3)
	p := startProgress(&cfg, c, cc, time.Now(), true)
	require.Empty(t, out.String(), "during the load the sampler writes the lines")
	p.drainingEvery(10 * time.Millisecond)
	deadline := time.After(10 * time.Second)
	for strings.Count(out.String(), "\n") < 2 {
		select {
		case <-out.wrote:
			cc.Acked.Add(1)
		case <-deadline:
			t.Fatalf("fewer than 2 drain lines in 10 s:\n%s", out.String())
		}
	}
	p.finish()
	got := out.String()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 2, "drain lines in 10 s:\n%s", got)
	for _, l := range lines {
		require.True(t, strings.HasPrefix(l, "loadtest: progress "), l)
		require.Contains(t, l, "(consumers draining for ")
		require.Contains(t, l, "dead-lettered 3")
		require.NotContains(t, l, "\r", "a log gets plain lines")
	}
	require.Equal(t, got, out.String(), "nothing written after finish")

	// On a terminal the live line goes on as before: no second writer.
	var live lockedBuffer
	cfg.Progress, cfg.ProgressLive = &live, true
	lp := startProgress(&cfg, c, cc, time.Now(), true)
	lp.drainingEvery(10 * time.Millisecond)
	require.False(t, lp.sampled)
	lp.finish()
	require.NotContains(t, live.String(), "loadtest: progress", "the terminal keeps its in-place line")
}
