package loadtest

import (
	"fmt"
	"sort"

	"github.com/google/uuid"
)

// The audit's findings (SPEC.md §12), by kind.
const (
	// IssueMissing: a transactionId answered queued or duplicate has no
	// stored frame in its partition.
	IssueMissing = "missing"
	// IssueStoredTwice: a (partition, transactionId) is stored more than once.
	IssueStoredTwice = "stored_twice"
	// IssueRepeatQueued: a repeat of a transactionId already answered queued
	// or duplicate was answered queued.
	IssueRepeatQueued = "repeat_queued"
	// IssueWrongDuplicateID: a duplicate answer did not carry the original's
	// message id.
	IssueWrongDuplicateID = "wrong_duplicate_id"
	// IssueWrongMessageID: a queued answer's message id is not the stored
	// frame's.
	IssueWrongMessageID = "wrong_message_id"
	// IssueUnknownStored: a stored frame whose (partition, transactionId)
	// the run never sent.
	IssueUnknownStored = "unknown_stored"
	// IssueWrongReply: a reply element that does not match its request item.
	IssueWrongReply = "wrong_reply"
)

// maxExamples bounds the examples kept per kind of issue.
const maxExamples = 3

// issues counts findings by kind and keeps a few examples of each.
type issues struct {
	counts   map[string]int64
	examples map[string][]string
}

func newIssues() *issues {
	return &issues{counts: map[string]int64{}, examples: map[string][]string{}}
}

func (is *issues) add(kind, format string, args ...any) {
	is.counts[kind]++
	if len(is.examples[kind]) < maxExamples {
		is.examples[kind] = append(is.examples[kind], fmt.Sprintf(format, args...))
	}
}

func (is *issues) merge(o *issues) {
	for k, n := range o.counts {
		is.counts[k] += n
	}
	for k, ex := range o.examples {
		for _, e := range ex {
			if len(is.examples[k]) < maxExamples {
				is.examples[k] = append(is.examples[k], e)
			}
		}
	}
}

func (is *issues) total() int64 {
	var n int64
	for _, c := range is.counts {
		n += c
	}
	return n
}

