package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// Store is what the suite drives: the calls the actors (push) and the
// consume coordinator (pop, ack) make of persistence.Store, plus what the
// cases need to set up and to make time pass (AgePartitions, ExpireLeases:
// test hooks, never called in production).
type Store interface {
	EnsurePartitions(ctx context.Context, keys []queen.PartitionKey) ([]uuid.UUID, error)
	CommitBundle(ctx context.Context, bs []*queen.PushBatch) ([]queen.PushOutcome, error)
	Configure(ctx context.Context, req queen.ConfigureRequest) (queen.ConfigureResult, error)
	PopPartitions(ctx context.Context, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, error)
	PartitionID(ctx context.Context, queue, partition string) (uuid.UUID, error)
	Candidates(ctx context.Context, queue, group string, limit int) ([]uuid.UUID, error)
	Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error)
	QueuesByLabel(ctx context.Context, namespace, task string) ([]string, error)
	Subscribe(ctx context.Context, queue, group string, from *time.Time, isNew bool) (bool, error)
	DeadLetters(ctx context.Context, f queen.DLQFilter) ([]queen.DeadLetter, int64, error)
	// AgePartitions moves the stored time of the partitions' messages back
	// by d (the window and the visibility rules see them d older).
	AgePartitions(ctx context.Context, pids []uuid.UUID, d time.Duration) error
	// ExpireLeases makes every lease held now expired, unsettled.
	ExpireLeases(ctx context.Context) error
}

// RunSuite runs the store cases against stores made by newStore, one fresh
// (empty) store per case, in parallel subtests. PostgreSQL
// (persistence.Store) and MemStore must both pass it: it is the contract
// (SPEC.md §3, §4) the in-memory store promises to the tests above
// persistence.
func RunSuite(t *testing.T, newStore func(t *testing.T) Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, &fixture{t: t, s: newStore(t), ctx: context.Background()})
		})
	}
}

// CaseNames lists the suite's cases (for counting and documentation).
func CaseNames() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

type suiteCase struct {
	name string
	run  func(t *testing.T, f *fixture)
}

// fixture is one case's store and helpers.
type fixture struct {
	t   *testing.T
	s   Store
	ctx context.Context
}

// pid returns (queue, partition)'s id, creating it.
func (f *fixture) pid(queue, partition string) uuid.UUID {
	ids, err := f.s.EnsurePartitions(f.ctx, []queen.PartitionKey{{Queue: queue, Partition: partition}})
	require.NoError(f.t, err)
	return ids[0]
}

// batch builds a push batch of txns for partition pid (payload {"n":i}).
func batch(pid uuid.UUID, queue, partition string, txns ...string) *queen.PushBatch {
	items := make([]*queen.Item, len(txns))
	for i, txn := range txns {
		items[i] = &queen.Item{Queue: queue, Partition: partition, TransactionID: txn,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Hash: queen.HashTxn(txn)}
	}
	return &queen.PushBatch{PartitionID: pid, Items: items, LeaderOf: rules.Leaders(items), Watermark: -1}
}

// push commits txns to (queue, partition) in one batch.
func (f *fixture) push(queue, partition string, txns ...string) queen.PushOutcome {
	f.t.Helper()
	outs, err := f.s.CommitBundle(f.ctx, []*queen.PushBatch{batch(f.pid(queue, partition), queue, partition, txns...)})
	require.NoError(f.t, err)
	require.Len(f.t, outs, 1)
	require.Len(f.t, outs[0].Results, len(txns))
	return outs[0]
}

// configure sets queue's options (a full replace).
func (f *fixture) configure(queue string, p queen.OptionsPatch) {
	f.t.Helper()
	_, err := f.s.Configure(f.ctx, queen.ConfigureRequest{Queue: queue, Options: p})
	require.NoError(f.t, err)
}

func i64(v int64) *int64 { return &v }

func str(v string) *string { return &v }

// pop pops pid for group, leased, up to batch messages.
// popOne pops spec.PartitionID alone: a pop of one partition is
// PopPartitions over that one, most 1.
func (f *fixture) popOne(spec queen.PopSpec) (queen.PopResult, queen.PopState, error) {
	res, states, err := f.s.PopPartitions(f.ctx, spec, []uuid.UUID{spec.PartitionID}, 1)
	return res, states[0], err
}

func (f *fixture) pop(pid uuid.UUID, group string, batch int) (queen.PopResult, queen.PopState) {
	f.t.Helper()
	res, st, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: group, Batch: batch})
	require.NoError(f.t, err)
	return res, st
}

