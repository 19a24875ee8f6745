package loadtest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// auditEnv is a migrated database, a Store writing to it through the real
// push transaction, and producer 0's ledger recording the answers, as a
// producer would.
type auditEnv struct {
	s     *persistence.Store
	a     *persistence.Audit
	queue string
	parts []string
	led   *ledger
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
	parts := partitionNames(2)
	return &auditEnv{s: s, a: a, queue: "lt", parts: parts, led: newLedger(0, "lt", parts)}
}

func (e *auditEnv) item(part int, seq uint64) *queen.Item {
	txn := string(appendTxn(nil, 0, seq))
	return &queen.Item{Queue: e.queue, Partition: e.parts[part], TransactionID: txn,
		Payload: json.RawMessage(appendPayload(nil, 0, seq, 60)), Hash: queen.HashTxn(txn)}
}

// commit runs one push transaction of items to partition part without
// recording anything.
func (e *auditEnv) commit(t *testing.T, part int, its ...*queen.Item) persistence.PushOutcome {
	t.Helper()
	ctx := context.Background()
	pid, err := e.s.EnsurePartition(ctx, e.queue, e.parts[part])
	require.NoError(t, err)
	out, err := e.s.Commit(ctx, &persistence.PushBatch{PartitionID: pid, Items: its, Watermark: -1})
	require.NoError(t, err)
	return out
}

// push commits the transaction ids seqs to partition part and records the
// sends and their answers in the ledger.
func (e *auditEnv) push(t *testing.T, part int, seqs ...uint64) {
	t.Helper()
	its := make([]*queen.Item, len(seqs))
	for i, s := range seqs {
		its[i] = e.item(part, s)
		e.led.sent(makeKey(part, s))
	}
	out := e.commit(t, part, its...)
	for i, r := range out.Results {
		k := makeKey(part, seqs[i])
		switch r.Verdict {
		case queen.Queued:
			e.led.queued(k, r.MessageID)
		case queen.Duplicate:
			e.led.duplicate(k, r.MessageID)
		default:
			e.led.failed(k)
		}
	}
}

func (e *auditEnv) audit(t *testing.T) *AuditReport {
	t.Helper()
	ar, err := auditQueue(context.Background(), e.a, e.queue, e.parts, []*ledger{e.led}, nil)
	require.NoError(t, err)
	return ar
}

// clean sends new ids and repeats (in later requests) to two partitions.
func (e *auditEnv) clean(t *testing.T) {
	e.push(t, 0, 1, 2, 3)
	e.push(t, 1, 4, 5)
	e.push(t, 0, 2, 6)    // a repeat and a new id
	e.push(t, 1, 4, 5, 7) // two repeats and a new id
}

func requireIssue(t *testing.T, ar *AuditReport, kind string, n int64) {
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
	e.led.sent(makeKey(0, 8))
	e.led.failed(makeKey(0, 8))
	e.commit(t, 0, e.item(0, 8))
	// An id never answered and not stored: allowed.
	e.led.sent(makeKey(1, 9))

	ar := e.audit(t)
	require.True(t, ar.Passed, "issues %v, examples %v", ar.Issues, ar.Examples)
	require.Equal(t, int64(9), ar.TransactionIDs)
	require.Equal(t, int64(7), ar.Answered)
	require.Equal(t, int64(2), ar.FailedOnly)
	require.Equal(t, int64(1), ar.FailedOnlyStored)
	require.Equal(t, int64(8), ar.StoredMessages)

	// Auditing again gives the same answer (stored counts are reset).
	again := e.audit(t)
	require.True(t, again.Passed, "issues %v", again.Issues)
}

func TestAuditFailsOnDoubleRow(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// A second frame of transaction id 2 in partition 0: the push
	// transaction is fooled with another hash, so a second segment repeats
	// the stored frame.
	it := e.item(0, 2)
	it.Hash = queen.HashTxn("not-" + it.TransactionID)
	require.Equal(t, queen.Queued, e.commit(t, 0, it).Results[0].Verdict)
	requireIssue(t, e.audit(t), IssueStoredTwice, 1)
}

func TestAuditFailsOnQueuedWithoutRow(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// An answer the database does not back.
	k := makeKey(1, 40)
	e.led.sent(k)
	e.led.queued(k, uuid.Must(uuid.NewV7()))
	requireIssue(t, e.audit(t), IssueMissing, 1)
}

func TestAuditFailsOnRepeatAnsweredQueued(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// Transaction id 3 was answered queued; its repeat is answered queued
	// again (with another message id) instead of duplicate.
	k := makeKey(0, 3)
	e.led.sent(k)
	e.led.queued(k, uuid.Must(uuid.NewV7()))
	requireIssue(t, e.audit(t), IssueRepeatQueued, 1)
}

func TestAuditFailsOnWrongIDs(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// A duplicate answer carrying another id than the original's, and a
	// queued answer whose id is not the stored frame's.
	e.led.duplicate(makeKey(0, 1), uuid.Must(uuid.NewV7()))
	k := makeKey(1, 41)
	e.led.sent(k)
	e.led.queued(k, uuid.Must(uuid.NewV7()))
	e.commit(t, 1, e.item(1, 41))
	ar := e.audit(t)
	requireIssue(t, ar, IssueWrongDuplicateID, 1)
	requireIssue(t, ar, IssueWrongMessageID, 1)
}

func TestAuditFailsOnUnknownStored(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t)
	e.clean(t)
	// A frame nobody sent: a foreign transaction id, and a known one in
	// the wrong partition.
	foreign := e.item(0, 1)
	foreign.TransactionID, foreign.Hash = "someone-else", queen.HashTxn("someone-else")
	e.commit(t, 0, foreign)
	e.commit(t, 1, e.item(1, 1))
	requireIssue(t, e.audit(t), IssueUnknownStored, 2)
}
