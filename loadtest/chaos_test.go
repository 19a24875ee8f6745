package loadtest

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/stretchr/testify/require"
)

// Mixed chaos injects one fault of each kind per round, in an order drawn
// from the seed: the same seed draws the same order.
func TestChaosMixedRounds(t *testing.T) {
	t.Parallel()
	draw := func(seed uint64) []string {
		r := &chaosRun{mode: ChaosMixed, rng: rand.New(rand.NewPCG(seed, 7))}
		var out []string
		for range 12 {
			out = append(out, r.nextKind())
		}
		return out
	}
	got := draw(42)
	for i := 0; i < len(got); i += 3 {
		round := slices.Clone(got[i : i+3])
		slices.Sort(round)
		require.Equal(t, []string{report.FaultKill, report.FaultPGRestart, report.FaultStop}, round, "round %d: %v", i/3, got)
	}
	require.Equal(t, got, draw(42))
	// With a NATS cluster of 2 or more nodes a round has a nats-kill too.
	r := &chaosRun{mode: ChaosMixed, rng: rand.New(rand.NewPCG(42, 7)), c: &Cluster{nodes: make([]*natsNode, 3)}}
	for round := range 3 {
		var kinds []string
		for range 4 {
			kinds = append(kinds, r.nextKind())
		}
		slices.Sort(kinds)
		require.Equal(t, []string{report.FaultKill, report.FaultNATSKill, report.FaultPGRestart, report.FaultStop}, kinds, "round %d", round)
	}
	for _, mode := range []string{ChaosKill, ChaosStop, ChaosPGRestart, ChaosNATSKill} {
		r := &chaosRun{mode: mode, rng: rand.New(rand.NewPCG(1, 7))}
		require.Equal(t, mode, r.nextKind())
	}
}

func TestChaosConfig(t *testing.T) {
	t.Parallel()
	base := DefaultConfig()
	base.DatabaseURL = "postgres://x@127.0.0.1/queen"
	for _, tc := range []struct {
		chaos   string
		restart bool
		want    string
	}{
		{ChaosKill, false, "chaos kill needs brokers of our own"},
		{ChaosStop, true, "chaos stop needs brokers of our own"},
		{ChaosMixed, true, "chaos mixed needs brokers of our own"},
		{ChaosPGRestart, false, "pass --brokers N or --embedded"},
		{"flood", false, `chaos "flood": want none, kill, stop, pg-restart, pg-failover, nats-kill or mixed`},
		{ChaosNATSKill, true, "chaos nats-kill kills a node of a NATS cluster and needs at least 2"},
		{ChaosPGRestart, true, ""},
		{ChaosPGFailover, true, "pass --brokers N --pg-standby"},
	} {
		c := base
		c.Chaos = tc.chaos
		if tc.restart {
			c.RestartPostgres = func(context.Context) error { return nil }
		}
		c = c.withDefaults()
		err := c.Validate()
		if tc.want == "" {
			require.NoError(t, err, tc.chaos)
			require.Equal(t, 10*time.Second, c.ChaosInterval)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.chaos)
	}
	c := base
	require.Equal(t, time.Second, c.pauseFor(report.FaultKill))
	require.Equal(t, 5*time.Second, c.pauseFor(report.FaultStop))
	require.Equal(t, 5*time.Second, c.pauseFor(report.FaultNATSKill))
	require.Zero(t, c.pauseFor(report.FaultPGRestart))
	c.ChaosPause = 2 * time.Second
	require.Equal(t, 2*time.Second, c.pauseFor(report.FaultStop))
	require.Equal(t, 20*time.Second, DefaultChaosInterval(ChaosKill))
	require.Equal(t, 10*time.Second, DefaultChaosInterval(ChaosMixed))
}
