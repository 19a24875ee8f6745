package persistence

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// explainRead runs sql (a consumer read) under EXPLAIN ANALYZE with args
// and returns the plan's text.
func explainRead(t *testing.T, s *Store, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	rows, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// leaseOf is a pop's lease id, for its acks.
func leaseOf(res queen.PopResult) *uuid.UUID {
	if res.LeaseID == nil {
		return nil
	}
	l := uuid.MustParse(*res.LeaseID)
	return &l
}

// cursorAt reads a consumer row's recorded position time (migration 0020).
func cursorAt(t *testing.T, s *Store, pid uuid.UUID, group string) (cursor int64, of *int64, at bool) {
	t.Helper()
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT "cursor", cursor_at_of, cursor_at IS NOT NULL FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2`,
		pid, group).Scan(&cursor, &of, &at))
	return cursor, of, at
}

// TestConsumerReadsPruneRangesBeforeTheCursor (issue 40): once a group's
// cursor has moved into the newest time range of segments_timed, a pop's
// read and an ack's transactionId check never descend a range stored before
// the cursor's segment (consumers.cursor_at); a cursor moved without it (a
// broker of the release before, or a seek) prunes nothing and reads right.
func TestConsumerReadsPruneRangesBeforeTheCursor(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "ct", `{"retentionSeconds":3600}`)
	pid := partition(t, s, "ct", "p")
	commitEach(t, s, pid, "ct", "p", "m0", "m1")
	old := pastSegmentRange(t, s, pid) // m0 and m1 stored in a range two minutes back
	commitEach(t, s, pid, "ct", "p", "m2", "m3", "m4")
	leaf := strings.TrimPrefix(old, "queen.")

	// g takes and acks m0..m2: its cursor (2) lies in the current range.
	res, st := pop(t, s, pid, "g", 3)
	require.Equal(t, queen.PopCut, st)
	require.Equal(t, []string{"m0", "m1", "m2"}, txns(res))
	for _, m := range res.Messages {
		require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, queen.AckItem{PartitionID: pid, Offset: m.Offset,
			TransactionID: m.TransactionID, Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: leaseOf(res)}))
	}
	cur, of, at := cursorAt(t, s, pid, "g")
	require.Equal(t, int64(2), cur)
	require.NotNil(t, of)
	require.Equal(t, int64(2), *of)
	require.True(t, at, "the cursor's time is recorded")

	// The next pop's read and an ack's check skip the old range.
	args, _ := spanArgs(t, s, []uuid.UUID{pid}, "g", 10)
	plan := explainRead(t, s, sqlConsumeSegsMany, args...)
	require.Regexp(t, `on `+leaf+` .*\(never executed\)|Subplans Removed`, plan, plan)
	require.NotRegexp(t, `on `+leaf+` .*\(actual time`, plan, plan)
	plan = explainRead(t, s, sqlConsumeHashAt, []uuid.UUID{pid}, []int64{3}, []string{"g"})
	require.NotRegexp(t, `on `+leaf+` .*\(actual time`, plan, plan)
	res, st = pop(t, s, pid, "g", 10)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m3", "m4"}, txns(res))
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, queen.AckItem{PartitionID: pid, Offset: 3,
		TransactionID: "m3", Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: leaseOf(res)}), "the check found m3's hash")

	// A cursor moved back without the time (an older broker's write):
	// nothing is pruned, and the old messages are read again.
	_, err := s.pool.Exec(ctx, `UPDATE queen.consumers SET "cursor" = 0, lease_id = NULL, lease_expires_at = NULL WHERE partition_id = $1 AND consumer_group = 'g'`, pid)
	require.NoError(t, err)
	args, _ = spanArgs(t, s, []uuid.UUID{pid}, "g", 10)
	plan = explainRead(t, s, sqlConsumeSegsMany, args...)
	require.Regexp(t, `on `+leaf+` .*\(actual time`, plan, plan)
	res, st = pop(t, s, pid, "g", 10)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m1", "m2", "m3", "m4"}, txns(res))

	// A seek back to the start clears the time, and the group reads all.
	require.NoError(t, s.ExpireLeases(ctx))
	_, err = s.pool.Exec(ctx, `UPDATE queen.consumers SET lease_id = NULL, lease_expires_at = NULL WHERE partition_id = $1`, pid)
	require.NoError(t, err)
	_, err = s.Seek(ctx, "ct", "g", queen.SeekRequest{ToBeginning: true})
	require.NoError(t, err)
	cur, of, at = cursorAt(t, s, pid, "g")
	require.Equal(t, int64(-1), cur)
	require.Nil(t, of)
	require.False(t, at)
	res, st = pop(t, s, pid, "g", 10)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m0", "m1", "m2", "m3", "m4"}, txns(res))
}
