package persistence

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

var sqlDedupInspect = q("dedup_inspect")

// InspectDedup answers the dedup inspector (SPEC.md §13): what the next push
// of the transactionId whose hash is h to partition (queueName, partition)
// would get, decided by the push probe's lookup on PostgreSQL's clock (see
// sql/dedup_inspect.sql). It reads only: no row lock, no write, one
// read-only transaction with the probe's plan settings.
//
// Errors: queen.ErrNotFound when the queue or the partition does not exist;
// queen.ErrUnavailable (or ErrTimeout) when the database does not answer.
func (s *Store) InspectDedup(ctx context.Context, queueName, partition string, h queen.Hash) (queen.DedupInspection, error) {
	var (
		out     queen.DedupInspection
		found   bool
		pid     pgtype.UUID
		seconds int64
		off     *int64
		created *time.Time
		inside  *bool
		mid     []byte
	)
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY")
	b.Queue(sqlProbePlanBegin)
	b.Queue(sqlDedupInspect, queueName, partition, pgUUID(h)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			if err := rows.Scan(&pid, &seconds, &off, &created, &inside, &mid); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue("COMMIT")
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return out, unavailable(err)
	}
	if !found {
		return out, queen.ErrNotFound.With("queue %q does not exist", queueName)
	}
	if !pid.Valid {
		return out, queen.ErrNotFound.With("queue %q has no partition %q", queueName, partition)
	}
	out.WindowSeconds = seconds
	if off == nil || created == nil || inside == nil {
		out.State = queen.Unknown
		return out, nil
	}
	out.State = queen.Expired
	if *inside {
		out.State = queen.InWindow
	}
	id := queen.ZeroUUID // the segment is gone: what a duplicate push names
	if len(mid) == 16 {
		id = uuid.UUID(mid)
	}
	ids := id.String()
	at := created.UTC()
	closes := at.Add(time.Duration(seconds) * time.Second)
	out.MessageID, out.Offset, out.CreatedAt, out.WindowClosesAt = &ids, off, &at, &closes
	return out, nil
}

var (
	sqlDLQByID   = q("dlq_by_id")
	sqlDLQDelete = q("dlq_delete")
)

// DeadLettersByID returns the dead letters among ids that belong to queue
// queueName and, unless group is "", to consumer group group, by id (for
// DLQ replay, SPEC.md §13). Ids that match nothing are simply absent.
func (s *Store) DeadLettersByID(ctx context.Context, queueName, group string, ids []int64) ([]queen.DeadLetter, error) {
	rows, err := s.pool.Query(ctx, sqlDLQByID, queueName, group, ids)
	if err != nil {
		return nil, unavailable(err)
	}
	var total int64
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queen.DeadLetter, error) { return scanDeadLetter(r, &total) })
	if err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// DeleteDeadLetters removes the dead letters ids (replayed, SPEC.md §13) and
// returns the ids it removed: one another session removed first is absent.
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, sqlDLQDelete, ids)
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return out, unavailable(err)
}
