package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

func pop(t *testing.T, s *Store, pid uuid.UUID, group string, batch int) (queen.PopResult, queen.PopState) {
	t.Helper()
	res, st, err := popOne(context.Background(), s, queen.PopSpec{PartitionID: pid, Group: group, Batch: batch})
	require.NoError(t, err)
	return res, st
}

// popOne pops spec.PartitionID alone: a pop of one partition is
// PopPartitions over that one, most 1.
func popOne(ctx context.Context, s *Store, spec queen.PopSpec) (queen.PopResult, queen.PopState, error) {
	res, states, err := s.PopPartitions(ctx, spec, []uuid.UUID{spec.PartitionID}, 1)
	return res, states[0], err
}

func txns(res queen.PopResult) []string {
	out := make([]string, len(res.Messages))
	for i, m := range res.Messages {
		out[i] = m.TransactionID
	}
	return out
}

func ackTxn(pid uuid.UUID, group, txn string, status queen.AckStatus, lease *string) queen.AckItem {
	it := queen.AckItem{TransactionID: txn, Hash: queen.HashTxn(txn), PartitionID: pid, Offset: -1, Status: status, ConsumerGroup: group}
	if lease != nil {
		l := uuid.MustParse(*lease)
		it.LeaseID = &l
	}
	return it
}

func ack(t *testing.T, s *Store, items ...queen.AckItem) []queen.AckOutcome {
	t.Helper()
	res, err := s.Ack(context.Background(), items)
	require.NoError(t, err)
	out := make([]queen.AckOutcome, len(res))
	for i, r := range res {
		out[i] = r.Result
	}
	return out
}

// configure sets the options opts (a JSON object of whole-number and bool
// options, as a configure body's "options") on queueName, a full replace.
func configure(t *testing.T, s *Store, queueName, opts string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(opts))
	dec.DisallowUnknownFields()
	var p queen.OptionsPatch
	require.NoError(t, dec.Decode(&p))
	_, err := s.Configure(context.Background(), queen.ConfigureRequest{Queue: queueName, Options: p})
	require.NoError(t, err)
}

const g = queen.DefaultConsumerGroup

func TestAckIsAnOffsetCommit(t *testing.T) {
	t.Parallel()
	s := setup(t)
	pid, err := s.EnsurePartition(context.Background(), "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m1", "m2", "m3"))

	res, st := pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopCut, st)
	require.Equal(t, []string{"m1", "m2"}, txns(res))
	require.Equal(t, int64(0), res.Messages[0].Offset)
	require.NotNil(t, res.LeaseID)

	_, st = pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopBusy, st, "the lease holds the partition for the group")
	other, st := pop(t, s, pid, "other", 5)
	require.Equal(t, queen.PopDelivered, st, "another group is not blocked")
	require.Len(t, other.Messages, 3)

	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "m2", queen.AckCompleted, res.LeaseID)))
	require.Equal(t, []queen.AckOutcome{queen.Stale}, ack(t, s, ackTxn(pid, g, "m1", queen.AckCompleted, nil)), "m1 was completed by the offset commit")

	res, st = pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopDelivered, st, "the ack of the span's end released the lease")
	require.Equal(t, []string{"m3"}, txns(res))
}

func TestAckUnresolvable(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	require.Equal(t, []queen.AckOutcome{queen.Unresolvable}, ack(t, s, ackTxn(pid, g, "never", queen.AckCompleted, nil)))

	configure(t, s, "q", `{"leaseTime":1}`)
	commit(t, s, pid, items("q", "p", "m1"))
	res, _ := pop(t, s, pid, g, 1)
	require.Len(t, res.Messages, 1)
	require.NoError(t, s.ForgetHashes(ctx, pid, 0))
	out, err := s.Ack(ctx, []queen.AckItem{ackTxn(pid, g, "m1", queen.AckCompleted, res.LeaseID)})
	require.NoError(t, err)
	require.Equal(t, queen.Unresolvable, out[0].Result)
	require.False(t, out[0].Success, "unresolvable is never a success")

	// Redelivered once the lease runs out.
	deadline := time.Now().Add(30 * time.Second)
	for {
		again, st := pop(t, s, pid, g, 1)
		if st == queen.PopDelivered {
			require.Equal(t, []string{"m1"}, txns(again))
			require.Equal(t, 1, again.Messages[0].RetryCount, "an expired lease counts one failed delivery")
			// Ack by offset still works without the sidecar.
			it := queen.AckItem{PartitionID: pid, Offset: 0, Status: queen.AckCompleted, ConsumerGroup: g}
			require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, it))
			break
		}
		require.Equal(t, queen.PopBusy, st)
		require.True(t, time.Now().Before(deadline), "lease never expired")
		time.Sleep(50 * time.Millisecond)
	}
}

