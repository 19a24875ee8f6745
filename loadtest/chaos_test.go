package loadtest

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Stretches that meet share no bucket: the requests of a fault's during
// and after windows and the rest add up to the whole run.
func TestClientStatsWindows(t *testing.T) {
	t.Parallel()
	s := newClientStats(time.Now())
	for b := range 100 { // 10 s, one request per 100 ms
		switch {
		case b >= 20 && b < 35: // a fault from 2.0 s, recovered at 3.5 s
			s.add(b, "push:failed:unavailable", 10)
		case b == 37: // a request it left unanswered, failing after
			s.add(b, "push:timeout", 0)
		default:
			s.add(b, "", 0)
		}
	}
	at, rec, settled := 2*time.Second, 3500*time.Millisecond, 5*time.Second
	during, after := s.window(at, rec), s.window(rec, settled)
	require.Equal(t, int64(15), during.Requests)
	require.Equal(t, int64(15), during.Errors)
	require.Equal(t, int64(150), during.FailedItems)
	require.Equal(t, map[string]int64{"push:failed:unavailable": 15}, during.ByKind)
	require.Equal(t, 1.0, during.ErrorRate)
	require.Equal(t, int64(15), after.Requests)
	require.Equal(t, int64(1), after.Errors)
	require.Zero(t, after.FailedItems)
	before, rest := s.window(0, at), s.window(settled, 10*time.Second)
	require.Equal(t, int64(100), before.Requests+during.Requests+after.Requests+rest.Requests)
	require.Zero(t, before.Errors+rest.Errors)
	// Mid-bucket ends round to the nearest boundary.
	require.Equal(t, int64(15), s.window(2040*time.Millisecond, 3460*time.Millisecond).Requests)
	require.Zero(t, s.window(time.Second, time.Second).Requests)

	require.Equal(t, 3800*time.Millisecond, s.lastError(at, settled), "the end of the last bucket with an error")
	require.Equal(t, time.Duration(-1), s.lastError(settled, 10*time.Second))
	var nilStats *clientStats
	nilStats.record("push:timeout") // a nil *clientStats records nothing
}

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
		require.Equal(t, []string{FaultKill, FaultPGRestart, FaultStop}, round, "round %d: %v", i/3, got)
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
		require.Equal(t, []string{FaultKill, FaultNATSKill, FaultPGRestart, FaultStop}, kinds, "round %d", round)
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
	require.Equal(t, time.Second, c.pauseFor(FaultKill))
	require.Equal(t, 5*time.Second, c.pauseFor(FaultStop))
	require.Equal(t, 5*time.Second, c.pauseFor(FaultNATSKill))
	require.Zero(t, c.pauseFor(FaultPGRestart))
	c.ChaosPause = 2 * time.Second
	require.Equal(t, 2*time.Second, c.pauseFor(FaultStop))
	require.Equal(t, 20*time.Second, DefaultChaosInterval(ChaosKill))
	require.Equal(t, 10*time.Second, DefaultChaosInterval(ChaosMixed))
}
