package loadtest

import (
	"context"
	"sync/atomic"

	"github.com/queen-mq/queen-go/persistence"
)

// auditor checks the stored frames of the run's queue against the
// producers' ledgers (SPEC.md §12). It reads incrementally: each pass reads
// the segments each partition gained since the last pass (by offset), so a
// run with retention is audited before retention deletes anything, and the
// ledgers only keep the message ids still awaited between two passes. Passes
// run one at a time (the sampler's goroutine, then the final audit).
type auditor struct {
	a       *persistence.Audit
	queue   string
	parts   []string
	partIdx map[string]int
	ledgers []*ledger
	// after is the last offset read per partition name: one entry per
	// partition of the run's queue.
	after map[string]int64
	found *issues

	stored    atomic.Int64
	passes    int
	unaudited int64
}

func newAuditor(a *persistence.Audit, queue string, parts []string, ledgers []*ledger) *auditor {
	au := &auditor{a: a, queue: queue, parts: parts, ledgers: ledgers, partIdx: make(map[string]int, len(parts)),
		after: map[string]int64{}, found: newIssues()}
	for i, p := range parts {
		au.partIdx[p] = i
	}
	return au
}

// storedTotal is the frames read so far, each once.
func (au *auditor) storedTotal() int64 { return au.stored.Load() }

// pass reads the segments stored since the last pass and checks their
// frames; it returns how many frames it read.
func (au *auditor) pass(ctx context.Context) (int64, error) {
	var n int64
	err := au.a.EachMessageAfter(ctx, au.queue, au.after, func(m *persistence.StoredMessage) error {
		prev, ok := au.after[m.Partition]
		if !ok {
			prev = -1
		}
		if m.Offset > prev+1 {
			gap := m.Offset - prev - 1
			au.unaudited += gap
			au.found.add(IssueUnaudited, "partition %s offsets %d to %d were deleted before the audit read them (retention shorter than the audit's lag?)",
				m.Partition, prev+1, m.Offset-1)
		}
		au.after[m.Partition] = m.Offset
		n++
		au.check(m, false)
		return nil
	})
	au.stored.Add(n)
	au.passes++
	return n, err
}

// check books one stored frame in its producer's ledger.
func (au *auditor) check(m *persistence.StoredMessage, recount bool) {
	part, okPart := au.partIdx[m.Partition]
	prod, seq, okTxn := parseTxn(m.TransactionID)
	if !okPart || !okTxn || prod >= len(au.ledgers) || partOf(prod, seq, len(au.parts)) != part ||
		!au.ledgers[prod].store(seq, m.MessageID, m.Offset, recount, au.found) {
		au.found.add(IssueUnknownStored, "partition %s offset %d holds transactionId %q (message %s), which this run never sent there",
			m.Partition, m.Offset, m.TransactionID, m.MessageID)
	}
}

// finish runs the last incremental pass; then, when recount is set (a run
// without retention: everything is still there), it recounts every stored
// frame of the queue from scratch, so a frame deleted, doubled or planted
// after an earlier pass read its partition is still found, and also (when
// set) sees every stored message; then it checks the ledgers.
func (au *auditor) finish(ctx context.Context, recount bool, also func(*persistence.StoredMessage)) (*AuditReport, error) {
	if _, err := au.pass(ctx); err != nil {
		return nil, err
	}
	ar := &AuditReport{IncrementalPasses: au.passes, StoredMessages: au.stored.Load(), UnauditedOffsets: au.unaudited}
	if recount {
		for _, l := range au.ledgers {
			l.resetStored()
		}
		au.found.drop(IssueUnknownStored)
		// Offsets gone before a pass read them are judged by the recount:
		// an answered id among them is missing there.
		au.found.drop(IssueUnaudited)
		var n int64
		err := au.a.EachMessage(ctx, []string{au.queue}, func(m *persistence.StoredMessage) error {
			n++
			au.check(m, true)
			if also != nil {
				also(m)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		ar.Recounted, ar.StoredMessages = true, n
	}
	for _, l := range au.ledgers {
		t := l.check(au.found)
		l.mu.Lock()
		au.found.merge(l.issues)
		l.mu.Unlock()
		ar.TransactionIDs += t.ids
		ar.Answered += t.answered
		ar.FailedOnly += t.failedOnly
		ar.FailedOnlyStored += t.failedOnlyStored
	}
	if ar.StoredMessages == 0 && ar.Answered > 0 && au.unaudited == 0 {
		au.found.add(IssueMissing, "queue %s has no stored message at all: is the database URL the broker's database?", au.queue)
	}
	ar.Issues = au.found.counts
	ar.Examples = au.found.exampleList()
	ar.Passed = au.found.total() == 0
	return ar, nil
}

// auditQueue audits queue in one go (no pass during the run): the whole
// check of SPEC.md §12 over the ledgers, also (when set) seeing every stored
// message.
func auditQueue(ctx context.Context, a *persistence.Audit, queue string, parts []string, ledgers []*ledger, also func(*persistence.StoredMessage)) (*AuditReport, error) {
	return newAuditor(a, queue, parts, ledgers).finish(ctx, true, also)
}
