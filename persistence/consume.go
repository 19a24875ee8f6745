// The consume paths (SPEC.md §4), by concern: pop.go (the pop, of one
// partition or several: one statement set whatever their number),
// popspan.go (a partition's span above the cursor and its messages),
// consumer.go (consumer rows: their lock, state, writes, subscription,
// candidates, lease extension), ack.go (acks and the sweep rules.Ack
// decides) and deadletter.go (DLQ writes). This file holds their statements
// and the connection they share. Each statement takes arrays, one element
// per consumer row, and serves one row as well as many.

package persistence

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	sqlConsumeEnsure     = q("consume_ensure")
	sqlConsumeForget     = q("consume_forget")
	sqlConsumeHashAt     = q("consume_hash_at")
	sqlConsumerLock      = q("consumer_lock")
	sqlConsumerLockSkip  = skipLocked(sqlConsumerLock, "FOR UPDATE OF c")
	sqlConsumeSegsMany   = q("consume_segments_many")
	sqlConsumePlanBegin  = q("consume_plan_begin")
	sqlConsumeUpdateMany = q("consume_update_many")
	sqlConsumeResolve    = q("consume_resolve")
	sqlConsumeSegmentAt  = q("consume_segment_at")
	sqlConsumeDeadLetter = q("consume_dead_letter")
	sqlConsumeExtend     = q("consume_extend")
	sqlConsumeCandidates = q("consume_candidates")
	sqlConsumeSubscribe  = q("consume_subscribe")
	sqlConsumeFirstAbove = q("consume_first_above")
)

// querier is what the consume paths need of a connection or transaction.
type querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// skipLocked returns lock, a statement holding its lock clause exactly
// once, with SKIP LOCKED added to it: the same statement (one lock rule)
// for a caller that skips a row another session holds instead of waiting
// for it: a pop (consumer_lock, "FOR UPDATE OF c"), and a bundle's second
// attempt after its first was cancelled by lock_timeout (bundle_lock,
// "FOR NO KEY UPDATE"; Store.CommitBundle: it takes the locks that are free
// now, so a stuck partition never fails its neighbours, and
// partition_ends_present then tells a skipped partition from a missing
// one). It panics when lock holds no such clause or several (a statement
// edited out of shape), at start.
func skipLocked(lock, clause string) string {
	if strings.Count(lock, clause) != 1 {
		panic("persistence: a lock statement must hold exactly one " + clause)
	}
	return strings.Replace(lock, clause, clause+" SKIP LOCKED", 1)
}
