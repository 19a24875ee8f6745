package audit

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// auditEnv is a migrated database, a Store writing to it through the real
// push transaction, and producer 0's ledger recording the answers, as a
// producer would.
type auditEnv struct {
	url   string
	s     *persistence.Store
	a     *persistence.Audit
	queue string
	parts []string
	led   *Ledger
	// ids are the message ids the queued answers gave.
	ids map[uint64]uuid.UUID
}

func newAuditEnv(t *testing.T) *auditEnv {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	s, err := persistence.Open(ctx, persistence.Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	a, err := persistence.OpenAudit(ctx, url)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	parts := txnid.PartitionNames(2)
	return &auditEnv{url: url, s: s, a: a, queue: "lt", parts: parts, led: NewLedger(0, "lt", parts, false), ids: map[uint64]uuid.UUID{}}
}

// part is the partition index of producer 0's id seq.
func (e *auditEnv) part(seq uint64) int { return txnid.PartOf(0, seq, len(e.parts)) }

// item is producer 0's id seq, for its partition.
func (e *auditEnv) item(seq uint64) *queen.Item {
	txn := string(txnid.AppendTxn(nil, 0, seq))
	return &queen.Item{Queue: e.queue, Partition: e.parts[e.part(seq)], TransactionID: txn,
		Payload: json.RawMessage(txnid.AppendPayload(nil, 0, seq, 60)), Hash: queen.HashTxn(txn)}
}

// commit runs one push transaction of items to partition part without
// recording anything.
func (e *auditEnv) commit(t *testing.T, part int, its ...*queen.Item) queen.PushOutcome {
	t.Helper()
	ctx := context.Background()
	pid, err := e.s.EnsurePartition(ctx, e.queue, e.parts[part])
	require.NoError(t, err)
	for _, it := range its {
		it.Partition = e.parts[part]
	}
	out, err := e.s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, Watermark: -1})
	require.NoError(t, err)
	return out
}

// push commits the transaction ids seqs (one request per partition) and
// records the sends and their answers in the ledger, a repeat's with the
// original's id as the producer knows it.
func (e *auditEnv) push(t *testing.T, seqs ...uint64) {
	t.Helper()
	byPart := map[int][]uint64{}
	for _, s := range seqs {
		byPart[e.part(s)] = append(byPart[e.part(s)], s)
	}
	for part, ss := range byPart {
		its := make([]*queen.Item, len(ss))
		for i, s := range ss {
			its[i] = e.item(s)
			e.led.Sent(s)
		}
		out := e.commit(t, part, its...)
		for i, r := range out.Results {
			switch r.Verdict {
			case queen.Queued:
				e.led.Queued(ss[i], r.MessageID)
				e.ids[ss[i]] = r.MessageID
			case queen.Duplicate:
				want := [16]byte(e.ids[ss[i]])
				e.led.Duplicate(ss[i], r.MessageID, &want)
			default:
				e.led.Failed(ss[i])
			}
		}
	}
}

func (e *auditEnv) audit(t *testing.T) *report.AuditReport {
	t.Helper()
	ar, err := auditQueue(context.Background(), e.a, e.queue, e.parts, []*Ledger{e.led}, nil)
	require.NoError(t, err)
	return ar
}

// clean sends new ids and repeats (in later requests).
func (e *auditEnv) clean(t *testing.T) {
	e.push(t, 1, 2, 3)
	e.push(t, 4, 5)
	e.push(t, 2, 6)    // a repeat and a new id
	e.push(t, 4, 5, 7) // two repeats and a new id
}

func requireIssue(t *testing.T, ar *report.AuditReport, kind string, n int64) {
	t.Helper()
	require.False(t, ar.Passed, "the audit must fail")
	require.Equal(t, n, ar.Issues[kind], "issues %v, examples %v", ar.Issues, ar.Examples)
	require.NotEmpty(t, ar.Examples)
}

func TestAuditPassesOnCleanRun(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// An id answered failed only (its request was lost) but stored once: allowed.
	e.led.Sent(8)
	e.led.Failed(8)
	e.commit(t, e.part(8), e.item(8))
	// An id never answered and not stored: allowed.
	e.led.Sent(9)

	ar := e.audit(t)
	require.True(t, ar.Passed, "issues %v, examples %v", ar.Issues, ar.Examples)
	require.Equal(t, int64(10), ar.TransactionIDs, "ids 0 to 9 (0 was never sent: it counts as failed-only, not stored)")
	require.Equal(t, int64(7), ar.Answered)
	require.Equal(t, int64(3), ar.FailedOnly)
	require.Equal(t, int64(1), ar.FailedOnlyStored)
	require.Equal(t, int64(8), ar.StoredMessages)
	require.True(t, ar.Recounted)

	// Auditing again gives the same answer (stored counts are reset).
	again := e.audit(t)
	require.True(t, again.Passed, "issues %v", again.Issues)
}

