package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// The partitions' allocator rows live in an UNLOGGED table (migration 0019):
// a crash or a failover empties it, and every end is then rebuilt from what
// is logged, the floor and the newest segment (queen.partition_cold_end).

// end reads partition pid's allocator row and its floor (-2: no row).
func end(t testing.TB, s *Store, pid uuid.UUID) (last, floor int64) {
	t.Helper()
	require.NoError(t, s.pool.QueryRow(context.Background(), `
SELECT COALESCE((SELECT last_offset FROM queen.partition_ends WHERE partition_id = $1), -2),
       COALESCE((SELECT floor_offset FROM queen.partitions WHERE id = $1), -2)`, pid).Scan(&last, &floor))
	return last, floor
}

// crashAndRefill is crash, then the sidecar's level-0 ranges re-filled
// (as Open does), so the pushes after it look hashes up again.
func crashAndRefill(t testing.TB, s *Store) {
	t.Helper()
	crash(t, s)
	_, err := refillLostRanges(context.Background(), s.pool)
	require.NoError(t, err)
}

// TestPartitionEndsRebuiltAfterCrash (SPEC.md §2, §3, §9): after a crash
// emptied the allocator rows, a push to a partition rebuilds its row from
// its segments and continues its offsets (never reuses one), a repeat is
// still a duplicate, readers see the ends of partitions nobody pushed to
// since, and the retention pass rebuilds those.
func TestPartitionEndsRebuiltAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	p1 := partition(t, s, "ce", "p1")
	p2 := partition(t, s, "ce", "p2")
	first := commit(t, s, p1, items("ce", "p1", "a", "b", "c"))
	require.Equal(t, int64(2), first.LastOffset)
	commitEach(t, s, p2, "ce", "p2", "x", "y")
	last, floor := end(t, s, p1)
	require.Equal(t, [2]int64{2, -1}, [2]int64{last, floor}, "pushes advance the allocator row, not the floor")

	crashAndRefill(t, s)
	last, _ = end(t, s, p2)
	require.Equal(t, int64(-2), last, "the crash emptied the rows")

	// Readers compute the end of a partition without a row.
	res, st := pop(t, s, p2, "g", 10)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"x", "y"}, txns(res))
	q, err := s.QueueDetail(ctx, "ce")
	require.NoError(t, err)
	ends := map[string]int64{}
	for _, p := range q.Partitions {
		ends[p.Name] = p.LastOffset
	}
	require.Equal(t, map[string]int64{"p1": 2, "p2": 1}, ends)

	out := commit(t, s, p1, items("ce", "p1", "b", "d"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(out))
	require.Equal(t, first.Results[1].MessageID, out.Results[0].MessageID)
	require.Equal(t, int64(3), out.Results[1].Offset, "offsets continue after the crash")
	last, _ = end(t, s, p1)
	require.Equal(t, int64(3), last)

	c := step(t, s, RetentionConfig{})
	require.Equal(t, int64(1), c.Ends, "the pass rebuilds p2's row; the push rebuilt p1's")
	last, _ = end(t, s, p2)
	require.Equal(t, int64(1), last)
	c = step(t, s, RetentionConfig{})
	require.Zero(t, c.Ends)

	// The full rebuild marked the rows whole (migration 0026), and a pass
	// then stops at the mark: a row removed by hand (no crash does that; a
	// crash empties the mark too) stays missing.
	var marked bool
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.partition_ends_alive)`).Scan(&marked))
	require.True(t, marked, "the full rebuild marks the rows whole")
	_, err = s.pool.Exec(ctx, `DELETE FROM queen.partition_ends WHERE partition_id = $1`, p2)
	require.NoError(t, err)
	c = step(t, s, RetentionConfig{})
	require.Zero(t, c.Ends, "a pass does not look for missing rows while they are marked whole")
	last, _ = end(t, s, p2)
	require.Equal(t, int64(-2), last)
	// Without the mark (a crash empties it with the rows), the next pass
	// looks, rebuilds and marks again.
	_, err = s.pool.Exec(ctx, `TRUNCATE queen.partition_ends_alive`)
	require.NoError(t, err)
	c = step(t, s, RetentionConfig{})
	require.Equal(t, int64(1), c.Ends)
	last, _ = end(t, s, p2)
	require.Equal(t, int64(1), last)
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.partition_ends_alive)`).Scan(&marked))
	require.True(t, marked)
}

// TestFloorKeepsOffsetsWhenRetentionDeletesEverything: retention that
// deletes every segment of a partition raises its floor first, so a crash
// afterwards still continues the offsets above the deleted ones.
func TestFloorKeepsOffsetsWhenRetentionDeletesEverything(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "fe", `{"retentionSeconds":60}`)
	pid := partition(t, s, "fe", "p")
	commitEach(t, s, pid, "fe", "p", "m0", "m1", "m2")
	age(t, s, pid, 120*time.Second)
	c := step(t, s, RetentionConfig{})
	require.Equal(t, int64(3), c.Expired.Rows)
	require.Empty(t, segmentOffsets(t, s, pid))
	_, floor := end(t, s, pid)
	require.Equal(t, int64(2), floor, "the floor holds the deleted segments' end")

	crashAndRefill(t, s)
	out := commit(t, s, pid, items("fe", "p", "m3", "m1"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Duplicate}, verdicts(out), "m1's hash outlives its segment")
	require.Equal(t, int64(3), out.Results[0].Offset)
}

