package persistence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// Transactions (SPEC.md §5) against the store.

func txnPushOp(its ...*queen.Item) queen.TxnOp {
	op := queen.TxnOp{Type: queen.TxnPush}
	for _, it := range its {
		op.Items = append(op.Items, *it)
	}
	return op
}

func txnItem(queueName, partition, txn string) *queen.Item {
	return items(queueName, partition, txn)[0]
}

func txnAckOp(a queen.AckItem) queen.TxnOp { return queen.TxnOp{Type: queen.TxnAck, Ack: a} }

func txnAckAt(pid uuid.UUID, group string, off int64) queen.AckItem {
	return queen.AckItem{PartitionID: pid, Offset: off, Status: queen.AckCompleted, ConsumerGroup: group}
}

func runTxn(s *Store, ops ...queen.TxnOp) ([]queen.TxnOpResult, error) {
	return s.Transaction(context.Background(), &queen.TxnRequest{Ops: ops})
}

// txnConflictOf requires err to be a *queen.TxnConflict matching want
// (transport/wire renders it; its tests check the field paths and texts).
func txnConflictOf(t *testing.T, err error, want *queen.Error) *queen.TxnConflict {
	t.Helper()
	require.Error(t, err)
	var c *queen.TxnConflict
	require.True(t, errors.As(err, &c), "want a *queen.TxnConflict, got %T %v", err, err)
	require.ErrorIs(t, err, want)
	require.Equal(t, 409, queen.AsError(err).Status)
	return c
}

// stored returns the transaction ids stored in partition (queue, name), in offset order.
func txnStored(t *testing.T, s *Store, queueName, name string) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `
SELECT s.legacy_ids, p.id, s.first_offset, s.created_at, s.frames FROM queen.segments s
JOIN queen.partitions p ON p.num = s.partition_num JOIN queen.queues q ON q.id = p.queue_id
WHERE q.name = $1 AND p.name = $2 ORDER BY s.first_offset`, queueName, name)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var ids, frames []byte
		var seg SegmentIDs
		require.NoError(t, rows.Scan(&ids, &seg.Partition, &seg.First, &seg.At, &frames))
		seg.Stored = ids
		fs, err := UnpackFrames(seg, frames)
		require.NoError(t, err)
		for _, f := range fs {
			out = append(out, f.TransactionID)
		}
	}
	require.NoError(t, rows.Err())
	return out
}

func txnCursor(t *testing.T, s *Store, pid uuid.UUID, group string) int64 {
	t.Helper()
	var c int64 = -1
	err := s.pool.QueryRow(context.Background(), `SELECT "cursor" FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2`, pid, group).Scan(&c)
	if err != nil {
		require.ErrorContains(t, err, "no rows")
	}
	return c
}

func TestTxnAckAndPushCommitTogether(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	in, err := s.EnsurePartition(ctx, "in", "p")
	require.NoError(t, err)
	commit(t, s, in, items("in", "p", "m1", "m2"))
	res, _ := pop(t, s, in, g, 1)
	require.Equal(t, []string{"m1"}, txns(res))

	out, err := runTxn(s, txnAckOp(ackTxn(in, g, "m1", queen.AckCompleted, res.LeaseID)), txnPushOp(txnItem("out", "o", "x")))
	require.NoError(t, err)
	require.Equal(t, queen.Acked, out[0].Ack.Result)
	require.True(t, out[0].Ack.Success)
	require.Len(t, out[1].Push, 1)
	r := out[1].Push[0]
	require.Equal(t, queen.Queued, r.Verdict)
	require.Equal(t, int64(0), r.Offset)
	require.Equal(t, 7, int(r.MessageID.Version()), "message ids are UUIDv7")
	outPID, err := s.PartitionID(ctx, "out", "o")
	require.NoError(t, err)
	require.Equal(t, outPID, r.PartitionID, "the partition was created on first use")

	require.Equal(t, []string{"x"}, txnStored(t, s, "out", "o"))
	require.Equal(t, int64(0), txnCursor(t, s, in, g))
	next, st := pop(t, s, in, g, 1)
	require.Equal(t, queen.PopDelivered, st, "the ack released the lease")
	require.Equal(t, []string{"m2"}, txns(next))

	// The pushed message is consumable like any other.
	got, _ := pop(t, s, outPID, g, 10)
	require.Equal(t, []string{"x"}, txns(got))
	require.Equal(t, r.MessageID.String(), got.Messages[0].ID)
}

