package persistence

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
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
	_, err = s.pool.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames)
		SELECT partition_num, 10, 12, created_at, legacy_ids, frames FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid)
	require.NoError(t, err)
	a, err := OpenAudit(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Messages(ctx, []string{"audit"})
	require.ErrorIs(t, err, ErrCorruptSegment)
}

func TestAuditMessagesAfter(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pa, err := s.EnsurePartition(ctx, "audit", "a")
	require.NoError(t, err)
	pb, err := s.EnsurePartition(ctx, "audit", "b")
	require.NoError(t, err)
	commit(t, s, pa, items("audit", "a", "x", "y"))
	commit(t, s, pb, items("audit", "b", "x"))
	a, err := OpenAudit(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer a.Close()

	names := []string{"a", "b"}
	// since: the time of the segment holding each bound, as a caller
	// keeps it (the bounded reads search only the ranges from there on).
	since := make([]time.Time, len(names))
	read := func(after []int64, only []int) []string {
		t.Helper()
		var got []string
		fn := func(m *StoredMessage) error {
			require.Equal(t, "audit", m.Queue)
			got = append(got, fmt.Sprintf("%s/%d/%s", m.Partition, m.Offset, m.TransactionID))
			i := slices.Index(names, m.Partition)
			if m.Offset > after[i] {
				after[i], since[i] = m.Offset, m.CreatedAt
			}
			return nil
		}
		if only == nil {
			require.NoError(t, a.EachMessageAfter(ctx, "audit", names, after, since, fn))
			return got
		}
		var ns []string
		var as []int64
		var ts []time.Time
		for _, i := range only {
			ns, as, ts = append(ns, names[i]), append(as, after[i]), append(ts, since[i])
		}
		require.NoError(t, a.EachMessageIn(ctx, "audit", ns, as, ts, fn))
		return got
	}
	after := []int64{-1, -1}
	require.Equal(t, []string{"a/0/x", "a/1/y", "b/0/x"}, sortedCopy(read(after, nil)))
	require.Empty(t, read(after, nil), "nothing new")
	commit(t, s, pa, items("audit", "a", "z"))
	commit(t, s, pb, items("audit", "b", "w", "v"))
	require.Equal(t, []string{"a/2/z", "b/1/w", "b/2/v"}, sortedCopy(read(after, nil)))
	require.Equal(t, []int64{2, 2}, after)

	// Only the partitions listed: b's new segment waits for a read that
	// lists b; a name the queue does not have is skipped.
	commit(t, s, pa, items("audit", "a", "t"))
	commit(t, s, pb, items("audit", "b", "s"))
	require.Equal(t, []string{"a/3/t"}, read(after, []int{0}))
	require.Empty(t, read(after, []int{0}), "nothing new in a")
	// The time bound applies: a bound later than every segment hides
	// them (a caller's since is never later than the segment it read).
	require.NoError(t, a.EachMessageIn(ctx, "audit", []string{"b"}, []int64{-1}, []time.Time{time.Now().Add(time.Hour)}, func(*StoredMessage) error {
		t.Fatal("a segment stamped before the bound")
		return nil
	}))
	require.NoError(t, a.EachMessageIn(ctx, "audit", []string{"nope"}, []int64{-1}, nil, func(*StoredMessage) error {
		t.Fatal("a partition the queue does not have")
		return nil
	}))
	require.NoError(t, a.EachMessageIn(ctx, "other", []string{"a"}, []int64{-1}, nil, func(*StoredMessage) error {
		t.Fatal("a queue that does not exist")
		return nil
	}))
	require.Equal(t, []string{"b/3/s"}, read(after, []int{1, 0}))
	require.Equal(t, []int64{3, 3}, after)
	require.Error(t, a.EachMessageIn(ctx, "audit", []string{"a"}, nil, nil, func(*StoredMessage) error { return nil }))
	require.Error(t, a.EachMessageIn(ctx, "audit", []string{"a"}, []int64{3}, []time.Time{}, func(*StoredMessage) error { return nil }))

	st, err := a.Stats(ctx, "")
	require.NoError(t, err)
	require.Positive(t, st.DatabaseBytes)
	require.Positive(t, st.SidecarBytes)
	require.NotEmpty(t, st.WALPosition)
	require.Zero(t, st.WALBytes)
	commit(t, s, pa, items("audit", "a", "u"))
	st2, err := a.Stats(ctx, st.WALPosition)
	require.NoError(t, err)
	require.Positive(t, st2.WALBytes, "a commit writes WAL")
}

func sortedCopy(xs []string) []string {
	out := append([]string(nil), xs...)
	sort.Strings(out)
	return out
}

// TestAuditDrain: the drain check counts the (group, partition) pairs not
// consumed to the end (no consumer row, or a cursor short of the last
// offset) over the named partitions that hold a message, names one, and
// sums the groups' cursors + 1; a partition without a message and a
// partition not named are left out.
func TestAuditDrain(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "dr", 2, 3) // p0, p1: offsets 0..2
	_ = partition(t, s, "dr", "empty")
	other := partition(t, s, "dr", "unnamed")
	commit(t, s, other, items("dr", "unnamed", "u"))
	a, err := OpenAudit(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer a.Close()
	parts := []string{"p0", "p1", "empty"}

	d, err := a.Drain(ctx, "dr", []string{"g", "h"}, parts)
	require.NoError(t, err)
	require.Equal(t, int64(4), d.Behind, "two groups, two partitions with messages, no consumer row")
	require.Equal(t, int64(0), d.Sum)
	require.Nil(t, d.Cursor)
	require.Contains(t, []string{"p0", "p1"}, d.Partition)

	// Group g consumes p0 to the end and one message of p1.
	res, _, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 4, AutoAck: true}, pids, 0)
	require.NoError(t, err)
	require.Len(t, res.Messages, 4)
	d, err = a.Drain(ctx, "dr", []string{"g"}, parts)
	require.NoError(t, err)
	require.Equal(t, int64(1), d.Behind)
	require.Equal(t, int64(3+1), d.Sum, "cursor 2 in p0, 0 in p1")
	require.Equal(t, "g", d.Group)
	require.Equal(t, "p1", d.Partition)
	require.NotNil(t, d.Cursor)
	require.Equal(t, int64(0), *d.Cursor)
	require.Equal(t, int64(2), d.LastOffset)

	_, _, err = s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 10, AutoAck: true}, pids, 0)
	require.NoError(t, err)
	d, err = a.Drain(ctx, "dr", []string{"g"}, parts)
	require.NoError(t, err)
	require.Equal(t, int64(0), d.Behind)
	require.Equal(t, "", d.Partition)
	require.Equal(t, int64(6), d.Sum)
}
