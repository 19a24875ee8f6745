package persistence

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAuditMessages(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pa, err := s.EnsurePartition(ctx, "audit", "a")
	require.NoError(t, err)
	pb, err := s.EnsurePartition(ctx, "audit", "b")
	require.NoError(t, err)
	other, err := s.EnsurePartition(ctx, "other", "a")
	require.NoError(t, err)
	first := commit(t, s, pa, items("audit", "a", "x", "y"))
	second := commit(t, s, pa, items("audit", "a", "z", "x"))
	third := commit(t, s, pb, items("audit", "b", "x"))
	commit(t, s, other, items("other", "a", "w"))

	a, err := OpenAudit(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer a.Close()
	got, err := a.Messages(ctx, []string{"audit"})
	require.NoError(t, err)
	require.Len(t, got, 4, "frames of the named queue only; the duplicate wrote nothing")
	byOffset := map[string]StoredMessage{}
	for _, m := range got {
		require.Equal(t, "audit", m.Queue)
		require.False(t, m.CreatedAt.IsZero())
		byOffset[m.Partition+"/"+m.TransactionID] = m
	}
	check := func(key string, pid any, off int64, id any) {
		t.Helper()
		m, ok := byOffset[key]
		require.True(t, ok, key)
		require.Equal(t, pid, m.PartitionID, key)
		require.Equal(t, off, m.Offset, key)
		require.Equal(t, id, m.MessageID, key)
	}
	check("a/x", pa, 0, first.Results[0].MessageID)
	check("a/y", pa, 1, first.Results[1].MessageID)
	check("a/z", pa, 2, second.Results[0].MessageID)
	check("b/x", pb, 0, third.Results[0].MessageID)

	none, err := a.Messages(ctx, []string{"missing"})
	require.NoError(t, err)
	require.Empty(t, none)

	d, err := a.Durability(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, d.Fsync)
	require.NotEmpty(t, d.SynchronousCommit)
	require.NotEmpty(t, d.FullPageWrites)
	require.True(t, Durability{Fsync: "on", SynchronousCommit: "on", FullPageWrites: "on"}.Durable())
	require.False(t, Durability{Fsync: "on", SynchronousCommit: "off", FullPageWrites: "on"}.Durable())

	// The pool is read-only.
	_, err = a.pool.Exec(ctx, `DELETE FROM queen.segments`)
	require.ErrorContains(t, err, "read-only")
}

func TestAuditCorruptSegment(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "audit", "a")
	require.NoError(t, err)
	commit(t, s, pid, items("audit", "a", "x", "y"))
	// A segment claiming more offsets than it holds frames.
	_, err = s.pool.Exec(ctx, `INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames)
		SELECT partition_id, 10, 12, created_at, message_ids, frames FROM queen.segments WHERE partition_id = $1`, pid)
	require.NoError(t, err)
	a, err := OpenAudit(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Messages(ctx, []string{"audit"})
	require.ErrorIs(t, err, ErrCorruptSegment)
}