func TestTxnDuplicateInWindowRollsBack(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	in, err := s.EnsurePartition(ctx, "in", "p")
	require.NoError(t, err)
	commit(t, s, in, items("in", "p", "m1"))
	outPID, err := s.EnsurePartition(ctx, "out", "o")
	require.NoError(t, err)
	orig := commit(t, s, outPID, items("out", "o", "x"))

	_, err = runTxn(s,
		txnAckOp(ackTxn(in, g, "m1", queen.AckCompleted, nil)),
		txnPushOp(txnItem("out", "o", "y"), txnItem("out", "o", "x")))
	c := txnConflictOf(t, err, queen.ErrDuplicate)
	require.Equal(t, queen.TxnDuplicate, c.Kind)
	require.Equal(t, 1, c.Op)
	require.Equal(t, 1, c.Item)
	require.Equal(t, "out", c.Queue)
	require.Equal(t, "o", c.Partition)
	require.Equal(t, outPID, c.PartitionID)
	require.Equal(t, "x", c.TransactionID)
	require.Equal(t, orig.Results[0].MessageID, c.Original, "names the original")
	require.Equal(t, orig.Results[0].Offset, c.OriginalOffset)
	require.Positive(t, c.WindowSeconds)

	require.Equal(t, []string{"x"}, txnStored(t, s, "out", "o"), "y was not written")
	require.Equal(t, int64(-1), txnCursor(t, s, in, g), "the ack was not applied")
	var last int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT last_offset FROM queen.partition_ends WHERE partition_id = $1`, outPID).Scan(&last))
	require.Equal(t, int64(0), last, "no offset was allocated")

	// The same transaction without the duplicate commits.
	_, err = runTxn(s, txnAckOp(ackTxn(in, g, "m1", queen.AckCompleted, nil)), txnPushOp(txnItem("out", "o", "y")))
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, txnStored(t, s, "out", "o"))
	require.Equal(t, int64(0), txnCursor(t, s, in, g))
}

func TestTxnRepeatWithinTheTransaction(t *testing.T) {
	t.Parallel()
	s := setup(t)

	// Two push operations, same partition.
	_, err := runTxn(s, txnPushOp(txnItem("q", "p", "z")), txnPushOp(txnItem("q", "p", "z")))
	c := txnConflictOf(t, err, queen.ErrDuplicate)
	require.Equal(t, queen.TxnRepeat, c.Kind, "an in-transaction repeat has no stored original")
	require.Equal(t, 1, c.Op)
	require.Equal(t, 0, c.Item)
	require.Equal(t, "z", c.TransactionID)
	require.Equal(t, uuid.Nil, c.Original)
	require.Equal(t, [2]int{0, 0}, [2]int{c.EarlierOp, c.EarlierItem}, "names the item it repeats")

	// One push operation, same partition.
	_, err = runTxn(s, txnPushOp(txnItem("q", "p", "a"), txnItem("q", "p", "z"), txnItem("q", "p", "z")))
	c = txnConflictOf(t, err, queen.ErrDuplicate)
	require.Equal(t, [2]int{0, 2}, [2]int{c.Op, c.Item})
	require.Equal(t, [2]int{0, 1}, [2]int{c.EarlierOp, c.EarlierItem})
	require.Empty(t, txnStored(t, s, "q", "p"))

	// The scope is one partition: the same id in two partitions is fine.
	out, err := runTxn(s, txnPushOp(txnItem("q", "p", "z")), txnPushOp(txnItem("q", "other", "z"), txnItem("q2", "p", "z")))
	require.NoError(t, err)
	require.Equal(t, queen.Queued, out[0].Push[0].Verdict)
	require.Equal(t, queen.Queued, out[1].Push[1].Verdict)
	require.Equal(t, []string{"z"}, txnStored(t, s, "q", "p"))
	require.Equal(t, []string{"z"}, txnStored(t, s, "q", "other"))

	// The earliest duplicate in request order is named, whatever the
	// partition order.
	_, err = runTxn(s, txnPushOp(txnItem("q", "other", "new"), txnItem("q", "other", "z")), txnPushOp(txnItem("q", "p", "z")))
	c = txnConflictOf(t, err, queen.ErrDuplicate)
	require.Equal(t, [2]int{0, 1}, [2]int{c.Op, c.Item})
	require.Equal(t, "other", c.Partition)
}

func TestTxnWindowZeroChecksNothing(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "q", `{"dedupWindowSeconds":0}`)
	pid, err := s.EnsurePartition(context.Background(), "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "z"))
	out, err := runTxn(s, txnPushOp(txnItem("q", "p", "z"), txnItem("q", "p", "z")))
	require.NoError(t, err)
	require.Equal(t, int64(1), out[0].Push[0].Offset)
	require.Equal(t, int64(2), out[0].Push[1].Offset)
	require.NotEqual(t, out[0].Push[0].MessageID, out[0].Push[1].MessageID)
	require.Equal(t, []string{"z", "z", "z"}, txnStored(t, s, "q", "p"))
}

func TestTxnFailedAckRollsBackItsPush(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "in", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("in", "p", "m1", "m2"))

	// Unknown transactionId.
	_, err = runTxn(s, txnPushOp(txnItem("out", "o", "w")), txnAckOp(ackTxn(pid, g, "never", queen.AckCompleted, nil)))
	c := txnConflictOf(t, err, queen.ErrUnresolvable)
	require.Equal(t, queen.TxnUnresolvable, c.Kind)
	require.Equal(t, 1, c.Op)
	require.False(t, c.ByOffset, "named by transactionId")
	require.Equal(t, "never", c.TransactionID)
	require.Equal(t, pid, c.PartitionID)
	require.Contains(t, c.Detail, "never")
	require.Empty(t, txnStored(t, s, "out", "o"))

	// An offset never allocated, an unknown partition.
	_, err = runTxn(s, txnPushOp(txnItem("out", "o", "w")), txnAckOp(txnAckAt(pid, g, 99)))
	require.True(t, txnConflictOf(t, err, queen.ErrUnresolvable).ByOffset)
	_, err = runTxn(s, txnPushOp(txnItem("out", "o", "w")), txnAckOp(txnAckAt(uuid.New(), g, 0)))
	_ = txnConflictOf(t, err, queen.ErrUnresolvable) // the helper asserts the code and status; the conflict itself is not needed

	// A lease that is not the partition's live lease; the earlier acks of
	// the transaction are undone too.
	res, _ := pop(t, s, pid, g, 2)
	wrong := uuid.NewString()
	_, err = runTxn(s,
		txnPushOp(txnItem("out", "o", "w")),
		txnAckOp(ackTxn(pid, "other", "m1", queen.AckCompleted, nil)),
		txnAckOp(ackTxn(pid, g, "m1", queen.AckCompleted, &wrong)))
	c = txnConflictOf(t, err, queen.ErrLeaseInvalid)
	require.Equal(t, queen.TxnLeaseInvalid, c.Kind)
	require.Equal(t, 2, c.Op)
	require.Equal(t, wrong, c.LeaseID.String())
	require.Empty(t, txnStored(t, s, "out", "o"))
	require.Equal(t, int64(-1), txnCursor(t, s, pid, "other"))

	// The right lease commits.
	out, err := runTxn(s, txnPushOp(txnItem("out", "o", "w")), txnAckOp(ackTxn(pid, g, "m2", queen.AckCompleted, res.LeaseID)))
	require.NoError(t, err)
	require.Equal(t, queen.Acked, out[1].Ack.Result)
	require.Equal(t, []string{"w"}, txnStored(t, s, "out", "o"))
	require.Equal(t, int64(1), txnCursor(t, s, pid, g))

	// A failed ack is not an error: it schedules a retry and commits.
	commit(t, s, pid, items("in", "p", "m3"))
	res, _ = pop(t, s, pid, g, 1)
	out, err = runTxn(s, txnAckOp(ackTxn(pid, g, "m3", queen.AckFailed, res.LeaseID)), txnPushOp(txnItem("out", "o", "v")))
	require.NoError(t, err)
	require.Equal(t, queen.RetryScheduled, out[0].Ack.Result)
	require.Equal(t, []string{"w", "v"}, txnStored(t, s, "out", "o"))
}

func TestTxnRequiredLeases(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "in", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("in", "p", "m1", "m2"))
	res, _ := pop(t, s, pid, g, 1)
	lease := uuid.MustParse(*res.LeaseID)

	// Unknown lease.
	unknown := uuid.New()
	_, err = s.Transaction(ctx, &queen.TxnRequest{
		Ops:            []queen.TxnOp{txnAckOp(ackTxn(pid, g, "m1", queen.AckCompleted, nil)), txnPushOp(txnItem("out", "o", "a"))},
		RequiredLeases: []uuid.UUID{lease, unknown},
	})
	c := txnConflictOf(t, err, queen.ErrLeaseInvalid)
	require.Equal(t, queen.TxnRequiredLease, c.Kind)
	require.Equal(t, 1, c.Op, "the index in requiredLeases")
	require.Equal(t, unknown, *c.LeaseID)
	require.Empty(t, txnStored(t, s, "out", "o"))
	_, err = s.Transaction(ctx, &queen.TxnRequest{Ops: []queen.TxnOp{txnPushOp(txnItem("out", "o", "a"))}, RequiredLeases: []uuid.UUID{unknown}})
	_ = txnConflictOf(t, err, queen.ErrLeaseInvalid) // the helper asserts the code and status; the conflict itself is not needed
	require.Empty(t, txnStored(t, s, "out", "o"), "a transaction without acks checks its required leases too")

	// The live lease: the ack (which ends the span and releases the lease)
	// and the push commit.
	_, err = s.Transaction(ctx, &queen.TxnRequest{
		Ops:            []queen.TxnOp{txnAckOp(ackTxn(pid, g, "m1", queen.AckCompleted, nil)), txnPushOp(txnItem("out", "o", "a"))},
		RequiredLeases: []uuid.UUID{lease},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, txnStored(t, s, "out", "o"))

	// An expired lease (its expiry moved into the past).
	res, _ = pop(t, s, pid, g, 1)
	expired := uuid.MustParse(*res.LeaseID)
	_, err = s.pool.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE lease_id = $1`, expired)
	require.NoError(t, err)
	_, err = s.Transaction(ctx, &queen.TxnRequest{
		Ops:            []queen.TxnOp{txnPushOp(txnItem("out", "o", "b"))},
		RequiredLeases: []uuid.UUID{expired},
	})
	_ = txnConflictOf(t, err, queen.ErrLeaseInvalid) // the helper asserts the code and status; the conflict itself is not needed
	require.Equal(t, []string{"a"}, txnStored(t, s, "out", "o"))
}

