// The consume paths (SPEC.md §4), by concern: pop.go (a partition pop: the
// span above the cursor, its messages, the lease or the autoAck cursor),
// popmany.go (one statement set for many partitions), consumer.go (consumer
// rows: their lock, state, subscription, candidates, lease extension), ack.go
// (acks and the sweep rules.Ack decides) and deadletter.go (DLQ writes).
// This file holds their statements and the connection they share.

package persistence

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	sqlConsumeEnsure     = q("consume_ensure")
	sqlConsumeForget     = q("consume_forget")
	sqlConsumeHashAt     = q("consume_hash_at")
	sqlAckLockMany       = q("ack_lock_many")
	sqlConsumeLock       = q("consume_lock")
	sqlConsumeLockSkip   = q("consume_lock_skip")
	sqlConsumeLockMany   = q("consume_lock_many")
	sqlConsumeLockManySk = q("consume_lock_many_skip")
	sqlConsumeSegments   = q("consume_segments")
	sqlConsumeSegsMany   = q("consume_segments_many")
	sqlConsumePlanBegin  = q("consume_plan_begin")
	sqlConsumeUpdate     = q("consume_update")
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