// One ack call over several consumer rows (partitions and groups, one of
// them a partition that does not exist, first or last in the lock order)
// applies every row's acks in one transaction and commits them all.
func TestAckSpansConsumerRows(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	p1, err := s.EnsurePartition(ctx, "q", "p1")
	require.NoError(t, err)
	p2, err := s.EnsurePartition(ctx, "q", "p2")
	require.NoError(t, err)
	commit(t, s, p1, items("q", "p1", "a0", "a1", "a2"))
	commit(t, s, p2, items("q", "p2", "b0", "b1", "b2"))
	byOffset := func(pid uuid.UUID, group string, off int64) queen.AckItem {
		return queen.AckItem{PartitionID: pid, Offset: off, Status: queen.AckCompleted, ConsumerGroup: group}
	}
	for _, missing := range []uuid.UUID{uuid.Nil, uuid.Max} { // first, then last in the lock order
		group := "first"
		if missing == uuid.Max {
			group = "last"
		}
		out, err := s.Ack(ctx, []queen.AckItem{
			byOffset(p2, group, 1), byOffset(missing, group, 0), byOffset(p1, group, 0),
			byOffset(p1, group+"-other", 2), ackTxn(p2, group, "b0", queen.AckCompleted, nil),
		})
		require.NoError(t, err)
		require.Len(t, out, 5)
		want := []queen.AckOutcome{queen.Acked, queen.Unresolvable, queen.Acked, queen.Acked, queen.Acked}
		cursors := []int64{1, -2, 0, 2, 1}
		for i, r := range out {
			require.Equal(t, i, r.Index)
			require.Equal(t, want[i], r.Result, "item %d", i)
			if cursors[i] == -2 {
				require.Nil(t, r.Cursor, "item %d", i)
				continue
			}
			require.NotNil(t, r.Cursor, "item %d", i)
			require.Equal(t, cursors[i], *r.Cursor, "item %d", i)
		}
		res, st := pop(t, s, p1, group, 5)
		require.Equal(t, queen.PopDelivered, st)
		require.Equal(t, []string{"a1", "a2"}, txns(res), "p1's cursor committed")
		res, _ = pop(t, s, p2, group, 5)
		require.Equal(t, []string{"b2"}, txns(res), "p2's cursor committed")
		_, st = pop(t, s, p1, group+"-other", 5)
		require.Equal(t, queen.PopEmpty, st, "the other group's cursor committed")
	}
}

func TestFailedAckStopsTheCursor(t *testing.T) {
	t.Parallel()
	s := setup(t)
	pid, err := s.EnsurePartition(context.Background(), "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m1", "m2", "m3", "m4"))
	res, _ := pop(t, s, pid, g, 3)
	out := ack(t, s,
		ackTxn(pid, g, "m1", queen.AckCompleted, res.LeaseID),
		ackTxn(pid, g, "m2", queen.AckFailed, res.LeaseID),
		ackTxn(pid, g, "m3", queen.AckCompleted, res.LeaseID))
	require.Equal(t, []queen.AckOutcome{queen.Acked, queen.RetryScheduled, queen.RetryScheduled}, out)
	res, st := pop(t, s, pid, g, 3)
	require.Equal(t, queen.PopDelivered, st, "a failed ack releases the lease")
	require.Equal(t, []string{"m2", "m3", "m4"}, txns(res))
	require.Equal(t, 1, res.Messages[0].RetryCount)
	require.Equal(t, 0, res.Messages[1].RetryCount)
}