// TestAuditIncremental: passes during the run read each segment once; a
// tampering after a pass read its partition is still found by the final
// recount, and a message deleted before any pass read it (retention) is an
// unaudited gap.
func TestAuditIncremental(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newAuditEnv(t)
	au := NewAuditor(e.a, e.queue, e.parts, []*Ledger{e.led}, nil, false)
	e.push(t, 1, 2, 3)
	n, err := au.pass(ctx, false)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.Zero(t, e.led.pending(), "each answered id met its frame")
	e.push(t, 2, 4, 5)
	n, err = au.pass(ctx, false)
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "only the new frames")
	n, err = au.pass(ctx, false)
	require.NoError(t, err)
	require.Zero(t, n)

	t.Run("only the partitions marked, a sweep slice, then every partition", func(t *testing.T) {
		e := newAuditEnv(t)
		dirty := NewDirtySet(len(e.parts))
		au := NewAuditor(e.a, e.queue, e.parts, []*Ledger{e.led}, dirty, false)
		au.sweepN = 0
		var other uint64 = 2
		for e.part(other) == e.part(1) {
			other++
		}
		e.push(t, 1)
		e.push(t, other)
		n, err := au.pass(ctx, false)
		require.NoError(t, err)
		require.Zero(t, n, "nothing marked")
		dirty.Mark(e.part(1))
		n, err = au.pass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the marked partition only")
		au.sweepN = 1
		n, err = au.pass(ctx, false)
		require.NoError(t, err)
		n2, err := au.pass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, int64(1), n+n2, "the sweep reads the other partition within two passes")
		e.push(t, other+1000)
		e.push(t, 3)
		au.sweepN = 0
		ar, err := au.Finish(ctx, false, nil)
		require.NoError(t, err)
		require.True(t, ar.Passed, "issues %v", ar.Issues)
		require.Equal(t, int64(4), ar.StoredMessages, "the last pass reads every partition")
	})
	t.Run("deleted after a pass, found by the recount", func(t *testing.T) {
		e := newAuditEnv(t)
		au := NewAuditor(e.a, e.queue, e.parts, []*Ledger{e.led}, nil, false)
		e.push(t, 1, 2, 3, 4, 5, 6)
		_, err := au.pass(ctx, false)
		require.NoError(t, err)
		n := deleteFrameOf(t, e, 3)
		ar, err := au.Finish(ctx, true, nil)
		require.NoError(t, err)
		requireIssue(t, ar, report.IssueMissing, n)
	})
	t.Run("deleted before a pass read it", func(t *testing.T) {
		e := newAuditEnv(t)
		au := NewAuditor(e.a, e.queue, e.parts, []*Ledger{e.led}, nil, false)
		// Two segments in the partition of id 1; the first one goes.
		var other uint64 = 2
		for e.part(other) != e.part(1) {
			other++
		}
		e.push(t, 1)
		e.push(t, other)
		deleteFrameOf(t, e, 1)
		ar, err := au.Finish(ctx, false, nil)
		require.NoError(t, err)
		requireIssue(t, ar, report.IssueUnaudited, 1)
		require.Equal(t, int64(1), ar.UnauditedOffsets)
		require.False(t, ar.Recounted)
	})
}

// deleteFrameOf deletes the segment holding producer 0's id seq (each push
// of the tests writes one segment per partition: the whole segment goes)
// and returns how many frames it held.
func deleteFrameOf(t *testing.T, e *auditEnv, seq uint64) int64 {
	t.Helper()
	ctx := context.Background()
	ms, err := e.a.Messages(ctx, []string{e.queue})
	require.NoError(t, err)
	txn := string(txnid.AppendTxn(nil, 0, seq))
	for _, m := range ms {
		if m.TransactionID == txn {
			conn, err := pgx.Connect(ctx, e.url)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var n int64
			require.NoError(t, conn.QueryRow(ctx, `DELETE FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset <= $2 AND last_offset >= $2
				RETURNING last_offset - first_offset + 1`, m.PartitionID, m.Offset).Scan(&n))
			return n
		}
	}
	t.Fatalf("%s is not stored", txn)
	return 0
}

func TestAuditFailsOnDoubleRow(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// A second frame of transaction id 2: the push transaction is fooled
	// with another hash, so a second segment repeats the stored frame.
	it := e.item(2)
	it.Hash = queen.HashTxn("not-" + it.TransactionID)
	require.Equal(t, queen.Queued, e.commit(t, e.part(2), it).Results[0].Verdict)
	requireIssue(t, e.audit(t), report.IssueStoredTwice, 1)
}

func TestAuditFailsOnQueuedWithoutRow(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// An answer the database does not back.
	e.led.Sent(40)
	e.led.Queued(40, uuid.Must(uuid.NewV7()))
	requireIssue(t, e.audit(t), report.IssueMissing, 1)
}

func TestAuditFailsOnRepeatAnsweredQueued(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// Transaction id 3 was answered queued; its repeat is answered queued
	// again (with another message id) instead of duplicate.
	e.led.Sent(3)
	e.led.Queued(3, uuid.Must(uuid.NewV7()))
	requireIssue(t, e.audit(t), report.IssueRepeatQueued, 1)
}

func TestAuditFailsOnWrongIDs(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// A duplicate answer carrying another id than the original's, and a
	// queued answer whose id is not the stored frame's.
	want := [16]byte(e.ids[1])
	e.led.Duplicate(1, uuid.Must(uuid.NewV7()), &want)
	e.led.Sent(41)
	e.led.Queued(41, uuid.Must(uuid.NewV7()))
	e.commit(t, e.part(41), e.item(41))
	// An id whose original answer was lost: its first duplicate answer
	// carries another id than the stored frame's.
	e.led.Sent(42)
	e.led.Failed(42)
	e.commit(t, e.part(42), e.item(42))
	e.led.Duplicate(42, uuid.Must(uuid.NewV7()), nil)
	ar := e.audit(t)
	requireIssue(t, ar, report.IssueWrongDuplicateID, 2)
	requireIssue(t, ar, report.IssueWrongMessageID, 1)
}

func TestAuditFailsOnUnknownStored(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// A frame nobody sent: a foreign transaction id, and a known one in
	// the wrong partition.
	foreign := e.item(1)
	foreign.TransactionID, foreign.Hash = "someone-else", queen.HashTxn("someone-else")
	e.commit(t, 0, foreign)
	e.commit(t, 1-e.part(1), e.item(1))
	requireIssue(t, e.audit(t), report.IssueUnknownStored, 2)
}
