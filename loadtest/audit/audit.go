package audit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/persistence"
)

// auditor checks the stored frames of the run's queue against the
// producers' ledgers (SPEC.md §12). It reads incrementally: each pass reads
// the segments each partition gained since the last pass (by offset), so a
// run with retention is audited before retention deletes anything, and the
// ledgers only keep the message ids still awaited between two passes.
//
// A pass during the run reads only the partitions marked dirty since the
// last one (an answer, of any kind, came back for an item sent there; the
// commit of a write happens before its answer, so a pass that takes the
// marks before its snapshot sees it) plus a rotating slice of the others
// (a write whose answer never came still gets read), so its cost follows
// the run's rate, not its partition count. The final pass reads every
// partition. Passes run one at a time: the auditor's own goroutine (start),
// then finish.
type Auditor struct {
	a       *persistence.Audit
	queue   string
	parts   []string
	partIdx map[string]int
	ledgers []*Ledger
	// after is the last offset read per partition (index into parts; -1
	// for none), and since the time of the segment holding it (zero for
	// none): a pass searches a partition's new segments only in the time
	// ranges from there on (persistence.Audit.EachMessageIn).
	after []int64
	since []time.Time
	dirty *DirtySet
	// sequential: the run spreads sequentially (txnid.PartIn).
	sequential bool
	// sweep is the next partition of the rotating slice; sweepN is the
	// slice's length (sweepSlice; set by start).
	sweep, sweepN int
	found         *report.Findings

	stored    atomic.Int64
	passes    int
	unaudited int64

	// names, offs and times are a pass's request, reused.
	names []string
	offs  []int64
	times []time.Time

	stop, done chan struct{}
	// lastErr is the last pass's error ("" when it passed), for the
	// timeline.
	lastErr atomic.Pointer[string]
	// also, when set (Follow), sees every frame of the run's partitions a
	// pass reads, once, in offset order per partition.
	also func(*persistence.StoredMessage)
}

// Follow makes every pass hand each frame of the run's partitions it reads
// to fn (once, in offset order per partition, on the passes' goroutine):
// the consume audit's feed. Call it before Start.
func (au *Auditor) Follow(fn func(*persistence.StoredMessage)) { au.also = fn }

// NewAuditor audits queue, whose partitions are parts (index = partition
// index), against the producers' ledgers (index = producer); dirty, when
// set, is where the producers mark the partitions answers came back for
// (nil: every pass reads every partition); sequential is the run's spread
// (txnid.PartIn). Start runs the passes during the run, Finish the last.
func NewAuditor(a *persistence.Audit, queue string, parts []string, ledgers []*Ledger, dirty *DirtySet, sequential bool) *Auditor {
	au := &Auditor{a: a, queue: queue, parts: parts, ledgers: ledgers, partIdx: make(map[string]int, len(parts)),
		after: make([]int64, len(parts)), since: make([]time.Time, len(parts)), dirty: dirty, sweepN: sweepSlice(len(parts), 64), found: report.NewFindings(), sequential: sequential}
	for i, p := range parts {
		au.partIdx[p] = i
		au.after[i] = -1
	}
	return au
}

// StoredTotal is the frames the passes read so far, each once (for the
// timeline's stored/s).
func (au *Auditor) StoredTotal() int64 { return au.stored.Load() }

// Start runs a pass every `every` (the next right after the last when a
// pass takes longer) on a goroutine of its own until Finish or ctx ends;
// with a retention (0: none), the sweep reads every partition within a
// quarter of it. Call it at most once.
func (au *Auditor) Start(ctx context.Context, every, retention time.Duration) {
	au.sweepN = sweepSlice(len(au.parts), sweepCycle(retention, every))
	au.stop, au.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(au.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-au.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			msg := ""
			if _, err := au.pass(ctx, false); err != nil && ctx.Err() == nil {
				msg = err.Error()
			}
			au.lastErr.Store(&msg)
		}
	}()
}

