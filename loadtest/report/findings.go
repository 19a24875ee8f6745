package report

import (
	"fmt"
	"sort"
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
	// IssueUnaudited: segments were deleted (by retention) before the
	// incremental audit read them, so the ids they held could not be checked.
	IssueUnaudited = "unaudited"
)

// The consume audit's findings, by kind.
const (
	// IssueNotDrained: the groups' cursors did not reach the partitions'
	// last offsets within the drain timeout.
	IssueNotDrained = "not_drained"
	// IssueNotAcked: a message that is not poison was handled but never
	// answered acked (and no ack of it went unanswered).
	IssueNotAcked = "not_acked"
	// IssueNeverDelivered: a stored message that is not poison was never
	// handled by a group.
	IssueNeverDelivered = "never_delivered"
	// IssueAckedTwice: two completed acks of one message were both
	// answered acked.
	IssueAckedTwice = "acked_twice"
	// IssueRedelivered: a message was handled again after an ack of it
	// was answered acked (and no ack of it went unanswered).
	IssueRedelivered = "redelivered_after_ack"
	// IssuePoisonDeliveries: a poison message was not charged exactly
	// retryLimit+1 failed deliveries (failed acks, or abandoned leases in
	// which it was the only unacked message: SPEC.md §4).
	IssuePoisonDeliveries = "poison_deliveries"
	// IssueDLQMissing: a poison message is not in its group's DLQ.
	IssueDLQMissing = "dlq_missing"
	// IssueDLQTwice: a message is in a group's DLQ more than once.
	IssueDLQTwice = "dlq_twice"
	// IssueDLQAttempts: a dead letter's attempts is not retryLimit+1.
	IssueDLQAttempts = "dlq_attempts"
	// IssueDLQError: a dead letter's error text is not the fail mode's (the
	// poison ack's error with FailNack, "lease expired" with the crash
	// modes).
	IssueDLQError = "dlq_error"
	// IssueDLQUnexpected: a dead letter of a message that is not poison,
	// not stored, or of a group or partition the run does not know.
	IssueDLQUnexpected = "dlq_unexpected"
	// IssueCursorWrong: a group's final cursor in a partition is not the
	// partition's last offset.
	IssueCursorWrong = "cursor_wrong"
	// IssueAckRefused: an ack was answered unresolvable, or lease_invalid
	// before its lease could have run out (less than leaseTime after its
	// pop was sent).
	IssueAckRefused = "ack_refused"
	// IssueAckUnexpected: an ack answer that does not fit its ack (a
	// completed ack answered retry_scheduled, a count mismatch, ...).
	IssueAckUnexpected = "ack_unexpected"
	// IssueWrongDelivery: a delivered message that does not match what is
	// stored at its offset, or is not of the run's queue, partitions or
	// group.
	IssueWrongDelivery = "wrong_delivery"
	// IssueWrongRetryCount: a delivery's retryCount is not the number of
	// failed deliveries of that message before it.
	IssueWrongRetryCount = "wrong_retry_count"
	// IssueOutOfOrder: one pop reply skips or repeats offsets of a
	// partition.
	IssueOutOfOrder = "out_of_order"
	// IssueDeliveredUnknown: a delivered offset that is not stored.
	IssueDeliveredUnknown = "delivered_unknown"
)

// maxExamples bounds the examples kept per kind of issue.
const maxExamples = 3

// Findings counts an audit's findings by kind (the Issue* constants) and
// keeps a few examples of each (maxExamples, 3): what AuditReport and
// ConsumeAudit carry as Issues and Examples. Not safe for concurrent use.
type Findings struct {
	// Counts is the findings by kind.
	Counts   map[string]int64
	examples map[string][]string
}

// NewFindings is an empty Findings.
func NewFindings() *Findings {
	return &Findings{Counts: map[string]int64{}, examples: map[string][]string{}}
}

// Add counts one finding of kind, with its description (fmt.Sprintf of
// format and args) kept as an example while kind has fewer than 3.
func (is *Findings) Add(kind, format string, args ...any) {
	is.Counts[kind]++
	if len(is.examples[kind]) < maxExamples {
		is.examples[kind] = append(is.examples[kind], fmt.Sprintf(format, args...))
	}
}

// Merge adds o's findings and examples to is.
func (is *Findings) Merge(o *Findings) {
	for k, n := range o.Counts {
		is.Counts[k] += n
	}
	for k, ex := range o.examples {
		for _, e := range ex {
			if len(is.examples[k]) < maxExamples {
				is.examples[k] = append(is.examples[k], e)
			}
		}
	}
}

// Drop forgets the findings of kind (a recount finds them again).
func (is *Findings) Drop(kind string) {
	delete(is.Counts, kind)
	delete(is.examples, kind)
}

// Total is the number of findings of every kind.
func (is *Findings) Total() int64 {
	var n int64
	for _, c := range is.Counts {
		n += c
	}
	return n
}

// Examples returns "kind: example" lines, kinds in name order.
func (is *Findings) Examples() []string {
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
