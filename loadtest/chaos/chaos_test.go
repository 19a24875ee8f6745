package chaos

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/report"
)

// Mixed chaos injects one fault of each kind per round, in an order drawn
// from the seed: the same seed draws the same order.
func TestChaosMixedRounds(t *testing.T) {
	t.Parallel()
	draw := func(seed uint64) []string {
		r := &Run{mode: Mixed, rng: rand.New(rand.NewPCG(seed, 7))}
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
	r := &Run{mode: Mixed, rng: rand.New(rand.NewPCG(42, 7)), c: &Cluster{nodes: make([]*natsNode, 3)}}
	for round := range 3 {
		var kinds []string
		for range 4 {
			kinds = append(kinds, r.nextKind())
		}
		slices.Sort(kinds)
		require.Equal(t, []string{report.FaultKill, report.FaultNATSKill, report.FaultPGRestart, report.FaultStop}, kinds, "round %d", round)
	}
	for _, mode := range []string{Kill, Stop, PGRestart, NATSKill} {
		r := &Run{mode: mode, rng: rand.New(rand.NewPCG(1, 7))}
		require.Equal(t, mode, r.nextKind())
	}
}

// The pauses and intervals a chaos mode takes by default.
func TestChaosPauses(t *testing.T) {
	t.Parallel()
	var c Config
	require.Equal(t, time.Second, c.pauseFor(report.FaultKill))
	require.Equal(t, 5*time.Second, c.pauseFor(report.FaultStop))
	require.Equal(t, 5*time.Second, c.pauseFor(report.FaultNATSKill))
	require.Zero(t, c.pauseFor(report.FaultPGRestart))
	c.Pause = 2 * time.Second
	require.Equal(t, 2*time.Second, c.pauseFor(report.FaultStop))
	require.Equal(t, 20*time.Second, DefaultInterval(Kill))
	require.Equal(t, 10*time.Second, DefaultInterval(Mixed))
}