func TestRetryLimitDeadLetters(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "q", `{"retryLimit":2}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "poison", "next"))
	for attempt := 1; attempt <= 3; attempt++ {
		res, st := pop(t, s, pid, g, 1)
		require.Equal(t, queen.PopCut, st)
		require.Equal(t, []string{"poison"}, txns(res))
		require.Equal(t, attempt-1, res.Messages[0].RetryCount)
		it := ackTxn(pid, g, "poison", queen.AckFailed, res.LeaseID)
		it.Error = "boom"
		want := queen.RetryScheduled
		if attempt == 3 {
			want = queen.DeadLettered
		}
		require.Equal(t, []queen.AckOutcome{want}, ack(t, s, it), "attempt %d", attempt)
	}
	res, _ := pop(t, s, pid, g, 1)
	require.Equal(t, []string{"next"}, txns(res), "the next message flows")
	dl, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", ConsumerGroup: g, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, int64(1), total)
	require.Equal(t, "poison", dl[0].TransactionID)
	require.Equal(t, "boom", dl[0].Error)
	require.Equal(t, 3, dl[0].Attempts)
	require.Equal(t, int64(0), dl[0].Offset)
	require.JSONEq(t, `{"i":0}`, string(dl[0].Data))
}

func TestSubscriptionModes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "old1", "old2"))
	var mid time.Time
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&mid))
	commit(t, s, pid, items("q", "p", "mid1"))

	_, st, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "new", Batch: 10, SubscriptionNew: true})
	require.NoError(t, err)
	require.Equal(t, queen.PopEmpty, st, "new skips the backlog")
	commit(t, s, pid, items("q", "p", "new1"))
	res, _ := pop(t, s, pid, "new", 10) // the subscription is fixed by the first pop
	require.Equal(t, []string{"new1"}, txns(res))

	res, _, err = popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "from", Batch: 10, SubscriptionFrom: &mid})
	require.NoError(t, err)
	require.Equal(t, []string{"mid1", "new1"}, txns(res))

	res, _ = pop(t, s, pid, "all", 10)
	require.Equal(t, []string{"old1", "old2", "mid1", "new1"}, txns(res))
}

func TestExtendLease(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	// A 10 s lease: the extends below must come while it is live (a 1 s
	// lease could lapse first on a busy machine); expiry is forced below.
	configure(t, s, "q", `{"leaseTime":10}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m1"))
	res, _ := pop(t, s, pid, g, 1)
	lease := uuid.MustParse(*res.LeaseID)
	long, err := s.ExtendLease(ctx, lease, 60)
	require.NoError(t, err)
	require.True(t, long.After(res.LeaseExpiresAt.Add(45*time.Second)), "extended to %v from %v", long, res.LeaseExpiresAt)
	short, err := s.ExtendLease(ctx, lease, 1)
	require.NoError(t, err)
	require.Equal(t, long, short, "extend never shortens a lease")
	_, st := pop(t, s, pid, g, 1)
	require.Equal(t, queen.PopBusy, st)

	// An expired lease cannot be extended.
	_, err = s.pool.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second'`)
	require.NoError(t, err)
	_, err = s.ExtendLease(ctx, lease, 60)
	require.ErrorIs(t, err, queen.ErrLeaseInvalid)
	out := ack(t, s, ackTxn(pid, g, "m1", queen.AckCompleted, res.LeaseID))
	require.Equal(t, []queen.AckOutcome{queen.LeaseInvalid}, out)
}

