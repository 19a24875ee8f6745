package loadtest

import (
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
	require.Contains(t, p.line(start.Add(12*time.Second), 0, 10), "(consumers draining)")
	require.Contains(t, p.short(start.Add(12*time.Second), 0, 10), "acked 900 (10/s) dlq 7 draining")
}
