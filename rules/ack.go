package rules

import (
	"fmt"
	"maps"
	"sort"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// ConsumerRow is a consumer group's row in one partition as an ack finds it
// under the row's lock (SPEC.md §4).
type ConsumerRow struct {
	// Partition and Group name the row in error texts only.
	Partition, Group string
	// Cursor is the last offset consumed (-1: none).
	Cursor int64
	// Lease is the row's lease id; HasLease is false when it has none (never
	// leased, released, or ended by a failure).
	Lease    uuid.UUID
	HasLease bool
	// Live: the lease has not expired.
	Live bool
	// LeaseTo is the last offset of the leased span (nil: none).
	LeaseTo *int64
	// RetryLimit is the queue's retryLimit: a message failed more times
	// than this is dead-lettered.
	RetryLimit int64
	// FailCounts is the failed deliveries counted per offset above the
	// cursor (not modified by Ack).
	FailCounts map[int64]int32
}

// AckTarget is one ack item resolved to an offset of the row's partition.
type AckTarget struct {
	Offset int64
	Status queen.AckStatus
	// LeaseID, when set, must be the row's live lease.
	LeaseID *uuid.UUID
	// Error is the consumer's error text, kept with a dead letter.
	Error string
}

// AckVerdict is the answer to one AckTarget (the fields of queen.AckResult
// it decides).
type AckVerdict struct {
	Result  queen.AckOutcome
	Success bool
	Error   string
}

// DeadLetter is a message to copy to the dead-letter queue: its offset, the
// error text to keep and its failed deliveries.
type DeadLetter struct {
	Offset   int64
	Error    string
	Attempts int32
}

// AckDecision is what Ack decides for one consumer row.
type AckDecision struct {
	// Verdicts has one verdict per target, in the targets' order.
	Verdicts []AckVerdict
	// Cursor is the row's new cursor.
	Cursor int64
	// KeepLease: the row keeps its lease; false releases it (or it had
	// none).
	KeepLease bool
	// FailCounts is the row's new failed-delivery counts (offsets above
	// Cursor only).
	FailCounts map[int64]int32
	// DeadLetters are to be copied to the DLQ, in offset order, one per
	// offset.
	DeadLetters []DeadLetter
}

// Ack decides what the targets do to row (SPEC.md §4):
//   - a target at or below the cursor is stale (success: it was consumed);
//   - one naming a lease that is not the row's live lease is lease_invalid;
//   - the others are swept in offset order (ties in the targets' order):
//     completed moves the cursor to it; every failed target counts one
//     failed delivery against its message (once per offset per call, so a
//     batch nack brings each message to the DLQ after retryLimit + 1
//     deliveries); a message with dlq, or failed past RetryLimit, is
//     dead-lettered and the cursor passes it; the first failure that is not
//     dead-lettered stops the sweep: nothing above it is applied (those
//     targets are retry_scheduled, successful when they asked for a
//     retry), and a completed target at its very offset is not applied;
//   - a failure of any kind ends the lease (the rest of the span is
//     delivered again at once), and so does a cursor at or past the lease's
//     last offset, or a lease that is not live.
func Ack(row ConsumerRow, targets []AckTarget) AckDecision {
	d := AckDecision{Verdicts: make([]AckVerdict, len(targets)), Cursor: row.Cursor}
	var order []int
	for i, t := range targets {
		switch {
		case t.Offset <= row.Cursor:
			d.Verdicts[i] = AckVerdict{Result: queen.Stale, Success: true}
		case t.LeaseID != nil && (!row.Live || !row.HasLease || row.Lease != *t.LeaseID):
			d.Verdicts[i] = AckVerdict{Result: queen.LeaseInvalid,
				Error: fmt.Sprintf("lease %s is not the live lease of partition %s for group %q", *t.LeaseID, row.Partition, row.Group)}
		default:
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return targets[order[a]].Offset < targets[order[b]].Offset })
	counts := maps.Clone(row.FailCounts)
	if counts == nil {
		counts = map[int64]int32{}
	}
	counted := map[int64]bool{}
	for _, i := range order {
		if t := targets[i]; t.Status == queen.AckFailed && !counted[t.Offset] {
			counted[t.Offset] = true
			counts[t.Offset]++
		}
	}
	lease := row.HasLease
	stop := int64(-1) // the offset of the failure that stopped the sweep
	dead := map[int64]bool{}
	for _, i := range order {
		t, v := targets[i], &d.Verdicts[i]
		off := t.Offset
		if stop >= 0 && off > stop {
			v.Result = queen.RetryScheduled
			v.Success = t.Status == queen.AckFailed || t.Status == queen.AckRetry
			if !v.Success {
				v.Error = fmt.Sprintf("not applied: a failure at the lower offset %d in the same call stops the cursor below it; the message will be delivered again", stop)
			}
			continue
		}
		switch t.Status {
		case queen.AckCompleted:
			if stop >= 0 { // the same offset as the stopping failure
				v.Result = queen.RetryScheduled
				v.Error = fmt.Sprintf("not applied: the same call failed offset %d", off)
				continue
			}
			v.Result, v.Success = queen.Acked, true
			d.Cursor = max(d.Cursor, off)
		case queen.AckDLQ, queen.AckFailed:
			attempts := counts[off]
			if t.Status == queen.AckDLQ {
				attempts++
			}
			if t.Status == queen.AckDLQ || int64(attempts) > row.RetryLimit || dead[off] {
				if !dead[off] {
					d.DeadLetters = append(d.DeadLetters, DeadLetter{Offset: off, Error: t.Error, Attempts: attempts})
					dead[off] = true
				}
				v.Result, v.Success = queen.DeadLettered, true
				d.Cursor = max(d.Cursor, off)
				// A failure ends the lease even when it dead-letters: a
				// consumer stops at its first failure, so the rest of the
				// span is delivered again at once.
				lease = false
				continue
			}
			fallthrough
		case queen.AckRetry:
			v.Result, v.Success = queen.RetryScheduled, true
			lease = false // the rest of the span is delivered again at once
			if stop < 0 {
				stop = off
			}
		}
	}
	if lease && (!row.Live || row.LeaseTo == nil || d.Cursor >= *row.LeaseTo) {
		lease = false
	}
	for off := range counts {
		if off <= d.Cursor {
			delete(counts, off)
		}
	}
	d.KeepLease, d.FailCounts = lease, counts
	return d
}
