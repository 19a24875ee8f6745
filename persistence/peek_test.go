package persistence

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// Peek returns a partition's stored messages above an offset in offset
// order, across segment boundaries, bounded by its limit; it writes nothing.
func TestPeek(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "pq", "p")
	require.NoError(t, err)
	var ids []string
	for _, batch := range [][]string{{"a", "b", "c"}, {"d"}, {"e", "f"}} {
		out := commit(t, s, pid, items("pq", "p", batch...))
		for _, r := range out.Results {
			ids = append(ids, r.MessageID.String())
		}
	}
	before := peekRowCounts(t, s)

	all, err := s.Peek(ctx, queen.PeekQuery{Queue: "pq", Partition: "p", After: -1, Limit: 50})
	require.NoError(t, err)
	require.Equal(t, pid.String(), all.PartitionID)
	require.EqualValues(t, 5, all.LastOffset)
	require.Len(t, all.Messages, 6)
	for i, m := range all.Messages {
		require.EqualValues(t, i, m.Offset)
		require.Equal(t, ids[i], m.ID)
		require.Equal(t, "p", m.Partition)
		require.False(t, m.CreatedAt.IsZero())
	}
	require.Equal(t, "d", all.Messages[3].TransactionID)
	require.JSONEq(t, `{"i":1}`, string(all.Messages[5].Data))

	// after and limit: a window inside one segment, one across segments.
	for _, c := range []struct {
		after int64
		limit int
		want  []int64
	}{
		{1, 1, []int64{2}},
		{1, 3, []int64{2, 3, 4}},
		{0, 50, []int64{1, 2, 3, 4, 5}},
		{4, 50, []int64{5}},
		{5, 50, nil},
		{99, 10, nil},
	} {
		got, err := s.Peek(ctx, queen.PeekQuery{Queue: "pq", Partition: "p", After: c.after, Limit: c.limit})
		require.NoError(t, err)
		var offs []int64
		for _, m := range got.Messages {
			offs = append(offs, m.Offset)
		}
		require.Equal(t, c.want, offs, "after %d limit %d", c.after, c.limit)
		require.NotNil(t, got.Messages)
	}

	// An unknown queue or partition is not found (and creates nothing).
	_, err = s.Peek(ctx, queen.PeekQuery{Queue: "nope", Partition: "p", After: -1, Limit: 5})
	require.ErrorIs(t, err, queen.ErrNotFound)
	_, err = s.Peek(ctx, queen.PeekQuery{Queue: "pq", Partition: "nope", After: -1, Limit: 5})
	require.ErrorIs(t, err, queen.ErrNotFound)
	require.Equal(t, before, peekRowCounts(t, s), "a peek wrote rows")
}

