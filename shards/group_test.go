package shards

import (
	"testing"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// recordingPusher records each Enqueue: the partition and its items.
type recordingPusher struct {
	calls []struct {
		partition string
		items     []*queen.Item
	}
}

func (r *recordingPusher) Enqueue(_, partition string, items []*queen.Item) (Waiter, error) {
	r.calls = append(r.calls, struct {
		partition string
		items     []*queen.Item
	}{partition, items})
	return nil, nil
}

// TestEnqueueByPartitionGroupsInOrder: one Enqueue per partition, in order
// of first appearance, each with its items in request order and their
// indexes in the group; a group's items cannot be appended to over the next
// group's (they share one allocation).
func TestEnqueueByPartitionGroupsInOrder(t *testing.T) {
	var items []*queen.Item
	for _, p := range []string{"a", "b", "a", "c", "b", "a"} {
		items = append(items, &queen.Item{Queue: "q", Partition: p})
	}
	for _, tc := range []struct {
		name  string
		idx   []int
		parts []string
		want  [][]int
	}{
		{"every item", nil, []string{"a", "b", "c"}, [][]int{{0, 2, 5}, {1, 4}, {3}}},
		{"the items listed", []int{1, 3, 5}, []string{"b", "c", "a"}, [][]int{{1}, {3}, {5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordingPusher{}
			groups := enqueueByPartition(r, items, tc.idx)
			require.Len(t, groups, len(tc.parts))
			require.Len(t, r.calls, len(tc.parts))
			for g, p := range tc.parts {
				require.Equal(t, p, r.calls[g].partition)
				require.Equal(t, tc.want[g], groups[g].idx)
				require.Len(t, r.calls[g].items, len(tc.want[g]))
				for j, i := range tc.want[g] {
					require.Same(t, items[i], r.calls[g].items[j])
				}
				require.Equal(t, len(r.calls[g].items), cap(r.calls[g].items), "no room to append over the next group")
			}
		})
	}
}