// Err is the last pass's error, "" when it passed or none ran (for the
// timeline).
func (au *Auditor) Err() string {
	if p := au.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// sweepSlice is how many partitions not marked dirty a pass also reads, so
// that every partition is read at least once every `cycle` passes (at
// least 64 partitions a pass).
func sweepSlice(parts, cycle int) int {
	cycle = max(cycle, 1)
	return min(parts, max(64, (parts+cycle-1)/cycle))
}

// sweepCycle is the passes a sweep of every partition may take: 64, or
// fewer with a retention, so that a write no answer marked is read within a
// quarter of the retention (passes every `every`).
func sweepCycle(retention, every time.Duration) int {
	if retention <= 0 || every <= 0 {
		return 64
	}
	return int(min(64, max(1, retention/(4*every))))
}

// pass reads the segments stored since the last pass and checks their
// frames; it returns how many frames it read. all reads every partition;
// otherwise the dirty ones and the next sweep slice (or every partition
// when the run keeps no dirty marks).
func (au *Auditor) pass(ctx context.Context, all bool) (int64, error) {
	var n int64
	fn := func(m *persistence.StoredMessage) error {
		i, ok := au.partIdx[m.Partition]
		if !ok {
			// Not one of the run's partitions: the ledgers report it.
			au.check(m, false)
			n++
			return nil
		}
		prev := au.after[i]
		if m.Offset > prev+1 {
			gap := m.Offset - prev - 1
			au.unaudited += gap
			au.found.Add(report.IssueUnaudited, "partition %s offsets %d to %d were deleted before the audit read them (retention shorter than the audit's lag?)",
				m.Partition, prev+1, m.Offset-1)
		}
		au.after[i], au.since[i] = m.Offset, m.CreatedAt
		n++
		au.check(m, false)
		if au.also != nil {
			au.also(m)
		}
		return nil
	}
	var err error
	if all || au.dirty == nil {
		if au.dirty != nil {
			au.dirty.take(nil)
		}
		// The last pass (all) searches every time range: a segment a
		// clock stepped back hid from the bounded reads is found here,
		// its offsets reported as skipped by the gap check above.
		var since []time.Time
		if !all {
			since = au.since
		}
		err = au.a.EachMessageAfter(ctx, au.queue, au.parts, au.after, since, fn)
	} else {
		au.names, au.offs, au.times = au.names[:0], au.offs[:0], au.times[:0]
		add := func(i int) {
			au.names, au.offs, au.times = append(au.names, au.parts[i]), append(au.offs, au.after[i]), append(au.times, au.since[i])
		}
		marked := au.dirty.take(add)
		for k := au.sweepN; k > 0; k-- {
			if i := au.sweep; !marked(i) {
				add(i)
			}
			au.sweep = (au.sweep + 1) % len(au.parts)
		}
		err = au.a.EachMessageIn(ctx, au.queue, au.names, au.offs, au.times, fn)
		if err != nil {
			// The marks taken are lost with the failed pass: read
			// them again next time.
			for _, name := range au.names {
				au.dirty.Mark(au.partIdx[name])
			}
		}
	}
	au.stored.Add(n)
	au.passes++
	return n, err
}

// check books one stored frame in its producer's ledger.
func (au *Auditor) check(m *persistence.StoredMessage, recount bool) {
	part, okPart := au.partIdx[m.Partition]
	prod, seq, okTxn := txnid.ParseTxn(m.TransactionID)
	if !okPart || !okTxn || prod >= len(au.ledgers) || txnid.PartIn(au.sequential, prod, seq, len(au.parts)) != part ||
		!au.ledgers[prod].store(seq, m.MessageID, m.Offset, recount, au.found) {
		au.found.Add(report.IssueUnknownStored, "partition %s offset %d holds transactionId %q (message %s), which this run never sent there",
			m.Partition, m.Offset, m.TransactionID, m.MessageID)
	}
}

// Finish stops the passes of Start and runs the last incremental pass (every
// partition); then, when recount is set (a run
// without retention: everything is still there), it recounts every stored
// frame of the queue from scratch, so a frame deleted, doubled or planted
// after an earlier pass read its partition is still found, and also (when
// set) sees every stored message; then it checks the ledgers. The report
// says what was found (AuditReport.Passed); the error is a read that failed
// (persistence's ErrUnavailable).
func (au *Auditor) Finish(ctx context.Context, recount bool, also func(*persistence.StoredMessage)) (*report.AuditReport, error) {
	if au.stop != nil {
		close(au.stop)
		<-au.done
	}
	// The last pass reads every partition, so a write no answer marked is
	// read too.
	if _, err := au.pass(ctx, true); err != nil {
		return nil, err
	}
	ar := &report.AuditReport{IncrementalPasses: au.passes, StoredMessages: au.stored.Load(), UnauditedOffsets: au.unaudited}
	if recount {
		for _, l := range au.ledgers {
			l.resetStored()
		}
		au.found.Drop(report.IssueUnknownStored)
		// Offsets gone before a pass read them are judged by the recount:
		// an answered id among them is missing there.
		au.found.Drop(report.IssueUnaudited)
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
		au.found.Merge(l.issues)
		l.mu.Unlock()
		ar.TransactionIDs += t.ids
		ar.Answered += t.answered
		ar.FailedOnly += t.failedOnly
		ar.FailedOnlyStored += t.failedOnlyStored
	}
	if ar.StoredMessages == 0 && ar.Answered > 0 && au.unaudited == 0 {
		au.found.Add(report.IssueMissing, "queue %s has no stored message at all: is the database URL the broker's database?", au.queue)
	}
	ar.Issues = au.found.Counts
	ar.Examples = au.found.Examples()
	ar.Passed = au.found.Total() == 0
	return ar, nil
}

// auditQueue audits queue in one go (no pass during the run): the whole
// check of SPEC.md §12 over the ledgers, also (when set) seeing every stored
// message.
func auditQueue(ctx context.Context, a *persistence.Audit, queue string, parts []string, ledgers []*Ledger, also func(*persistence.StoredMessage)) (*report.AuditReport, error) {
	return NewAuditor(a, queue, parts, ledgers, nil, false).Finish(ctx, true, also)
}
