package persistence

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// TestEnsurePartitions creates partitions in bulk: existing ones keep their
// ids, new ones are created once (queues too), a repeated key gets one id,
// and concurrent callers with overlapping sets (in different orders) agree
// on every id without a deadlock.
func TestEnsurePartitions(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	old, err := s.EnsurePartition(ctx, "bulk-a", "p-0")
	require.NoError(t, err)

	keys := []queen.PartitionKey{{Queue: "bulk-a", Partition: "p-0"}, {Queue: "bulk-a", Partition: "p-1"}, {Queue: "bulk-b", Partition: "p-0"}, {Queue: "bulk-a", Partition: "p-1"}}
	ids, err := s.EnsurePartitions(ctx, keys)
	require.NoError(t, err)
	require.Len(t, ids, 4)
	require.Equal(t, old, ids[0], "an existing partition keeps its id")
	require.Equal(t, ids[1], ids[3], "a repeated key gets one id")
	require.NotEqual(t, ids[1], ids[2])
	for i, k := range keys {
		id, err := s.EnsurePartition(ctx, k.Queue, k.Partition)
		require.NoError(t, err)
		require.Equal(t, id, ids[i], "key %d", i)
	}
	q, err := s.Queue(ctx, "bulk-b")
	require.NoError(t, err, "the queue was created with its partition")
	require.Equal(t, int64(1), q.Partitions)

	// Overlapping sets in opposite orders, at once.
	var set []queen.PartitionKey
	for i := range 300 {
		set = append(set, queen.PartitionKey{Queue: "bulk-c", Partition: fmt.Sprintf("p-%03d", i)})
	}
	rev := make([]queen.PartitionKey, len(set))
	for i := range set {
		rev[i] = set[len(set)-1-i]
	}
	got := make([][]uuid.UUID, 6)
	var wg sync.WaitGroup
	for c := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := set
			if c%2 == 1 {
				ks = rev
			}
			ids, err := s.EnsurePartitions(ctx, ks)
			require.NoError(t, err)
			if c%2 == 1 {
				r := make([]uuid.UUID, len(ids))
				for i := range ids {
					r[i] = ids[len(ids)-1-i]
				}
				ids = r
			}
			got[c] = ids
		}()
	}
	wg.Wait()
	for c := 1; c < len(got); c++ {
		require.Equal(t, got[0], got[c], "caller %d", c)
	}
	q, err = s.Queue(ctx, "bulk-c")
	require.NoError(t, err)
	require.Equal(t, int64(300), q.Partitions, "each partition created once")
}