// exampleList returns "kind: example" lines, kinds in name order.
func (is *issues) exampleList() []string {
	kinds := make([]string, 0, len(is.examples))
	for k := range is.examples {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var out []string
	for _, k := range kinds {
		for _, e := range is.examples[k] {
			out = append(out, k+": "+e)
		}
	}
	return out
}

// entry is what a producer remembers of one (partition, transactionId):
// 21 bytes, so a run of millions of ids stays small.
type entry struct {
	// id is the original's message id: from the first queued answer, else
	// from the first duplicate answer (the original's commit answer was lost).
	id [16]byte
	// Answers and stored frames, saturating at 255.
	queued, dup, failed, stored uint8
	flags                       uint8
}

const (
	flagID           = 1 << iota // id is set
	flagIDFromQueued             // id came from a queued answer
)

func inc(n uint8) uint8 {
	if n == 255 {
		return n
	}
	return n + 1
}

// ledger is one producer's bookkeeping: every (partition, transactionId) it
// sent, keyed by makeKey, with the answers it got. Owned by its producer
// while the run lasts, then by the audit; never shared.
type ledger struct {
	producer int
	parts    []string
	queue    string
	m        map[uint64]entry
	issues   *issues
}

func newLedger(producer int, queue string, parts []string) *ledger {
	return &ledger{producer: producer, parts: parts, queue: queue, m: map[uint64]entry{}, issues: newIssues()}
}

// name is "partition/transactionId" of key, for examples.
func (l *ledger) name(key uint64) string {
	return l.parts[keyPart(key)] + "/" + string(appendTxn(nil, l.producer, keySeq(key)))
}

// sent records that key was sent (creating its entry).
func (l *ledger) sent(key uint64) {
	if _, ok := l.m[key]; !ok {
		l.m[key] = entry{}
	}
}

// queued records a queued answer with message id id.
func (l *ledger) queued(key uint64, id uuid.UUID) {
	e := l.m[key]
	if e.queued > 0 || e.dup > 0 {
		first := "queued"
		if e.queued == 0 {
			first = "duplicate"
		}
		l.issues.add(IssueRepeatQueued, "%s was answered queued (message %s) after it had been answered %s (message %s)",
			l.name(key), id, first, uuid.UUID(e.id))
	} else {
		e.id, e.flags = id, flagID|flagIDFromQueued
	}
	e.queued = inc(e.queued)
	l.m[key] = e
}

// duplicate records a duplicate answer carrying message id id.
func (l *ledger) duplicate(key uint64, id uuid.UUID) {
	e := l.m[key]
	switch {
	case id == uuid.Nil:
		l.issues.add(IssueWrongDuplicateID, "%s was answered duplicate with the zero id (original gone) though nothing was deleted", l.name(key))
	case e.flags&flagID != 0 && uuid.UUID(e.id) != id:
		l.issues.add(IssueWrongDuplicateID, "%s was answered duplicate with message %s, but the original is %s", l.name(key), id, uuid.UUID(e.id))
	case e.flags&flagID == 0:
		e.id, e.flags = id, flagID
	}
	e.dup = inc(e.dup)
	l.m[key] = e
}

// failed records a failed answer.
func (l *ledger) failed(key uint64) {
	e := l.m[key]
	e.failed = inc(e.failed)
	l.m[key] = e
}

// resetStored forgets stored counts before an audit pass.
func (l *ledger) resetStored() {
	for k, e := range l.m {
		if e.stored != 0 {
			e.stored = 0
			l.m[k] = e
		}
	}
}

// store records a stored frame of key with message id id. Frames arrive in
// offset order, so the first one is the original: its id must be the one
// the answers carried.
func (l *ledger) store(key uint64, id uuid.UUID, offset int64, into *issues) bool {
	e, ok := l.m[key]
	if !ok {
		return false
	}
	if e.stored == 0 && e.flags&flagID != 0 && uuid.UUID(e.id) != id {
		if e.flags&flagIDFromQueued != 0 {
			into.add(IssueWrongMessageID, "%s was answered queued with message %s, but the stored frame (offset %d) is message %s", l.name(key), uuid.UUID(e.id), offset, id)
		} else {
			into.add(IssueWrongDuplicateID, "%s was answered duplicate with message %s, but the stored original (offset %d) is message %s", l.name(key), uuid.UUID(e.id), offset, id)
		}
	}
	e.stored = inc(e.stored)
	l.m[key] = e
	return true
}

// ledgerTotals are the counts of a final pass over a ledger.
type ledgerTotals struct {
	ids, answered, failedOnly, failedOnlyStored int64
}

// check runs the final pass: every id answered queued or duplicate is
// stored exactly once; every other id at most once.
func (l *ledger) check(into *issues) ledgerTotals {
	var t ledgerTotals
	for key, e := range l.m {
		t.ids++
		answered := e.queued > 0 || e.dup > 0
		if answered {
			t.answered++
		} else {
			t.failedOnly++
			if e.stored == 1 {
				t.failedOnlyStored++
			}
		}
		switch {
		case answered && e.stored == 0:
			into.add(IssueMissing, "%s was answered %s but is not stored", l.name(key), answers(e))
		case e.stored > 1:
			into.add(IssueStoredTwice, "%s is stored %d times (answers: %s)", l.name(key), e.stored, answers(e))
		}
	}
	return t
}

func answers(e entry) string {
	s := ""
	add := func(n uint8, v string) {
		if n == 0 {
			return
		}
		if s != "" {
			s += ", "
		}
		if n == 1 {
			s += v
		} else {
			s += fmt.Sprintf("%s ×%d", v, n)
		}
	}
	add(e.queued, "queued")
	add(e.dup, "duplicate")
	add(e.failed, "failed")
	if s == "" {
		s = "never"
	}
	return s
}
