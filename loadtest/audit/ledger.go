package audit

import (
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go/loadtest/offheap"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
)

// The ledger keeps 4 bits per transactionId (a nibble), indexed by the
// producer's sequence number: whether it was answered queued or duplicate,
// whether it was ever answered failed, and how often a frame of it was seen
// stored (0, 1, 2, 3 = 3 or more). The partition of a sequence number is a
// function of (producer, seq) (partOf), so nothing else is kept per id; the
// message ids are checked through small maps of what is still awaited.
const (
	stAnswered   = 1 << 0
	stFailed     = 1 << 1
	stStoredMask = 3 << 2
	stStoredOne  = 1 << 2

	// chunkSeqs is how many sequence numbers one bitmap chunk holds (16 per
	// uint64): 32 KiB a chunk, mapped outside the Go heap (loadtest/offheap).
	chunkSeqs = 1 << 16
)

// pendingID is a message id waiting for its other half: the id an answer
// carried, waiting for the stored frame, or the stored frame's id, waiting
// for an answer.
type pendingID struct {
	id [16]byte
	// fromStore: id is the stored frame's; else the answer's.
	fromStore bool
	// fromQueued: the answer was queued (else duplicate).
	fromQueued bool
}

// Ledger is one producer's bookkeeping of the transactionIds it sent,
// lt<producer>-<seq> for seq 0, 1, 2, ..., and of the answers they got, for
// the audit (SPEC.md §12). Its memory is 4 bits per id plus the ids still
// awaited (answered but not yet seen stored by the incremental audit, or
// stored but not yet answered): bounded by the rate times the audit's
// interval, not by the run's length. The producer and the audit use it from
// different goroutines; a mutex guards it.
type Ledger struct {
	mu       sync.Mutex
	producer int
	parts    []string
	queue    string
	chunks   [][]uint64
	// hi is one more than the highest sequence number sent.
	hi     uint64
	pend   pendingSet
	issues *report.Findings
	// sequential: the run spreads sequentially (txnid.PartIn).
	sequential bool
}

// NewLedger is producer's ledger for the run's queue, whose partitions are
// parts (index = partition index); sequential is the run's spread
// (txnid.PartIn: true for sequential, false for random), which places each
// sequence number in its partition.
func NewLedger(producer int, queue string, parts []string, sequential bool) *Ledger {
	return &Ledger{producer: producer, parts: parts, queue: queue, issues: report.NewFindings(), sequential: sequential}
}

// name is "partition/transactionId" of seq, for examples.
func (l *Ledger) name(seq uint64) string {
	return l.parts[txnid.PartIn(l.sequential, l.producer, seq, len(l.parts))] + "/" + string(txnid.AppendTxn(nil, l.producer, seq))
}

func (l *Ledger) get(seq uint64) uint8 {
	c := seq / chunkSeqs
	if c >= uint64(len(l.chunks)) {
		return 0
	}
	i := seq % chunkSeqs
	return uint8(l.chunks[c][i/16]>>(4*(i%16))) & 0xf
}

func (l *Ledger) set(seq uint64, st uint8) {
	c := seq / chunkSeqs
	for c >= uint64(len(l.chunks)) {
		l.chunks = append(l.chunks, offheap.Slice[uint64](l, chunkSeqs/16))
	}
	i := seq % chunkSeqs
	w := &l.chunks[c][i/16]
	sh := 4 * (i % 16)
	*w = *w&^(0xf<<sh) | uint64(st&0xf)<<sh
}

// Sent records that the producer sent its sequence number seq.
func (l *Ledger) Sent(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sentLocked(seq)
}

func (l *Ledger) sentLocked(seq uint64) {
	if seq >= l.hi {
		l.hi = seq + 1
		if c := seq / chunkSeqs; c >= uint64(len(l.chunks)) {
			l.set(seq, 0) // grows the bitmap
		}
	}
}

// match pairs an answer's message id with the stored frame's (or keeps it
// until the frame is read). kind is what the answer was.
func (l *Ledger) match(seq uint64, id uuid.UUID, queued bool, st uint8) {
	p, ok := l.pend.get(seq)
	switch {
	case ok && p.fromStore:
		if uuid.UUID(p.id) != id {
			if queued {
				l.issues.Add(report.IssueWrongMessageID, "%s was answered queued with message %s, but the stored frame is message %s", l.name(seq), id, uuid.UUID(p.id))
			} else {
				l.issues.Add(report.IssueWrongDuplicateID, "%s was answered duplicate with message %s, but the stored original is message %s", l.name(seq), id, uuid.UUID(p.id))
			}
		}
		l.pend.del(seq)
	case ok:
		if uuid.UUID(p.id) != id {
			l.issues.Add(report.IssueWrongDuplicateID, "%s was answered with message %s and with message %s", l.name(seq), uuid.UUID(p.id), id)
		}
	case st&stStoredMask == 0:
		l.pend.put(seq, pendingID{id: id, fromQueued: queued})
	}
}

