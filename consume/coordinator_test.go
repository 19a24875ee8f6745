package consume

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestConsumerHintsAreBounded: pushes to many partitions (Notify) keep a
// group's hint within maxHinted, the newest kept, and the partition-to-queue
// map within maxOwners; they are hints, PostgreSQL answers the rest.
func TestConsumerHintsAreBounded(t *testing.T) {
	c := New(nil, Options{})
	c.update("q", "g", func(*groupHint) {}) // the group pops: it has a hint
	n := maxOwners + maxHinted
	last := make([]uuid.UUID, 0, 8)
	for i := range n {
		pid := uuid.New()
		c.Notify("q", []uuid.UUID{pid})
		if i >= n-8 {
			last = append(last, pid)
		}
	}
	c.update("q", "g", func(g *groupHint) {
		require.LessOrEqual(t, len(g.cands), maxHinted)
		require.Equal(t, len(g.cands), len(g.in))
		for _, pid := range last {
			require.Contains(t, g.in, pid, "the newest partitions are hinted")
		}
	})
	c.mu.Lock()
	require.LessOrEqual(t, len(c.owner), maxOwners)
	require.Equal(t, "q", c.owner[last[len(last)-1]])
	c.mu.Unlock()
}
