package txnid

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTxnRoundTrip(t *testing.T) {
	for _, c := range []struct {
		producer int
		seq      uint64
	}{{0, 0}, {7, 123456}, {MaxProducers - 1, SeqMask}} {
		s := string(AppendTxn(nil, c.producer, c.seq))
		p, q, ok := ParseTxn(s)
		require.True(t, ok, s)
		require.Equal(t, c.producer, p)
		require.Equal(t, c.seq, q)
	}
	for _, bad := range []string{"", "lt", "lt1", "lt-1", "lt1-", "lt01-2", "lt1-02", "lt1-x", "xx1-2", "lt4096-1", "lt1-1099511627776"} {
		_, _, ok := ParseTxn(bad)
		require.False(t, ok, bad)
	}
	k := MakeKey(63, 99)
	require.Equal(t, 63, KeyPart(k))
	require.Equal(t, uint64(99), KeySeq(k))
	// A sequence number's partition is fixed and spread over all of them.
	hits := make([]int, 5)
	for seq := range uint64(5000) {
		p := PartOf(7, seq, 5)
		require.Equal(t, p, PartOf(7, seq, 5))
		hits[p]++
	}
	for _, h := range hits {
		require.InDelta(t, 1000, h, 150)
	}
}

func TestPayload(t *testing.T) {
	for _, size := range []int{0, 10, 41, 200, 1000} {
		p := AppendPayload(nil, 3, 12345, size)
		require.True(t, json.Valid(p), string(p))
		if size >= 45 {
			require.Len(t, p, size)
		}
		require.Equal(t, p, AppendPayload(nil, 3, 12345, size), "a transactionId always carries the same payload")
	}
	require.NotEqual(t, AppendPayload(nil, 3, 1, 200), AppendPayload(nil, 3, 2, 200))
	require.Equal(t, []string{"p-00", "p-01", "p-02"}, PartitionNames(3))
	require.Equal(t, "p-99", PartitionNames(100)[99])
	require.Equal(t, "p-005", PartitionNames(101)[5])
}

func TestPartInSequentialTouchesEveryPartition(t *testing.T) {
	const parts, producers = 1000, 8
	seen := map[int]bool{}
	for p := 0; p < producers; p++ {
		for seq := uint64(0); seq < parts/producers; seq++ {
			i := PartIn(true, p, seq, parts)
			require.False(t, seen[i], "partition %d twice", i)
			seen[i] = true
		}
	}
	require.Len(t, seen, parts)
	// Random spread is partOf's mix.
	require.Equal(t, PartOf(3, 77, parts), PartIn(false, 3, 77, parts))
	// One partition, or more producers than partitions: still in range.
	for p := 0; p < 40; p++ {
		require.Zero(t, PartIn(true, p, 5, 1))
		require.Less(t, PartIn(true, p, uint64(p), 7), 7)
	}
}