func TestSeekDeleteGroupDeleteQueue(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "a", "b"))
	n, err := s.Seek(ctx, "q", "g1", queen.SeekRequest{ToEnd: true})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, st := pop(t, s, pid, "g1", 5)
	require.Equal(t, queen.PopEmpty, st)
	past := time.Now().Add(-time.Hour)
	_, err = s.Seek(ctx, "q", "g1", queen.SeekRequest{Timestamp: &past})
	require.NoError(t, err)
	res, _ := pop(t, s, pid, "g1", 5)
	require.Equal(t, []string{"a", "b"}, txns(res))

	removed, err := s.DeleteGroup(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, int64(1), removed)

	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Equal(t, []queen.QueueSummary{{Name: "q", CreatedAt: qs[0].CreatedAt, Partitions: 1, Messages: 2, Depth: 2, Options: queen.DefaultOptions()}}, qs)

	existed, parts, err := s.DeleteQueue(ctx, "q")
	require.NoError(t, err)
	require.True(t, existed)
	require.Equal(t, int64(1), parts)
	var left int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.segments) + (SELECT count(*) FROM queen.log_txn_hashes) + (SELECT count(*) FROM queen.partitions)`).Scan(&left))
	require.Zero(t, left)
	existed, _, err = s.DeleteQueue(ctx, "q")
	require.NoError(t, err)
	require.False(t, existed)
}

func TestDelayedProcessingAndWindowBuffer(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	for _, c := range []struct{ queue, opts string }{
		{"delayed", `{"delayedProcessing":1}`},
		{"buffered", `{"windowBuffer":1}`},
	} {
		configure(t, s, c.queue, c.opts)
		pid, err := s.EnsurePartition(ctx, c.queue, "p")
		require.NoError(t, err)
		commit(t, s, pid, items(c.queue, "p", "m1"))
		// Not visible at once: the first pop normally comes well within the
		// second and sees queen.PopNotYet. A busy machine may make it later; what
		// must hold on every pop is that a delivery comes only once the
		// message is a second old on PostgreSQL's clock.
		deadline := time.Now().Add(30 * time.Second)
		notYet := 0
		for {
			res, st := pop(t, s, pid, g, 1)
			if st == queen.PopDelivered {
				var now time.Time
				require.NoError(t, s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
				require.GreaterOrEqual(t, now.Sub(res.Messages[0].CreatedAt), time.Second, c.queue)
				if notYet == 0 {
					t.Logf("%s: the first pop came after the delay (a busy machine)", c.queue)
				}
				break
			}
			require.Equal(t, queen.PopNotYet, st)
			notYet++
			require.True(t, time.Now().Before(deadline), "%s never became visible", c.queue)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestAutoAckAndDLQStatus(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "a", "b", "c"))
	res, _, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: g, Batch: 1, AutoAck: true})
	require.NoError(t, err)
	require.Nil(t, res.LeaseID, "autoAck leases nothing")
	res, _ = pop(t, s, pid, g, 2)
	require.Equal(t, []string{"b", "c"}, txns(res), "autoAck committed the cursor")
	out := ack(t, s,
		ackTxn(pid, g, "c", queen.AckCompleted, res.LeaseID),
		ackTxn(pid, g, "b", queen.AckRetry, res.LeaseID))
	require.Equal(t, []queen.AckOutcome{queen.RetryScheduled, queen.RetryScheduled}, out, "retry at b stops the cursor below it: c is not applied")
	res, _ = pop(t, s, pid, g, 2)
	require.Equal(t, []string{"b", "c"}, txns(res))
	out = ack(t, s,
		ackTxn(pid, g, "b", queen.AckDLQ, res.LeaseID),
		ackTxn(pid, g, "c", queen.AckCompleted, res.LeaseID))
	require.Equal(t, []queen.AckOutcome{queen.DeadLettered, queen.Acked}, out, "a dead-lettered message is passed, so c above it commits")
	commit(t, s, pid, items("q", "p", "d"))
	res, st := pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"d"}, txns(res))
	require.Equal(t, 0, res.Messages[0].RetryCount)
	out = ack(t, s, ackTxn(pid, g, "d", queen.AckRetry, res.LeaseID))
	require.Equal(t, []queen.AckOutcome{queen.RetryScheduled}, out)
	res, _ = pop(t, s, pid, g, 2)
	require.Equal(t, []string{"d"}, txns(res))
	require.Equal(t, 0, res.Messages[0].RetryCount, "retry does not count")
}

// A batch nack (every message of a popped batch acked failed, as upstream
// SDKs do when a batch handler fails) counts a failure for each message, so
// each is delivered retryLimit + 1 times and then dead-lettered.
func TestBatchNackCountsEveryMessage(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "q", `{"retryLimit":1}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "a", "b", "c"))
	deliveries := map[string]int{}
	for round := 1; round <= 2; round++ {
		res, st := pop(t, s, pid, g, 3)
		require.Equal(t, queen.PopDelivered, st, "round %d", round)
		require.Equal(t, []string{"a", "b", "c"}, txns(res))
		var acks []queen.AckItem
		for _, m := range res.Messages {
			deliveries[m.TransactionID]++
			require.Equal(t, round-1, m.RetryCount, "%s in round %d", m.TransactionID, round)
			acks = append(acks, ackTxn(pid, g, m.TransactionID, queen.AckFailed, res.LeaseID))
		}
		want := queen.RetryScheduled
		if round == 2 {
			want = queen.DeadLettered
		}
		require.Equal(t, []queen.AckOutcome{want, want, want}, ack(t, s, acks...))
	}
	_, st := pop(t, s, pid, g, 3)
	require.Equal(t, queen.PopEmpty, st, "all three dead-lettered after 2 deliveries each")
	_, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, int64(3), total)
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, deliveries)
}