// Queued records that seq was answered queued with message id id.
func (l *Ledger) Queued(seq uint64, id uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sentLocked(seq)
	st := l.get(seq)
	if st&stAnswered != 0 {
		l.issues.Add(report.IssueRepeatQueued, "%s was answered queued (message %s) after it had been answered queued or duplicate", l.name(seq), id)
	} else {
		l.match(seq, id, true, st)
	}
	l.set(seq, st|stAnswered)
}

// Duplicate records that seq was answered duplicate, carrying message id
// id; want, when not nil, is the original's id as its queued answer gave it
// (a mismatch is an IssueWrongDuplicateID finding).
func (l *Ledger) Duplicate(seq uint64, id uuid.UUID, want *[16]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sentLocked(seq)
	st := l.get(seq)
	switch {
	case id == uuid.Nil:
		l.issues.Add(report.IssueWrongDuplicateID, "%s was answered duplicate with the zero id (original gone) though its original is inside retention", l.name(seq))
	case want != nil && uuid.UUID(*want) != id:
		l.issues.Add(report.IssueWrongDuplicateID, "%s was answered duplicate with message %s, but the original is %s", l.name(seq), id, uuid.UUID(*want))
	case want == nil:
		l.match(seq, id, false, st)
	}
	l.set(seq, st|stAnswered)
}

// WrongReply records a reply that does not say what became of an item
// (bad is the description): an IssueWrongReply finding.
func (l *Ledger) WrongReply(bad string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.issues.Add(report.IssueWrongReply, "%s", bad)
}

// Failed records that seq was answered failed (or lost with its request).
func (l *Ledger) Failed(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sentLocked(seq)
	l.set(seq, l.get(seq)|stFailed)
}

// resetStored forgets stored counts before a recount pass.
func (l *Ledger) resetStored() {
	l.mu.Lock()
	defer l.mu.Unlock()
	const mask = 0xcccccccccccccccc // the stored bits of 16 nibbles
	for _, c := range l.chunks {
		for i := range c {
			c[i] &^= mask
		}
	}
}

// store records a stored frame of seq with message id id, and reports
// whether seq was sent at all. Frames of a partition arrive in offset order,
// so the first one is the original: its id must be the one the answers
// carried. recount (a second pass over frames already checked) only counts.
func (l *Ledger) store(seq uint64, id uuid.UUID, offset int64, recount bool, into *report.Findings) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq >= l.hi {
		return false
	}
	st := l.get(seq)
	n := st & stStoredMask >> 2
	if n == 0 && !recount {
		p, ok := l.pend.get(seq)
		switch {
		case ok && !p.fromStore:
			if uuid.UUID(p.id) != id {
				if p.fromQueued {
					into.Add(report.IssueWrongMessageID, "%s was answered queued with message %s, but the stored frame (offset %d) is message %s", l.name(seq), uuid.UUID(p.id), offset, id)
				} else {
					into.Add(report.IssueWrongDuplicateID, "%s was answered duplicate with message %s, but the stored original (offset %d) is message %s", l.name(seq), uuid.UUID(p.id), offset, id)
				}
			}
			l.pend.del(seq)
		case !ok:
			// Not answered yet (or only failed): the answer, if one
			// comes, is checked against the frame.
			l.pend.put(seq, pendingID{id: id, fromStore: true})
		}
	}
	if n < 3 {
		n++
	}
	l.set(seq, st&^stStoredMask|n<<2)
	return true
}

// pending is how many ids wait for their other half.
func (l *Ledger) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pend.len()
}

// ledgerTotals are the counts of a final pass over a ledger.
type ledgerTotals struct {
	ids, answered, failedOnly, failedOnlyStored int64
}

// check runs the final pass: every id answered queued or duplicate is
// stored exactly once; every other id at most once.
func (l *Ledger) check(into *report.Findings) ledgerTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t ledgerTotals
	for seq := range l.hi {
		st := l.get(seq)
		t.ids++
		answered := st&stAnswered != 0
		stored := st & stStoredMask >> 2
		if answered {
			t.answered++
		} else {
			t.failedOnly++
			if stored == 1 {
				t.failedOnlyStored++
			}
		}
		switch {
		case answered && stored == 0:
			into.Add(report.IssueMissing, "%s was answered %s but is not stored", l.name(seq), answers(st))
		case stored > 1:
			into.Add(report.IssueStoredTwice, "%s is stored %s times (answers: %s)", l.name(seq), storedTimes(stored), answers(st))
		}
	}
	return t
}

func storedTimes(n uint8) string {
	if n >= 3 {
		return "3 or more"
	}
	return fmt.Sprint(n)
}

func answers(st uint8) string {
	switch {
	case st&stAnswered != 0 && st&stFailed != 0:
		return "queued or duplicate, and failed"
	case st&stAnswered != 0:
		return "queued or duplicate"
	case st&stFailed != 0:
		return "failed"
	}
	return "never"
}

// Bytes is the ledger's memory in bytes: the bitmap chunks and the
// awaited ids (the timeline's LedgerBytes).
func (l *Ledger) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.chunks))*chunkSeqs/2 + l.pend.bytes()
}
