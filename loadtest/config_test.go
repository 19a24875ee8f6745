package loadtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
)

// TestPartitionsUpToTheKeyBits: a run may spread over up to maxPartitions
// partitions (a million-partition run fits); an item's key keeps the
// largest partition index.
func TestPartitionsUpToTheKeyBits(t *testing.T) {
	base := DefaultConfig()
	base.DatabaseURL = "postgres://x@127.0.0.1/queen"
	base = base.withDefaults()
	for _, n := range []int{1, 200000, 1000000, txnid.MaxPartitions} {
		c := base
		c.Partitions = n
		require.NoError(t, c.Validate(), n)
	}
	for _, n := range []int{0, txnid.MaxPartitions + 1} {
		c := base
		c.Partitions = n
		require.ErrorContains(t, c.Validate(), "partitions", n)
	}
	k := txnid.MakeKey(txnid.MaxPartitions-1, txnid.SeqMask)
	require.Equal(t, txnid.MaxPartitions-1, txnid.KeyPart(k))
	require.Equal(t, uint64(txnid.SeqMask), txnid.KeySeq(k))
}

// TestConnectionsValidation: --connections is 0..producers, for sync
// producers over NATS only.
func TestConnectionsValidation(t *testing.T) {
	base := DefaultConfig()
	base.DatabaseURL = "postgres://x@127.0.0.1/queen"
	base.Target = "nats://127.0.0.1:4222"
	base = base.withDefaults()
	for _, n := range []int{0, 1, base.Producers} {
		c := base
		c.Connections = n
		require.NoError(t, c.Validate(), n)
	}
	for _, n := range []int{-1, base.Producers + 1} {
		c := base
		c.Connections = n
		require.ErrorContains(t, c.Validate(), "connections", n)
	}
	c := base
	c.Connections, c.Target = 2, "http://127.0.0.1:6632"
	require.ErrorContains(t, c.Validate(), "nats:// target")
	c = base
	c.Connections, c.ProducerMode = 2, report.ProducerAsync
	require.ErrorContains(t, c.Validate(), "async")
}

// TestTargetTakesANATSCluster: --target (NATS_URL) may list a NATS
// cluster's servers, comma-separated (SPEC.md §9); a list with a bad URL
// is refused.
func TestTargetTakesANATSCluster(t *testing.T) {
	c := DefaultConfig()
	c.DatabaseURL = "postgres://x@127.0.0.1/queen"
	c = c.withDefaults()
	c.Target = "nats://127.0.0.1:4222,nats://127.0.0.1:4223, nats://127.0.0.1:4224"
	require.NoError(t, c.Validate())
	c.Connections = 2
	require.NoError(t, c.Validate())
	c.Target = "nats://127.0.0.1:4222,127.0.0.1:4223"
	require.ErrorContains(t, c.Validate(), "want nats://host:port")
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
		{chaos.Kill, false, "chaos kill needs brokers of our own"},
		{chaos.Stop, true, "chaos stop needs brokers of our own"},
		{chaos.Mixed, true, "chaos mixed needs brokers of our own"},
		{chaos.PGRestart, false, "pass --brokers N or --embedded"},
		{"flood", false, `chaos "flood": want none, kill, stop, pg-restart, pg-failover, nats-kill or mixed`},
		{chaos.NATSKill, true, "chaos nats-kill kills a node of a NATS cluster and needs at least 2"},
		{chaos.PGRestart, true, ""},
		{chaos.PGFailover, true, "pass --brokers N --pg-standby"},
	} {
		c := base
		c.Chaos.Mode = tc.chaos
		if tc.restart {
			c.Chaos.RestartPostgres = func(context.Context) error { return nil }
		}
		c = c.withDefaults()
		err := c.Validate()
		if tc.want == "" {
			require.NoError(t, err, tc.chaos)
			require.Equal(t, 10*time.Second, c.Chaos.Interval)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.chaos)
	}
}

// TestRetentionWithConsumers: --retention and --consumers combine (the
// consume audit forgets what every group has passed).
func TestRetentionWithConsumers(t *testing.T) {
	c := DefaultConfig()
	c.DatabaseURL = "postgres://x@127.0.0.1/queen"
	c.Retention, c.Consumers, c.Groups = 10*time.Minute, 3, 2
	c = c.withDefaults()
	require.NoError(t, c.Validate())
}
