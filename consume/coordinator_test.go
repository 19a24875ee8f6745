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

// TestHintRotationSkipsNone: a sweep over a group's hint visits every
// hinted partition before any twice, also while the picks empty (drop)
// some of the partitions they returned, as pops at many partitions do
// when the producers stop (the drain) and a pop finds half of its
// partitions empty.
func TestHintRotationSkipsNone(t *testing.T) {
	for _, dropEvery := range []int{1, 2, 3} {
		c := New(nil, Options{})
		c.update("q", "g", func(*groupHint) {})
		const n, step = 1000, 32
		pids := make([]uuid.UUID, n)
		for i := range pids {
			pids[i] = uuid.New()
		}
		c.Notify("q", pids)
		seen := map[uuid.UUID]bool{}
	sweep:
		for {
			got := c.pick("q", "g", step, step)
			require.NotEmpty(t, got)
			for i, pid := range got {
				if seen[pid] {
					// The rotation came round: only after a whole sweep.
					require.Equal(t, n, len(seen), "a partition picked again before every partition was (drop every %d)", dropEvery)
					break sweep
				}
				seen[pid] = true
				if i%dropEvery == 0 {
					c.update("q", "g", func(g *groupHint) { g.drop(pid) })
				}
			}
			if len(seen) == n && dropEvery == 1 {
				break
			}
		}
	}
}