func TestTxnAckOfAMessagePushedInTheSameTransaction(t *testing.T) {
	t.Parallel()
	s := setup(t)
	pid, err := s.EnsurePartition(context.Background(), "q", "p")
	require.NoError(t, err)
	out, err := runTxn(s,
		txnPushOp(txnItem("q", "p", "a"), txnItem("q", "p", "b")),
		txnAckOp(ackTxn(pid, g, "a", queen.AckCompleted, nil)))
	require.NoError(t, err)
	require.Equal(t, queen.Acked, out[1].Ack.Result)
	require.Equal(t, int64(0), *out[1].Ack.Offset)
	res, _ := pop(t, s, pid, g, 10)
	require.Equal(t, []string{"b"}, txns(res))
}

// Two transactions touching the same two partitions in opposite orders,
// concurrently, 100 times per shape: locks are taken in one global order, so
// neither ever fails (PostgreSQL would abort one with a deadlock error).
// Each round uses a fresh consumer group, so the acks create their consumer
// rows inside the transactions (whose foreign key locks the partition row).
func TestTxnOppositeOrdersNeverDeadlock(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	a, err := s.EnsurePartition(ctx, "q", "A")
	require.NoError(t, err)
	b, err := s.EnsurePartition(ctx, "q", "B")
	require.NoError(t, err)
	commit(t, s, a, items("q", "A", "a0"))
	commit(t, s, b, items("q", "B", "b0"))
	shapes := map[string]func(round int, group string) [2][]queen.TxnOp{
		// Each pushes to both partitions, in opposite orders, and acks in one.
		"push-both": func(round int, group string) [2][]queen.TxnOp {
			return [2][]queen.TxnOp{{
				txnPushOp(txnItem("q", "A", fmt.Sprintf("t1-a-%d", round))),
				txnAckOp(txnAckAt(b, group, 0)),
				txnPushOp(txnItem("q", "B", fmt.Sprintf("t1-b-%d", round))),
			}, {
				txnPushOp(txnItem("q", "B", fmt.Sprintf("t2-b-%d", round))),
				txnAckOp(txnAckAt(a, group, 0)),
				txnPushOp(txnItem("q", "A", fmt.Sprintf("t2-a-%d", round))),
			}}
		},
		// Each pushes to one partition and acks in the other.
		"push-one-ack-other": func(round int, group string) [2][]queen.TxnOp {
			return [2][]queen.TxnOp{{
				txnPushOp(txnItem("q", "A", fmt.Sprintf("u1-a-%d", round))),
				txnAckOp(txnAckAt(b, group, 0)),
			}, {
				txnPushOp(txnItem("q", "B", fmt.Sprintf("u2-b-%d", round))),
				txnAckOp(txnAckAt(a, group, 0)),
			}}
		},
	}
	for name, shape := range shapes {
		for round := 0; round < 100; round++ {
			txs := shape(round, fmt.Sprintf("%s-%d", name, round))
			var wg sync.WaitGroup
			var errs [2]error
			for n := range txs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					_, errs[n] = s.Transaction(cctx, &queen.TxnRequest{Ops: txs[n]})
				}()
			}
			wg.Wait()
			require.NoError(t, errs[0], "%s round %d", name, round)
			require.NoError(t, errs[1], "%s round %d", name, round)
		}
	}
	require.Len(t, txnStored(t, s, "q", "A"), 301)
	require.Len(t, txnStored(t, s, "q", "B"), 301)
}