// TestFloorKeepsOffsetsWhenARangeIsDropped: a time range of segments dropped
// whole raises the floor of the partitions whose newest segment it held,
// and only theirs.
func TestFloorKeepsOffsetsWhenARangeIsDropped(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "fr", `{"retentionSeconds":60}`)
	idle := partition(t, s, "fr", "idle")
	busy := partition(t, s, "fr", "busy")
	commitEach(t, s, idle, "fr", "idle", "i0", "i1")
	commitEach(t, s, busy, "fr", "busy", "b0")
	old := pastSegmentRange(t, s, idle, busy)
	commitEach(t, s, busy, "fr", "busy", "b1") // young

	c := step(t, s, RetentionConfig{})
	require.Equal(t, 1, c.SegmentRanges.Dropped)
	require.False(t, rangeExists(t, s, old))
	_, floor := end(t, s, idle)
	require.Equal(t, int64(1), floor, "idle's newest segment was in the range")
	_, floor = end(t, s, busy)
	require.Equal(t, int64(-1), floor, "busy's newest segment is elsewhere: no write")

	crashAndRefill(t, s)
	out := commit(t, s, idle, items("fr", "idle", "i2"))
	require.Equal(t, int64(2), out.Results[0].Offset)
	out = commit(t, s, busy, items("fr", "busy", "b2"))
	require.Equal(t, int64(2), out.Results[0].Offset)
}

// TestDeletedQueueLeavesNoAllocator: deleting a queue deletes its
// partitions' allocator rows, also one a rebuild (after a crash) inserts
// while the deletion waits for it, so no row outlives its partition and a
// push that still names a deleted partition never writes to it: it finds
// the partition gone and goes to the partition created again under the
// same name, at offset 0.
func TestDeletedQueueLeavesNoAllocator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	pid := partition(t, s, "dq", "p")
	commitEach(t, s, pid, "dq", "p", "a", "b")
	crashAndRefill(t, s)

	// A rebuild in flight (its transaction open) when the deletion starts.
	rebuild, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer rebuild.Rollback(ctx) //nolint:errcheck
	var n int64
	require.NoError(t, rebuild.QueryRow(ctx, sqlPartitionEndsEnsure, []uuid.UUID{pid}).Scan(&n))
	require.Equal(t, int64(1), n)
	deleted := make(chan error, 1)
	go func() {
		_, _, err := s.DeleteQueue(ctx, "dq")
		deleted <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')`).Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, 5*time.Millisecond, "the deletion waits for the rebuild")
	require.NoError(t, rebuild.Commit(ctx))
	require.NoError(t, <-deleted)
	last, _ := end(t, s, pid)
	require.Equal(t, int64(-2), last, "the rebuilt row went with the queue")

	its := items("dq", "p", "b")
	b := &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1}
	out, err := s.Commit(ctx, b)
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(out))
	require.NotEqual(t, pid, b.PartitionID, "the push went to the partition created again")
	require.Equal(t, int64(0), out.Results[0].Offset)
	require.Empty(t, segmentOffsets(t, s, pid), "nothing written under the deleted id")
	last, _ = end(t, s, b.PartitionID)
	require.Equal(t, int64(0), last)
}

// TestUpgradeFrom030 (SPEC.md §2, upgrades): a database 0.3.0 wrote
// (schema 18, layout 1: the allocator in partitions.last_offset) migrates in
// place to layout 2. Its stored ids stay duplicates naming their originals,
// new ids continue the offsets, and 0.3.0's push statement (its lock on
// partitions.last_offset) now fails instead of writing beside a new broker
// under another lock.
func TestUpgradeFrom030(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 18)
	const pa = "01a22cb6-e34c-7283-bd05-8abc3fa7ac20"
	ids := []uuid.UUID{uuid.MustParse("01a22cb6-0000-7000-8000-000000000011"), uuid.MustParse("01a22cb6-0000-7000-8000-000000000012")}
	var msgIDs, hashes, frames []byte
	rowHashes := make([]uuid.UUID, 2)
	for i, txn := range []string{"a", "b"} {
		msgIDs = append(msgIDs, ids[i][:]...)
		h := queen.HashTxn(txn)
		hashes = append(hashes, h[:]...)
		rowHashes[i] = uuid.UUID(h)
		frames = AppendFrame(frames, txn, nil, []byte(`{}`))
	}
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('up3')`,
		`INSERT INTO queen.partitions (id, queue_id, name) SELECT '` + pa + `', id, 'a' FROM queen.queues`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	// 0.3.0's push: its lock, then its writes (segment with hashes, level-0
	// rows, the allocator in the partition row).
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT id, last_offset FROM queen.partitions WHERE id = ANY ($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`, []string{pa})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
s AS (INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames, hashes)
      SELECT $1, 0, 1, t.now, $2, $3, $4 FROM t),
x AS (INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
      SELECT $1, h.hash, h.i - 1, 0, t.now FROM t, unnest($5::uuid[]) WITH ORDINALITY AS h (hash, i))
UPDATE queen.partitions SET last_offset = 1 WHERE id = $1`, pa, msgIDs, frames, hashes, rowHashes)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	_, err = Migrate(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT id, last_offset FROM queen.partitions WHERE id = ANY ($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`, []string{pa})
	require.ErrorContains(t, err, "42703", "0.3.0's lock fails: the column it reads is gone")

	after, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	defer after.Close()
	a := uuid.MustParse(pa)
	last, floor := end(t, after, a)
	require.Equal(t, [2]int64{1, 1}, [2]int64{last, floor}, "the migration copies the allocator into both")
	out := commit(t, after, a, items("up3", "a", "b", "c"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(out))
	require.Equal(t, ids[1], uuid.UUID(out.Results[0].MessageID))
	require.Equal(t, int64(2), out.Results[1].Offset)
}