// A configure without namespace/task keeps the stored labels (the full
// replace is about options), and a label change is listed in changed.
func TestConfigureKeepsLabelsItDoesNotName(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	_, err := s.Configure(ctx, queen.ConfigureRequest{Queue: "lab", Namespace: "billing", NamespaceSet: true})
	require.NoError(t, err)
	res, err := s.Configure(ctx, queen.ConfigureRequest{Queue: "lab", Options: queen.OptionsPatch{LeaseTime: new(int64(8))}})
	require.NoError(t, err)
	require.Equal(t, "billing", res.Namespace)
	require.NotContains(t, res.Changed, "namespace")
	res, err = s.Configure(ctx, queen.ConfigureRequest{Queue: "lab", Namespace: "", NamespaceSet: true, Task: "t", TaskSet: true})
	require.NoError(t, err)
	require.Equal(t, queen.Change{From: "billing", To: ""}, res.Changed["namespace"])
	require.Equal(t, queen.Change{From: "", To: "t"}, res.Changed["task"])
}

// runOutLease makes the live lease of (pid, group) run out now, on PostgreSQL's
// clock, as if leaseTime had passed.
func runOutLease(t *testing.T, s *Store, pid uuid.UUID, group string) {
	t.Helper()
	tag, err := s.pool.Exec(context.Background(), `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second'
		WHERE partition_id = $1 AND consumer_group = $2 AND lease_id IS NOT NULL`, pid, group)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected(), "no lease to expire")
}

