package persistence

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// knownPop runs one multi-partition pop through s's knownRows on its own
// connection and returns it with how many consume_ensure statements it sent.
func knownPop(t *testing.T, s *Store, spec queen.PopSpec, pids []uuid.UUID) (queen.PopResult, []queen.PopState, int) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	cq := &countingQuerier{q: conn}
	states := make([]queen.PopState, len(pids))
	var settled queen.LeaseStats
	res, err := popManyTx(ctx, cq, spec, pids, 0, states, &settled, s.known)
	require.NoError(t, err)
	if len(res.Messages) > 0 {
		require.Equal(t, 3, cq.trips, "lock, read, claim and commit")
	} else {
		require.LessOrEqual(t, cq.trips, 3, "lock, read (unless nothing is readable), commit")
	}
	return res, states, cq.count(sqlConsumeEnsure)
}

// acksOf acks every message of res completed, by offset, transactionId and
// lease.
func acksOf(res queen.PopResult) []queen.AckItem {
	var acks []queen.AckItem
	for _, m := range res.Messages {
		var lease *uuid.UUID
		if m.LeaseID != nil {
			l := uuid.MustParse(*m.LeaseID)
			lease = &l
		}
		acks = append(acks, queen.AckItem{PartitionID: uuid.MustParse(m.PartitionID), Offset: m.Offset,
			Status: queen.AckCompleted, ConsumerGroup: m.ConsumerGroup, LeaseID: lease, TransactionID: m.TransactionID})
	}
	return acks
}

func consumerRows(t *testing.T, s *Store, group string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM queen.consumers WHERE consumer_group = $1", group).Scan(&n))
	return n
}

// TestKnownConsumerRowsSkipCreation: once a pop committed on a consumer
// row, later pops and acks of it on the same Store send no consume_ensure
// (one statement per partition of every pop and ack before); the ack's
// round trips stay two.
func TestKnownConsumerRowsSkipCreation(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "known", 5, 3)
	spec := queen.PopSpec{Group: "g", Batch: 1000, SkipLocked: true}
	res, _, ensures := knownPop(t, s, spec, pids)
	require.Len(t, res.Messages, 15)
	require.Equal(t, 5, ensures, "first pop: every row created")

	acks := acksOf(res)
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	cq := &countingQuerier{q: conn}
	out, rows := groupByConsumerRow(acks)
	err = ackTx(ctx, cq, acks, out, rows, nil, s.known)
	conn.Release() // before any failure: the Store's cleanup waits for it
	require.NoError(t, err)
	require.Equal(t, 2, cq.trips)
	require.Zero(t, cq.count(sqlConsumeEnsure), "ack of known rows")
	for i, r := range out {
		require.Equal(t, queen.Acked, r.Result, "ack %d", i)
	}

	for i, pid := range pids {
		commit(t, s, pid, items("known", "p"+string(rune('0'+i)), "more"))
	}
	res, _, ensures = knownPop(t, s, spec, pids)
	require.Len(t, res.Messages, 5)
	require.Zero(t, ensures, "second pop of known rows")

	// The single-partition pop and the Store's Ack use it too.
	_, err = s.Ack(ctx, acksOf(res))
	require.NoError(t, err)
	require.NoError(t, s.known.check(ackKey{pids[0], "g"}))

	// This Store's DeleteGroup forgets them: the next pop creates again.
	_, err = s.DeleteGroup(ctx, "g")
	require.NoError(t, err)
	res, _, ensures = knownPop(t, s, spec, pids)
	require.Equal(t, 5, ensures)
	require.Len(t, res.Messages, 20, "a deleted group starts over")
}

// TestKnownConsumerRowsDeletedElsewhere: consumer rows another broker
// deleted (its DeleteGroup) while this Store knows them: a pop that skips
// locked rows answers them busy once and delivers from the group's new row
// at its next call; a pop naming its partition and an ack run again with
// the creation, within the same call. Nothing is lost or delivered twice
// to a live lease.
func TestKnownConsumerRowsDeletedElsewhere(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	other, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	pids := spanPartitions(t, s, "gone", 3, 2)
	spec := queen.PopSpec{Group: "g", Batch: 1000, SkipLocked: true}

	// Wildcard (skip-locked) pop: busy once, then delivered afresh.
	res, _, err := s.PopPartitions(ctx, spec, pids, 0)
	require.NoError(t, err)
	require.Len(t, res.Messages, 6)
	_, err = other.DeleteGroup(ctx, "g")
	require.NoError(t, err)
	res, states, ensures := knownPop(t, s, spec, pids)
	require.Empty(t, res.Messages)
	require.Zero(t, ensures)
	require.Equal(t, []queen.PopState{queen.PopBusy, queen.PopBusy, queen.PopBusy}, states)
	res, _, ensures = knownPop(t, s, spec, pids)
	require.Equal(t, 3, ensures, "the stale keys were dropped")
	require.Len(t, res.Messages, 6, "the recreated rows start at the beginning")

	// An ack of rows deleted since: run again with the creation, the
	// lease is gone (lease_invalid), and no row is left behind.
	_, err = other.DeleteGroup(ctx, "g")
	require.NoError(t, err)
	out, err := s.Ack(ctx, acksOf(res))
	require.NoError(t, err)
	for i, r := range out {
		require.NotEqual(t, queen.Acked, r.Result, "ack %d of a deleted row", i)
	}
	require.Zero(t, consumerRows(t, s, "g"), "a failed ack leaves no row")

	// A pop naming its partition (waits for the lock): delivered in the
	// same call.
	one := queen.PopSpec{Group: "h", Batch: 1000, PartitionID: pids[0]}
	res, _, err = popOne(ctx, s, one)
	require.NoError(t, err)
	require.Len(t, res.Messages, 2)
	_, err = s.Ack(ctx, acksOf(res))
	require.NoError(t, err)
	_, err = other.DeleteGroup(ctx, "h")
	require.NoError(t, err)
	res, state, err := popOne(ctx, s, one)
	require.NoError(t, err)
	require.Equal(t, queen.PopDelivered, state)
	require.Len(t, res.Messages, 2, "the recreated row starts at the beginning")
}

// TestConsumerRowCreationBesidePush: a push's partition lock (bundle_lock,
// held by a transaction that has not committed) does not block a consumer
// row's creation on that partition (its foreign key's key-share lock): a
// group's first pop and first ack there answer within the lock timeout
// (300 ms) instead of failing with lock_timeout, while a second push still
// waits for the lock.
func TestConsumerRowCreationBesidePush(t *testing.T) {
	s, _, url := setupLocks(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "beside", 1, 2)
	pid := pids[0]
	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(ctx) })
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	rows, err := tx.Query(ctx, sqlBundleLock, []uuid.UUID{pid})
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())

	res, _, err := popOne(ctx, s, queen.PopSpec{Group: "g", Batch: 10, PartitionID: pid})
	require.NoError(t, err, "the consumer row's creation did not wait for the push's lock")
	require.Len(t, res.Messages, 2)
	out, err := s.Ack(ctx, []queen.AckItem{{PartitionID: pid, Offset: 0, Status: queen.AckCompleted, ConsumerGroup: "h"}})
	require.NoError(t, err, "an ack creating its row did not wait either")
	require.Len(t, out, 1)

	its := items("beside", "p0", "late")
	_, err = s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	require.ErrorIs(t, err, queen.ErrLockTimeout, "pushes to the partition still take turns")
}
