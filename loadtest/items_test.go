package loadtest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTxnRoundTrip(t *testing.T) {
	for _, c := range []struct {
		producer int
		seq      uint64
	}{{0, 0}, {7, 123456}, {maxProducers - 1, seqMask}} {
		s := string(appendTxn(nil, c.producer, c.seq))
		p, q, ok := parseTxn(s)
		require.True(t, ok, s)
		require.Equal(t, c.producer, p)
		require.Equal(t, c.seq, q)
	}
	for _, bad := range []string{"", "lt", "lt1", "lt-1", "lt1-", "lt01-2", "lt1-02", "lt1-x", "xx1-2", "lt4096-1", "lt1-1099511627776"} {
		_, _, ok := parseTxn(bad)
		require.False(t, ok, bad)
	}
	k := makeKey(63, 99)
	require.Equal(t, 63, keyPart(k))
	require.Equal(t, uint64(99), keySeq(k))
	// A sequence number's partition is fixed and spread over all of them.
	hits := make([]int, 5)
	for seq := range uint64(5000) {
		p := partOf(7, seq, 5)
		require.Equal(t, p, partOf(7, seq, 5))
		hits[p]++
	}
	for _, h := range hits {
		require.InDelta(t, 1000, h, 150)
	}
}

func TestPayload(t *testing.T) {
	for _, size := range []int{0, 10, 41, 200, 1000} {
		p := appendPayload(nil, 3, 12345, size)
		require.True(t, json.Valid(p), string(p))
		if size >= 45 {
			require.Len(t, p, size)
		}
		require.Equal(t, p, appendPayload(nil, 3, 12345, size), "a transactionId always carries the same payload")
	}
	require.NotEqual(t, appendPayload(nil, 3, 1, 200), appendPayload(nil, 3, 2, 200))
	require.Equal(t, []string{"p-00", "p-01", "p-02"}, partitionNames(3))
	require.Equal(t, "p-99", partitionNames(100)[99])
	require.Equal(t, "p-005", partitionNames(101)[5])
}

func TestLatencyAndCommas(t *testing.T) {
	require.Equal(t, "0", commas(0))
	require.Equal(t, "999", commas(999))
	require.Equal(t, "1,000", commas(1000))
	require.Equal(t, "-1,234,567", commas(-1234567))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
}

// TestPartitionsUpToTheKeyBits: a run may spread over up to maxPartitions
// partitions (a million-partition run fits); an item's key keeps the
// largest partition index.
func TestPartitionsUpToTheKeyBits(t *testing.T) {
	base := DefaultConfig()
	base.DatabaseURL = "postgres://x@127.0.0.1/queen"
	base = base.withDefaults()
	for _, n := range []int{1, 200000, 1000000, maxPartitions} {
		c := base
		c.Partitions = n
		require.NoError(t, c.Validate(), n)
	}
	for _, n := range []int{0, maxPartitions + 1} {
		c := base
		c.Partitions = n
		require.ErrorContains(t, c.Validate(), "partitions", n)
	}
	k := makeKey(maxPartitions-1, seqMask)
	require.Equal(t, maxPartitions-1, keyPart(k))
	require.Equal(t, uint64(seqMask), keySeq(k))
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
	c.Connections, c.ProducerMode = 2, ProducerAsync
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