// peekRowCounts counts the rows a peek must never write: consumers (leases,
// cursors), partitions, queues, segments.
func peekRowCounts(t testing.TB, s *Store) [4]int64 {
	t.Helper()
	var n [4]int64
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM queen.consumers), (SELECT count(*) FROM queen.partitions),
		(SELECT count(*) FROM queen.queues), (SELECT count(*) FROM queen.segments)`).Scan(&n[0], &n[1], &n[2], &n[3]))
	return n
}

// QueueDetail lists partitions by name and each group's cursors with lag
// and live leases; an unknown queue is not found.
func TestQueueDetail(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pa, err := s.EnsurePartition(ctx, "dq", "a")
	require.NoError(t, err)
	pb, err := s.EnsurePartition(ctx, "dq", "b")
	require.NoError(t, err)
	commit(t, s, pa, items("dq", "a", "1", "2", "3"))
	commit(t, s, pb, items("dq", "b", "1"))
	_, err = s.pool.Exec(ctx, `INSERT INTO queen.consumers (partition_id, consumer_group, queue_id, "cursor", lease_expires_at)
		SELECT id, 'g1', queue_id, 0, clock_timestamp() + interval '1 minute' FROM queen.partitions WHERE id = $1::uuid
		UNION ALL SELECT id, 'g1', queue_id, 0, clock_timestamp() - interval '1 minute' FROM queen.partitions WHERE id = $2::uuid
		UNION ALL SELECT id, 'g0', queue_id, -1, NULL FROM queen.partitions WHERE id = $1::uuid`, pa, pb)
	require.NoError(t, err)

	d, err := s.QueueDetail(ctx, "dq")
	require.NoError(t, err)
	require.EqualValues(t, 2, d.PartitionCount)
	require.False(t, d.Truncated)
	require.Len(t, d.Partitions, 2)
	require.Equal(t, "a", d.Partitions[0].Name)
	require.Equal(t, pa.String(), d.Partitions[0].ID)
	require.EqualValues(t, 2, d.Partitions[0].LastOffset)
	require.EqualValues(t, 0, d.Partitions[1].LastOffset)
	require.Len(t, d.ConsumerGroups, 2)
	g0, g1 := d.ConsumerGroups[0], d.ConsumerGroups[1]
	require.Equal(t, "g0", g0.ConsumerGroup)
	require.EqualValues(t, 3, g0.Lag)
	require.Equal(t, "g1", g1.ConsumerGroup)
	require.EqualValues(t, 2, g1.Lag)
	require.Len(t, g1.Cursors, 2)
	require.Equal(t, queen.GroupCursor{Partition: "a", Cursor: 0, LastOffset: 2, Lag: 2, LeaseExpiresAt: g1.Cursors[0].LeaseExpiresAt}, g1.Cursors[0])
	require.NotNil(t, g1.Cursors[0].LeaseExpiresAt, "a live lease shows")
	require.Nil(t, g1.Cursors[1].LeaseExpiresAt, "an expired lease does not")

	e, err := s.QueueDetail(ctx, "empty-none")
	require.ErrorIs(t, err, queen.ErrNotFound)
	require.Empty(t, e.Partitions)
	_, err = s.Configure(ctx, queen.ConfigureRequest{Queue: "empty"})
	require.NoError(t, err)
	e, err = s.QueueDetail(ctx, "empty")
	require.NoError(t, err)
	require.Empty(t, e.Partitions)
	require.NotNil(t, e.Partitions)
}

// The peek's plan bounds its segment scan by the (partition_num,
// first_offset) index on every leaf table of the partitioned segments table
// (migration 0010), custom and generic plans alike, on a filled partition:
// a peek near the end of 40,000 segments reads a few index pages, never the
// partition's consumed segments.
func TestPeekPlanUsesOffsetIndex(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "plan", "p")
	require.NoError(t, err)
	other, err := s.EnsurePartition(ctx, "plan", "other")
	require.NoError(t, err)
	// A time range of segments_timed holding the newest segments, the rest
	// in segments_kept: both leaves must be read through their index.
	var lo, hi time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT date_trunc('minute', clock_timestamp()) - interval '1 minute', date_trunc('minute', clock_timestamp()) + interval '1 minute'`).Scan(&lo, &hi))
	var created bool
	require.NoError(t, s.pool.QueryRow(ctx, sqlSegmentRangeCreate, lo, hi).Scan(&created))
	for _, p := range []any{pid, other} {
		_, err = s.pool.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, timed)
			SELECT (SELECT num FROM queen.partitions WHERE id = $1), g * 10, g * 10 + 9, $2::timestamptz, decode(repeat('ab', 160), 'hex'), decode(repeat('cd', 200), 'hex'), g >= 39000
			  FROM generate_series(0, 39999) g`, p, lo.Add(10*time.Second))
		require.NoError(t, err)
	}
	_, err = s.pool.Exec(ctx, `UPDATE queen.partition_ends SET last_offset = 399999`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `ANALYZE queen.segments_kept; ANALYZE queen.segments_timed; ANALYZE queen.partitions; ANALYZE queen.queues`)
	require.NoError(t, err)

	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	explain := func(after int64) string {
		rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+sqlPeekMessages, pgx.QueryExecModeExec, "plan", "p", after, int64(20))
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	check := func(what, plan string) {
		t.Helper()
		// (queues and partitions hold one row or two here: a sequential scan
		// of them is the planner's right choice.)
		require.NotRegexp(t, `Seq Scan on segments`, plan, "%s:\n%s", what, plan)
		require.Regexp(t, `Index Cond: \(\(partition_num = b\.num\) AND \(first_offset >= b\.lo\)\)`, plan, "%s:\n%s", what, plan)
		for _, leaf := range []string{"segments_kept", "segments_2"} { // segments_YYYYMMDD_HHMM_2m: the range
			require.Regexp(t, `Index (Only )?Scan (Backward )?using \S+ on `+leaf, plan, "%s: %s read by its index:\n%s", what, leaf, plan)
		}
		t.Logf("%s:\n%s", what, plan)
	}
	for _, after := range []int64{389_995, 399_950, -1} {
		check(fmt.Sprintf("custom plan, after %d", after), explain(after))
	}
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE peek(text, text, bigint, bigint) AS `+sqlPeekMessages)
	require.NoError(t, err)
	for _, after := range []int64{389_995, -1} {
		rows, err := conn.Query(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE peek('plan', 'p', %d, 20)`, after), pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		check(fmt.Sprintf("generic plan, after %d", after), strings.Join(lines, "\n"))
	}
	// And the answer is right on the filled table: 20 messages from 389,996
	// cross two segments' boundaries.
	res, err := s.pool.Query(ctx, sqlPeekMessages, "plan", "p", int64(389_995), int64(20))
	require.NoError(t, err)
	var firsts []int64
	for res.Next() {
		var pidv, last, first, created, ids, frames, producer any
		require.NoError(t, res.Scan(&pidv, &last, &first, &created, &ids, &frames, &producer))
		firsts = append(firsts, first.(int64))
	}
	require.NoError(t, res.Err())
	require.Equal(t, []int64{389_990, 390_000, 390_010}, firsts)
}