// offsets lists the messages' offsets.
func offsets(ms []queen.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Offset
	}
	return out
}

// ackOne acks one message of pid by offset for group.
func (f *fixture) ackOne(pid uuid.UUID, group string, off int64, status queen.AckStatus, lease *uuid.UUID) queen.AckResult {
	f.t.Helper()
	res, err := f.s.Ack(f.ctx, []queen.AckItem{{PartitionID: pid, Offset: off, Status: status, ConsumerGroup: group, LeaseID: lease}})
	require.NoError(f.t, err)
	require.Len(f.t, res, 1)
	return res[0]
}

func leaseOf(t *testing.T, res queen.PopResult) *uuid.UUID {
	t.Helper()
	require.NotNil(t, res.LeaseID)
	id, err := uuid.Parse(*res.LeaseID)
	require.NoError(t, err)
	return &id
}

var cases = []suiteCase{
	{"push/offsets-follow-request-order", func(t *testing.T, f *fixture) {
		out := f.push("q", "p", "a", "b", "c")
		for i, r := range out.Results {
			require.Equal(t, queen.Queued, r.Verdict)
			require.Equal(t, int64(i), r.Offset)
			require.NotEqual(t, uuid.Nil, r.MessageID)
		}
		require.Equal(t, int64(0), out.FirstOffset)
		require.Equal(t, int64(2), out.LastOffset)
		require.Equal(t, int64(3600), out.Window, "a queue never configured has the default window")
		require.False(t, out.CreatedAt.IsZero())
		require.True(t, out.FullProbe)
		out = f.push("q", "p", "d")
		require.Equal(t, int64(3), out.Results[0].Offset)
	}},
	{"push/duplicate-inside-window-writes-nothing", func(t *testing.T, f *fixture) {
		first := f.push("q", "p", "a")
		out := f.push("q", "p", "a", "b")
		require.Equal(t, queen.Duplicate, out.Results[0].Verdict)
		require.Equal(t, first.Results[0].MessageID, out.Results[0].MessageID, "a duplicate echoes the original's id")
		require.Equal(t, int64(0), out.Results[0].Offset)
		require.Equal(t, queen.Queued, out.Results[1].Verdict)
		require.Equal(t, int64(1), out.Results[1].Offset, "the duplicate allocated no offset")
		require.Equal(t, int64(1), out.FirstOffset)
		require.Equal(t, int64(1), out.LastOffset)
		out = f.push("q", "p", "a", "b")
		require.Less(t, out.LastOffset, out.FirstOffset, "nothing written")
		require.True(t, out.CreatedAt.IsZero())
	}},
	{"push/repeat-inside-one-request-follows-its-leader", func(t *testing.T, f *fixture) {
		out := f.push("q", "p", "a", "a", "b")
		require.Equal(t, queen.Queued, out.Results[0].Verdict)
		require.Equal(t, queen.Duplicate, out.Results[1].Verdict)
		require.Equal(t, out.Results[0].MessageID, out.Results[1].MessageID)
		require.Equal(t, int64(0), out.Results[1].Offset)
		require.Equal(t, int64(1), out.Results[2].Offset)
		require.Equal(t, int64(1), out.LastOffset)
	}},
	{"push/scope-is-one-partition", func(t *testing.T, f *fixture) {
		for _, qp := range [][2]string{{"q", "p1"}, {"q", "p2"}, {"other", "p1"}} {
			out := f.push(qp[0], qp[1], "same")
			require.Equal(t, queen.Queued, out.Results[0].Verdict, qp)
			require.Equal(t, int64(0), out.Results[0].Offset, qp)
		}
	}},
	{"push/bundle-verdicts-are-independent", func(t *testing.T, f *fixture) {
		f.push("q", "p1", "a")
		p1, p2 := f.pid("q", "p1"), f.pid("q", "p2")
		outs, err := f.s.CommitBundle(f.ctx, []*queen.PushBatch{batch(p1, "q", "p1", "a", "b"), batch(p2, "q", "p2", "a", "b")})
		require.NoError(t, err)
		require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, []queen.Verdict{outs[0].Results[0].Verdict, outs[0].Results[1].Verdict})
		require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, []queen.Verdict{outs[1].Results[0].Verdict, outs[1].Results[1].Verdict})
		require.Equal(t, p2, outs[1].Results[0].PartitionID)
	}},
	{"push/window-zero-checks-nothing", func(t *testing.T, f *fixture) {
		f.configure("q", queen.OptionsPatch{DedupWindowSeconds: i64(0)})
		out := f.push("q", "p", "a", "a")
		require.Equal(t, int64(0), out.Window)
		require.Equal(t, queen.Queued, out.Results[1].Verdict, "no check, in-request repeats included")
		out = f.push("q", "p", "a")
		require.Equal(t, queen.Queued, out.Results[0].Verdict)
		require.Equal(t, int64(2), out.Results[0].Offset)
	}},
	{"push/after-the-window-a-repeat-is-new", func(t *testing.T, f *fixture) {
		f.configure("q", queen.OptionsPatch{DedupWindowSeconds: i64(60)})
		first := f.push("q", "p", "a")
		require.NoError(t, f.s.AgePartitions(f.ctx, []uuid.UUID{f.pid("q", "p")}, 61*time.Second))
		out := f.push("q", "p", "a")
		require.Equal(t, queen.Queued, out.Results[0].Verdict)
		require.Equal(t, int64(1), out.Results[0].Offset)
		require.NotEqual(t, first.Results[0].MessageID, out.Results[0].MessageID)
		again := f.push("q", "p", "a")
		require.Equal(t, queen.Duplicate, again.Results[0].Verdict, "the new message opens its own window")
		require.Equal(t, out.Results[0].MessageID, again.Results[0].MessageID)
		require.Equal(t, int64(1), again.Results[0].Offset)
	}},
	{"push/configure-takes-effect-at-the-next-push", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a")
		f.configure("q", queen.OptionsPatch{DedupWindowSeconds: i64(0)})
		out := f.push("q", "p", "a")
		require.Equal(t, queen.Queued, out.Results[0].Verdict)
		f.configure("q", queen.OptionsPatch{})
		out = f.push("q", "p", "a")
		require.Equal(t, queen.Duplicate, out.Results[0].Verdict, "the full replace restores the 3600 s window")
		require.Equal(t, int64(0), out.Results[0].Offset, "the oldest original inside the window")
	}},
	{"ensure/ids-are-stable", func(t *testing.T, f *fixture) {
		ids, err := f.s.EnsurePartitions(f.ctx, []queen.PartitionKey{{Queue: "q", Partition: "a"}, {Queue: "q", Partition: "b"}, {Queue: "q", Partition: "a"}})
		require.NoError(t, err)
		require.Equal(t, ids[0], ids[2])
		require.NotEqual(t, ids[0], ids[1])
		got, err := f.s.PartitionID(f.ctx, "q", "b")
		require.NoError(t, err)
		require.Equal(t, ids[1], got)
		got, err = f.s.PartitionID(f.ctx, "q", "never")
		require.NoError(t, err)
		require.Equal(t, uuid.Nil, got, "a pop never creates a partition")
	}},
	{"pop/leases-a-span-in-offset-order", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b", "c", "d", "e")
		pid := f.pid("q", "p")
		res, st := f.pop(pid, "g", 3)
		require.Equal(t, queen.PopCut, st)
		require.Equal(t, []int64{0, 1, 2}, offsets(res.Messages))
		require.Equal(t, "a", res.Messages[0].TransactionID)
		require.JSONEq(t, `{"n":0}`, string(res.Messages[0].Data))
		require.Equal(t, "q", res.Queue)
		require.Equal(t, "p", res.Partition)
		require.Equal(t, pid.String(), res.PartitionID)
		require.Equal(t, "g", res.ConsumerGroup)
		lease := leaseOf(t, res)
		require.NotNil(t, res.LeaseExpiresAt)
		require.True(t, res.LeaseExpiresAt.After(time.Now().Add(250*time.Second)), "leaseTime 300 s")
		for _, m := range res.Messages {
			require.Equal(t, lease.String(), *m.LeaseID)
			require.Equal(t, "q", m.Queue)
			require.Equal(t, "p", m.Partition)
			require.Equal(t, 0, m.RetryCount)
		}
		_, st = f.pop(pid, "g", 3)
		require.Equal(t, queen.PopBusy, st, "one consumer per (partition, group)")
		res, st = f.pop(pid, "other", 10)
		require.Equal(t, queen.PopDelivered, st, "groups are independent")
		require.Equal(t, []int64{0, 1, 2, 3, 4}, offsets(res.Messages))
	}},
	{"pop/auto-ack-moves-the-cursor", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b", "c")
		pid := f.pid("q", "p")
		spec := queen.PopSpec{PartitionID: pid, Group: "g", Batch: 2, AutoAck: true}
		res, st, err := f.popOne(spec)
		require.NoError(t, err)
		require.Equal(t, queen.PopCut, st)
		require.Nil(t, res.LeaseID)
		require.Equal(t, []int64{0, 1}, offsets(res.Messages))
		res, _, err = f.popOne(spec)
		require.NoError(t, err)
		require.Equal(t, []int64{2}, offsets(res.Messages))
		_, st, err = f.popOne(spec)
		require.NoError(t, err)
		require.Equal(t, queen.PopEmpty, st)
	}},
	{"pop/unknown-partition-is-busy", func(t *testing.T, f *fixture) {
		_, st, err := f.popOne(queen.PopSpec{PartitionID: uuid.New(), Group: "g", Batch: 1})
		require.NoError(t, err)
		require.Equal(t, queen.PopBusy, st)
	}},
	{"pop/max-bytes-keeps-the-first-message", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b", "c")
		pid := f.pid("q", "p")
		res, _, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: "g", Batch: 3, MaxBytes: 1})
		require.NoError(t, err)
		require.Equal(t, []int64{0}, offsets(res.Messages), "the first message always fits")
		res, st, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: "h", Batch: 3, MaxBytes: 1, BytesStrict: true})
		require.NoError(t, err)
		require.Equal(t, queen.PopNotYet, st)
		require.Empty(t, res.Messages)
	}},
	{"pop/delayed-processing", func(t *testing.T, f *fixture) {
		f.configure("q", queen.OptionsPatch{DelayedProcessing: i64(3600)})
		f.push("q", "p", "a")
		pid := f.pid("q", "p")
		_, st := f.pop(pid, "g", 1)
		require.Equal(t, queen.PopNotYet, st)
		require.NoError(t, f.s.AgePartitions(f.ctx, []uuid.UUID{pid}, 3601*time.Second))
		res, st := f.pop(pid, "g", 1)
		require.Equal(t, queen.PopDelivered, st)
		require.Equal(t, []int64{0}, offsets(res.Messages))
	}},
	{"pop/window-buffer", func(t *testing.T, f *fixture) {
		f.configure("q", queen.OptionsPatch{WindowBuffer: i64(3600)})
		f.push("q", "p", "a")
		pid := f.pid("q", "p")
		_, st := f.pop(pid, "g", 1)
		require.Equal(t, queen.PopNotYet, st)
		require.NoError(t, f.s.AgePartitions(f.ctx, []uuid.UUID{pid}, 3601*time.Second))
		_, st = f.pop(pid, "g", 1)
		require.Equal(t, queen.PopDelivered, st)
	}},
	{"ack/offset-commit", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b", "c", "d", "e")
		pid := f.pid("q", "p")
		res, _ := f.pop(pid, "g", 3)
		lease := leaseOf(t, res)
		r := f.ackOne(pid, "g", 1, queen.AckCompleted, lease)
		require.Equal(t, queen.Acked, r.Result)
		require.True(t, r.Success)
		require.Equal(t, int64(1), *r.Offset)
		require.Equal(t, int64(1), *r.Cursor, "acking 1 completes 0 too")
		r = f.ackOne(pid, "g", 0, queen.AckCompleted, nil)
		require.Equal(t, queen.Stale, r.Result)
		require.True(t, r.Success)
		r = f.ackOne(pid, "g", 99, queen.AckCompleted, nil)
		require.Equal(t, queen.Unresolvable, r.Result)
		require.False(t, r.Success)
		_, st := f.pop(pid, "g", 3)
		require.Equal(t, queen.PopBusy, st, "the lease still holds offset 2")
		r = f.ackOne(pid, "g", 2, queen.AckCompleted, lease)
		require.Equal(t, queen.Acked, r.Result)
		res, st = f.pop(pid, "g", 3)
		require.Equal(t, queen.PopDelivered, st, "a cursor at the span's end releases the lease")
		require.Equal(t, []int64{3, 4}, offsets(res.Messages))
	}},
	{"ack/by-transaction-id", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		f.pop(pid, "g", 2)
		res, err := f.s.Ack(f.ctx, []queen.AckItem{
			{PartitionID: pid, TransactionID: "b", Hash: queen.HashTxn("b"), Offset: -1, Status: queen.AckCompleted, ConsumerGroup: "g"},
			{PartitionID: pid, TransactionID: "zz", Hash: queen.HashTxn("zz"), Offset: -1, Status: queen.AckCompleted, ConsumerGroup: "g"},
		})
		require.NoError(t, err)
		require.Equal(t, queen.Acked, res[0].Result)
		require.Equal(t, int64(1), *res[0].Offset)
		require.Equal(t, "b", res[0].TransactionID)
		require.Equal(t, queen.Unresolvable, res[1].Result, "never pushed there")
		require.Equal(t, 1, res[1].Index)
		res, err = f.s.Ack(f.ctx, []queen.AckItem{{PartitionID: pid, TransactionID: "a", Hash: queen.HashTxn("a"), Offset: -1, Status: queen.AckCompleted, ConsumerGroup: "g"}})
		require.NoError(t, err)
		require.Equal(t, queen.Stale, res[0].Result, "no offset above the cursor holds it")
	}},
	{"ack/offset-and-transaction-id-of-different-messages", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		f.pop(pid, "g", 2)
		_, err := f.s.Ack(f.ctx, []queen.AckItem{{PartitionID: pid, TransactionID: "a", Hash: queen.HashTxn("a"), Offset: 1, Status: queen.AckCompleted, ConsumerGroup: "g"}})
		require.ErrorIs(t, err, queen.ErrInvalidField)
		r := f.ackOne(pid, "g", 0, queen.AckCompleted, nil)
		require.Equal(t, queen.Acked, r.Result, "the refused call applied nothing")
	}},
	{"ack/lease-invalid", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a")
		pid := f.pid("q", "p")
		f.pop(pid, "g", 1)
		other := uuid.New()
		r := f.ackOne(pid, "g", 0, queen.AckCompleted, &other)
		require.Equal(t, queen.LeaseInvalid, r.Result)
		require.False(t, r.Success)
	}},
	{"ack/unknown-partition", func(t *testing.T, f *fixture) {
		r := f.ackOne(uuid.New(), "g", 0, queen.AckCompleted, nil)
		require.Equal(t, queen.Unresolvable, r.Result)
	}},
	{"ack/failed-redelivers-then-dead-letters", func(t *testing.T, f *fixture) {
		f.configure("q", queen.OptionsPatch{RetryLimit: i64(1)})
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		res, _ := f.pop(pid, "g", 2)
		r := f.ackOne(pid, "g", 0, queen.AckFailed, leaseOf(t, res))
		require.Equal(t, queen.RetryScheduled, r.Result)
		require.Equal(t, int64(-1), *r.Cursor)
		res, st := f.pop(pid, "g", 1)
		require.Equal(t, queen.PopCut, st, "a failure ends the lease")
		require.Equal(t, []int64{0}, offsets(res.Messages))
		require.Equal(t, 1, res.Messages[0].RetryCount)
		res2, err := f.s.Ack(f.ctx, []queen.AckItem{{PartitionID: pid, Offset: 0, Status: queen.AckFailed, Error: "boom", ConsumerGroup: "g", LeaseID: leaseOf(t, res)}})
		require.NoError(t, err)
		require.Equal(t, queen.DeadLettered, res2[0].Result)
		require.Equal(t, int64(0), *res2[0].Cursor, "the cursor passes a dead letter")
		dl, n, err := f.s.DeadLetters(f.ctx, queen.DLQFilter{Queue: "q", ConsumerGroup: "g", Limit: 100})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, int64(0), dl[0].Offset)
		require.Equal(t, "boom", dl[0].Error)
		require.Equal(t, 2, dl[0].Attempts)
		require.Equal(t, "a", dl[0].TransactionID)
		require.Equal(t, "p", dl[0].Partition)
		res, _ = f.pop(pid, "g", 5)
		require.Equal(t, []int64{1}, offsets(res.Messages))
	}},
	{"producer/kept-per-message-through-pop-and-dlq", func(t *testing.T, f *fixture) {
		// One commit fusing items of several producers (the actor fuses
		// requests): each message keeps its own, "" is none.
		pid := f.pid("q", "p")
		b := batch(pid, "q", "p", "a", "b", "a", "c", "d", "e")
		for i, sub := range []string{"alice", "alice", "bob", "bob", "", "alice"} {
			b.Items[i].ProducerSub = sub
		}
		outs, err := f.s.CommitBundle(f.ctx, []*queen.PushBatch{b})
		require.NoError(t, err)
		require.Equal(t, queen.Duplicate, outs[0].Results[2].Verdict, "a repeat of a by bob")
		require.Equal(t, int64(0), outs[0].FirstOffset)
		require.Equal(t, int64(4), outs[0].LastOffset)
		want := []*string{str("alice"), str("alice"), str("bob"), nil, str("alice")}
		producers := func(ms []queen.Message) []*string {
			out := make([]*string, len(ms))
			for i, m := range ms {
				out[i] = m.ProducerSub
			}
			return out
		}
		res, _ := f.pop(pid, "g", 10)
		require.Equal(t, []int64{0, 1, 2, 3, 4}, offsets(res.Messages))
		require.Equal(t, want, producers(res.Messages))
		res, states, err := f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "m", Batch: 10}, []uuid.UUID{pid}, 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopDelivered}, states)
		require.Equal(t, want, producers(res.Messages), "a multi-partition pop")

		// A dead letter keeps its message's producer: by an ack (alice at
		// offset 0, none at offset 3) and by expired leases (bob at 2).
		r := f.ackOne(pid, "g", 0, queen.AckDLQ, nil)
		require.Equal(t, queen.DeadLettered, r.Result)
		f.pop(pid, "d", 10)
		for _, off := range []int64{0, 1, 2} {
			require.Equal(t, queen.Acked, f.ackOne(pid, "d", off, queen.AckCompleted, nil).Result)
		}
		require.Equal(t, queen.DeadLettered, f.ackOne(pid, "d", 3, queen.AckDLQ, nil).Result)
		f.configure("q", queen.OptionsPatch{RetryLimit: i64(1)})
		xb := batch(f.pid("q", "x2"), "q", "x2", "y0")
		xb.Items[0].ProducerSub = "bob"
		_, err = f.s.CommitBundle(f.ctx, []*queen.PushBatch{xb})
		require.NoError(t, err)
		xpid := f.pid("q", "x2")
		f.pop(xpid, "e", 1)
		require.NoError(t, f.s.ExpireLeases(f.ctx))
		f.pop(xpid, "e", 1)
		require.NoError(t, f.s.ExpireLeases(f.ctx))
		f.pop(xpid, "e", 1) // past retryLimit: dead-lettered
		dl, _, err := f.s.DeadLetters(f.ctx, queen.DLQFilter{Queue: "q", Limit: 100})
		require.NoError(t, err)
		require.Len(t, dl, 3)
		byGroup := map[string]*string{}
		for _, d := range dl {
			byGroup[d.ConsumerGroup] = d.ProducerSub
		}
		require.Equal(t, map[string]*string{"g": str("alice"), "d": nil, "e": str("bob")}, byGroup)
	}},
	{"ack/dlq-at-once-and-retry-without-count", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		f.pop(pid, "g", 2)
		r := f.ackOne(pid, "g", 0, queen.AckRetry, nil)
		require.Equal(t, queen.RetryScheduled, r.Result)
		res, _ := f.pop(pid, "g", 2)
		require.Equal(t, 0, res.Messages[0].RetryCount, "retry counts nothing")
		r = f.ackOne(pid, "g", 0, queen.AckDLQ, nil)
		require.Equal(t, queen.DeadLettered, r.Result)
		require.Equal(t, int64(0), *r.Cursor)
	}},
	{"lease/single-message-expiry-is-charged", func(t *testing.T, f *fixture) {
		f.configure("q", queen.OptionsPatch{RetryLimit: i64(1)})
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		res, _ := f.pop(pid, "g", 1)
		require.Equal(t, []int64{0}, offsets(res.Messages))
		require.NoError(t, f.s.ExpireLeases(f.ctx))
		res, st := f.pop(pid, "g", 1)
		require.Equal(t, queen.PopCut, st)
		require.Equal(t, []int64{0}, offsets(res.Messages))
		require.Equal(t, 1, res.Messages[0].RetryCount, "one failed delivery counted")
		require.NoError(t, f.s.ExpireLeases(f.ctx))
		res, _ = f.pop(pid, "g", 1)
		require.Equal(t, []int64{1}, offsets(res.Messages), "past retryLimit the message is dead-lettered")
		dl, _, err := f.s.DeadLetters(f.ctx, queen.DLQFilter{Queue: "q", Limit: 100})
		require.NoError(t, err)
		require.Len(t, dl, 1)
		require.Equal(t, queen.LeaseExpiredError, dl[0].Error)
	}},
	{"lease/expired-span-is-bisected", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b", "c", "d", "e", "f", "g", "h")
		pid := f.pid("q", "p")
		res, _ := f.pop(pid, "g", 8)
		require.Len(t, res.Messages, 8)
		require.NoError(t, f.s.ExpireLeases(f.ctx))
		res, _ = f.pop(pid, "g", 8)
		require.Equal(t, []int64{0, 1, 2, 3}, offsets(res.Messages), "half the expired span")
		for _, m := range res.Messages {
			require.Equal(t, 0, m.RetryCount, "nothing charged")
		}
		require.NoError(t, f.s.ExpireLeases(f.ctx))
		res, _ = f.pop(pid, "g", 8)
		require.Equal(t, []int64{0, 1}, offsets(res.Messages))
		r := f.ackOne(pid, "g", 1, queen.AckCompleted, leaseOf(t, res))
		require.Equal(t, queen.Acked, r.Result)
		res, _ = f.pop(pid, "g", 8)
		require.Equal(t, []int64{2, 3}, offsets(res.Messages), "at most the hot span's end")
	}},
	{"pop-many/cut-only-when-messages-stay", func(t *testing.T, f *fixture) {
		pids := []uuid.UUID{f.pid("q", "p1"), f.pid("q", "p2"), f.pid("q", "p3")}
		f.push("q", "p1", "a", "b")
		f.push("q", "p2", "a")
		f.push("q", "p2", "b", "c")
		f.push("q", "p3", "a", "b")
		res, states, err := f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "g", Batch: 4}, pids, 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopDelivered, queen.PopCut, queen.PopUnreached}, states, "the batch ends inside p2")
		require.Len(t, res.Messages, 4)
		res, states, err = f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "h", Batch: 5, AutoAck: true}, pids, 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopDelivered, queen.PopDelivered, queen.PopUnreached}, states, "the batch ends at p2's end")
		require.Len(t, res.Messages, 5)
		res, states, err = f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "h", Batch: 1, AutoAck: true}, pids[2:], 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopCut}, states)
		res, states, err = f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "h", Batch: 1, AutoAck: true}, pids[2:], 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopDelivered}, states, "the last message")
		require.Equal(t, int64(1), res.Messages[0].Offset)
	}},
	{"pop-many/claims-partitions-under-one-lease", func(t *testing.T, f *fixture) {
		pids := []uuid.UUID{f.pid("q", "p1"), f.pid("q", "p2"), f.pid("q", "p3")}
		for _, p := range []string{"p1", "p2", "p3"} {
			f.push("q", p, p+"a", p+"b")
		}
		spec := queen.PopSpec{Group: "g", Batch: 10}
		res, states, err := f.s.PopPartitions(f.ctx, spec, pids, 2)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopDelivered, queen.PopDelivered, queen.PopUnreached}, states)
		require.Len(t, res.Messages, 4)
		require.Equal(t, "p1", res.Partition, "the reply names the first claimed partition")
		lease := leaseOf(t, res)
		for i, m := range res.Messages {
			require.Equal(t, lease.String(), *m.LeaseID)
			require.Equal(t, []string{"p1", "p1", "p2", "p2"}[i], m.Partition)
		}
		res, states, err = f.s.PopPartitions(f.ctx, spec, pids, 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopBusy, queen.PopBusy, queen.PopDelivered}, states)
		require.Equal(t, "p3", res.Partition)
		r := f.ackOne(pids[1], "g", 1, queen.AckCompleted, lease)
		require.Equal(t, queen.Acked, r.Result, "one lease id serves every claimed partition")
	}},
	{"pop-many/batch-bounds-all-partitions", func(t *testing.T, f *fixture) {
		pids := []uuid.UUID{f.pid("q", "p1"), f.pid("q", "p2"), f.pid("q", "p3")}
		f.push("q", "p1", "a", "b")
		f.push("q", "p3", "a", "b")
		res, states, err := f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "g", Batch: 3, AutoAck: true}, pids, 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopDelivered, queen.PopEmpty, queen.PopCut}, states)
		require.Len(t, res.Messages, 3)
		require.Nil(t, res.LeaseID)
		require.Equal(t, []int64{0, 1, 0}, offsets(res.Messages))
		_, states, err = f.s.PopPartitions(f.ctx, queen.PopSpec{Group: "g", Batch: 3, AutoAck: true}, pids, 0)
		require.NoError(t, err)
		require.Equal(t, []queen.PopState{queen.PopEmpty, queen.PopEmpty, queen.PopDelivered}, states)
	}},
	{"candidates/partitions-with-work-and-no-live-lease", func(t *testing.T, f *fixture) {
		for _, p := range []string{"p1", "p2", "p3"} {
			f.push("q", p, "a")
		}
		f.push("other", "p1", "a")
		f.pid("q", "empty")
		p1, p2, p3 := f.pid("q", "p1"), f.pid("q", "p2"), f.pid("q", "p3")
		got, err := f.s.Candidates(f.ctx, "q", "g", 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []uuid.UUID{p1, p2, p3}, got)
		f.pop(p1, "g", 1)
		_, _, err = f.popOne(queen.PopSpec{PartitionID: p2, Group: "g", Batch: 1, AutoAck: true})
		require.NoError(t, err)
		got, err = f.s.Candidates(f.ctx, "q", "g", 10)
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{p3}, got, "p1 is leased, p2 drained")
		got, err = f.s.Candidates(f.ctx, "q", "g", 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
	}},
	{"subscription/new-starts-at-the-first-pop", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		exists, err := f.s.Subscribe(f.ctx, "q", "g", nil, true)
		require.NoError(t, err)
		require.True(t, exists)
		pid := f.pid("q", "p")
		_, st, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: "g", Batch: 5, SubscriptionNew: true})
		require.NoError(t, err)
		require.Equal(t, queen.PopEmpty, st)
		f.push("q", "p", "c")
		res, _ := f.pop(pid, "g", 5)
		require.Equal(t, []int64{2}, offsets(res.Messages))
		// A partition the group meets later starts at the subscription too.
		f.push("q", "late", "x")
		res, _ = f.pop(f.pid("q", "late"), "g", 5)
		require.Equal(t, []int64{0}, offsets(res.Messages), "pushed after the subscription")
	}},
	{"subscription/all-and-first-pop-fixes-it", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		exists, err := f.s.Subscribe(f.ctx, "q", "g", nil, false)
		require.NoError(t, err)
		require.True(t, exists)
		exists, err = f.s.Subscribe(f.ctx, "q", "g", nil, true)
		require.NoError(t, err)
		require.True(t, exists, "subscribed already: a no-op")
		res, _, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: "g", Batch: 5, SubscriptionNew: true})
		require.NoError(t, err)
		require.Equal(t, []int64{0, 1}, offsets(res.Messages), "the first subscription (all) holds")
		exists, err = f.s.Subscribe(f.ctx, "nope", "g", nil, true)
		require.NoError(t, err)
		require.False(t, exists)
	}},
	{"subscription/from-a-time", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a")
		pid := f.pid("q", "p")
		require.NoError(t, f.s.AgePartitions(f.ctx, []uuid.UUID{pid}, time.Hour))
		f.push("q", "p", "b")
		from := time.Now().Add(-time.Minute)
		res, _, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: "g", Batch: 5, SubscriptionFrom: &from})
		require.NoError(t, err)
		require.Equal(t, []int64{1}, offsets(res.Messages))
	}},
	{"subscription/new-recorded-by-the-first-pop", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		_, st, err := f.popOne(queen.PopSpec{PartitionID: pid, Group: "g", Batch: 5, SubscriptionNew: true})
		require.NoError(t, err)
		require.Equal(t, queen.PopEmpty, st, "the pop subscribes the group at its own moment")
		f.push("q", "p", "c")
		res, _ := f.pop(pid, "g", 5)
		require.Equal(t, []int64{2}, offsets(res.Messages))
	}},
	{"ack/a-group-that-never-popped", func(t *testing.T, f *fixture) {
		f.push("q", "p", "a", "b")
		pid := f.pid("q", "p")
		r := f.ackOne(pid, "g", 0, queen.AckCompleted, nil)
		require.Equal(t, queen.Acked, r.Result)
		require.Equal(t, int64(0), *r.Cursor)
		res, _ := f.pop(pid, "g", 5)
		require.Equal(t, []int64{1}, offsets(res.Messages))
		r = f.ackOne(pid, "h", 9, queen.AckCompleted, nil)
		require.Equal(t, queen.Unresolvable, r.Result)
		require.Equal(t, int64(-1), *r.Cursor)
		res, _ = f.pop(pid, "h", 5)
		require.Equal(t, []int64{0, 1}, offsets(res.Messages), "an ack that applied nothing leaves no cursor behind")
	}},
	{"queues-by-label", func(t *testing.T, f *fixture) {
		for _, q := range []struct{ name, ns, task string }{{"b", "n", "t1"}, {"a", "n", "t2"}, {"c", "m", "t1"}} {
			_, err := f.s.Configure(f.ctx, queen.ConfigureRequest{Queue: q.name, Namespace: q.ns, Task: q.task, NamespaceSet: true, TaskSet: true})
			require.NoError(t, err)
		}
		got, err := f.s.QueuesByLabel(f.ctx, "n", "")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, got)
		got, err = f.s.QueuesByLabel(f.ctx, "", "t1")
		require.NoError(t, err)
		require.Equal(t, []string{"b", "c"}, got)
	}},
}