func TestExpiredLeaseCountsAFailedDelivery(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "q", `{"retryLimit":2}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "poison", "next"))
	// A consumer that crashes on "poison" every time: it never acks.
	for attempt := 1; attempt <= 3; attempt++ {
		res, st := pop(t, s, pid, g, 1)
		require.Equal(t, queen.PopCut, st, "attempt %d", attempt)
		require.Equal(t, []string{"poison"}, txns(res))
		require.Equal(t, attempt-1, res.Messages[0].RetryCount, "attempt %d", attempt)
		runOutLease(t, s, pid, g)
	}
	// The 4th pop counts the 3rd expiry: past retryLimit 2, dead-lettered.
	res, st := pop(t, s, pid, g, 5)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"next"}, txns(res), "the cursor moved past the poison message")
	require.Equal(t, 0, res.Messages[0].RetryCount)
	dl, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", ConsumerGroup: g, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, int64(1), total)
	require.Equal(t, "poison", dl[0].TransactionID)
	require.Equal(t, queen.LeaseExpiredError, dl[0].Error)
	require.Equal(t, 3, dl[0].Attempts)
	require.Equal(t, int64(0), dl[0].Offset)
}

// A consumer that acks part of its span and then crashes: the expired rest
// holds two unacked messages, so neither is charged (SPEC.md §4); the next
// deliveries are bisected (one message each) until the expired range is
// passed.
func TestExpiredSpanChargesNone(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m1", "m2", "m3", "m4"))
	res, _ := pop(t, s, pid, g, 3)
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "m1", queen.AckCompleted, res.LeaseID)))
	runOutLease(t, s, pid, g)
	res, st := pop(t, s, pid, g, 3)
	require.Equal(t, queen.PopCut, st)
	require.Equal(t, []string{"m2"}, txns(res), "half of the expired span m2,m3")
	require.Equal(t, 0, res.Messages[0].RetryCount, "a message of a multi-message expired span is not charged")
	require.Equal(t, queen.LeaseStats{Expiries: 1, Bisections: 1}, s.LeaseStats())

	// An extended lease is live: nothing settles, and its ack completes the span.
	long, err := s.ExtendLease(ctx, uuid.MustParse(*res.LeaseID), 600)
	require.NoError(t, err)
	require.True(t, long.After(*res.LeaseExpiresAt))
	_, st = pop(t, s, pid, g, 3)
	require.Equal(t, queen.PopBusy, st)
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "m2", queen.AckCompleted, res.LeaseID)))
	res, _ = pop(t, s, pid, g, 3)
	require.Equal(t, []string{"m3"}, txns(res), "still bisected: m3 was in the expired range")
	require.Equal(t, 0, res.Messages[0].RetryCount)
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, "m3", queen.AckCompleted, res.LeaseID)))
	res, _ = pop(t, s, pid, g, 3)
	require.Equal(t, []string{"m4"}, txns(res), "the expired range is passed: the batch again")
	ls := s.LeaseStats()
	require.Equal(t, int64(1), ls.Stalls, "the bisection ended")
	require.GreaterOrEqual(t, ls.StallSeconds, 0.0)
	_, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", ConsumerGroup: g, Limit: 10})
	require.NoError(t, err)
	require.Zero(t, total)
}

// TestBisectionDeadLettersOnlyThePoison: a batch of 100 with a poison
// message at position 37 and a consumer that handles the whole batch and
// acks it at the end, acking nothing when it crashes (its lease runs out):
// the deliveries are bisected, only the poison message is charged, by
// single-message expiries, and dead-lettered after retryLimit+1 of them;
// messages 1-36 and 38-100 are acked, each once.
func TestBisectionDeadLettersOnlyThePoison(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "q", `{"retryLimit":3}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	var ids []string
	for i := 1; i <= 100; i++ {
		ids = append(ids, fmt.Sprintf("m%03d", i))
	}
	commit(t, s, pid, items("q", "p", ids...))
	acked := map[string]int{}
	var sizes []int
	singles := 0
	for n := 0; ; n++ {
		require.Less(t, n, 200, "no progress: deliveries %v", sizes)
		res, st := pop(t, s, pid, g, 100)
		if st == queen.PopEmpty {
			break
		}
		require.Contains(t, []queen.PopState{queen.PopDelivered, queen.PopCut}, st)
		sizes = append(sizes, len(res.Messages))
		crash := false
		for _, m := range res.Messages {
			if m.TransactionID == "m037" {
				crash = true
				if len(res.Messages) == 1 {
					require.Equal(t, singles, m.RetryCount, "only single-message expiries are charged")
					singles++
				}
				continue
			}
			require.Zero(t, m.RetryCount, "%s was charged", m.TransactionID)
		}
		if crash {
			runOutLease(t, s, pid, g)
			continue
		}
		last := res.Messages[len(res.Messages)-1]
		require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(pid, g, last.TransactionID, queen.AckCompleted, res.LeaseID)))
		for _, m := range res.Messages {
			acked[m.TransactionID]++
		}
	}
	require.Equal(t, 4, singles, "retryLimit+1 single-message deliveries")
	require.Len(t, acked, 99)
	for id, n := range acked {
		require.Equal(t, 1, n, id)
		require.NotEqual(t, "m037", id)
	}
	require.Equal(t, []int{100, 50, 25, 25, 12, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 16, 32}, sizes)
	dl, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", ConsumerGroup: g, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, int64(1), total)
	require.Equal(t, "m037", dl[0].TransactionID)
	require.Equal(t, queen.LeaseExpiredError, dl[0].Error)
	require.Equal(t, 4, dl[0].Attempts)
	ls := s.LeaseStats()
	require.Equal(t, queen.LeaseStats{Expiries: 10, Bisections: 6, DeadLettered: 1, Stalls: 1, StallSeconds: ls.StallSeconds}, ls)
}

func TestExpiredLeaseCountsOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "q", `{"retryLimit":1}`)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "m1", "m2"))
	pop(t, s, pid, g, 2)
	runOutLease(t, s, pid, g)

	// Pops racing after the expiry, waiting for the row lock or skipping
	// it: one delivers and settles the expiry (a span of two: bisected,
	// nothing charged), the others find its lease.
	const racers = 8
	type out struct {
		res queen.PopResult
		st  queen.PopState
		err error
	}
	outs := make(chan out, racers)
	for i := range racers {
		go func() {
			res, st, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: g, Batch: 2, SkipLocked: i%2 == 1})
			outs <- out{res, st, err}
		}()
	}
	delivered := 0
	for range racers {
		o := <-outs
		require.NoError(t, o.err)
		if o.st == queen.PopCut {
			delivered++
			require.Equal(t, []string{"m1"}, txns(o.res), "half of the expired span")
			require.Equal(t, 0, o.res.Messages[0].RetryCount)
			continue
		}
		require.Equal(t, queen.PopBusy, o.st)
	}
	require.Equal(t, 1, delivered)
	require.Equal(t, queen.LeaseStats{Expiries: 1, Bisections: 1}, s.LeaseStats(), "the expiry is settled once")

	// m1 alone expires: charged once.
	runOutLease(t, s, pid, g)
	res, _ := pop(t, s, pid, g, 2)
	require.Equal(t, []string{"m1"}, txns(res))
	require.Equal(t, 1, res.Messages[0].RetryCount)
	// A late ack without a lease after the next expiry still settles it
	// once: m1 passes retryLimit 1 and is dead-lettered, so the ack is stale.
	runOutLease(t, s, pid, g)
	require.Equal(t, []queen.AckOutcome{queen.Stale}, ack(t, s, ackTxn(pid, g, "m1", queen.AckCompleted, nil)))
	res, st := pop(t, s, pid, g, 2)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m2"}, txns(res))
	require.Equal(t, 0, res.Messages[0].RetryCount)
	dl, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", ConsumerGroup: g, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, int64(1), total)
	require.Equal(t, "m1", dl[0].TransactionID)
	require.Equal(t, 2, dl[0].Attempts)
	require.Equal(t, queen.LeaseStats{Expiries: 3, Bisections: 1, DeadLettered: 1}, s.LeaseStats(), "m2 is still in the expired range")
}

// TestDeadLettersByteBudget: a page of the DLQ listing stops once its
// frames and error texts reach the filter's byte budget (the first dead
// letter always listed), so large dead letters never make an unbounded
// reply (issue 38: 40 dead letters with 15 MiB errors made a 1.26 GB one).
func TestDeadLettersByteBudget(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "a", "b", "c"))
	errText := strings.Repeat("e", 3000)
	for _, txn := range []string{"a", "b", "c"} {
		res, st := pop(t, s, pid, g, 1)
		require.Equal(t, map[bool]queen.PopState{true: queen.PopDelivered, false: queen.PopCut}[txn == "c"], st)
		it := ackTxn(pid, g, txn, queen.AckDLQ, res.LeaseID)
		it.Error = errText
		require.Equal(t, []queen.AckOutcome{queen.DeadLettered}, ack(t, s, it))
	}
	page := func(offset, budget int) []string {
		dl, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "q", Limit: 10, Offset: offset, MaxBytes: budget})
		require.NoError(t, err)
		require.Equal(t, int64(3), total, "the total counts the whole filter")
		var got []string
		for _, d := range dl {
			require.Equal(t, errText, d.Error)
			got = append(got, d.TransactionID)
		}
		return got
	}
	require.Equal(t, []string{"a", "b", "c"}, page(0, 0), "the default budget holds all three")
	require.Equal(t, []string{"a", "b"}, page(0, 5000), "the second starts below the budget, the third past it")
	require.Equal(t, []string{"a"}, page(0, 1), "the first is always listed")
	require.Equal(t, []string{"c"}, page(2, 1), "the budget counts from the page's offset")
	require.Empty(t, page(3, 0), "a page past the end is empty, and still carries the filter's total")
}
