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
	ids := originalID(uuid.UUID(pid.Bytes), *off, *created, mid).String()
	at := created.UTC()
	closes := at.Add(time.Duration(seconds) * time.Second)
	out.MessageID, out.Offset, out.CreatedAt, out.WindowClosesAt = &ids, off, &at, &closes
	return out, nil
}

var (
	sqlDLQByID       = q("dlq_by_id")
	sqlDLQDelete     = q("dlq_delete")
	sqlDLQReplayWait = q("dlq_replay_wait")
	sqlDLQReplayLock = q("dlq_replay_lock")
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

// ReplayDeadLetters runs one DLQ replay of the dead letters ids of queue
// queueName (and, unless group is "", of consumer group group), serialised
// against every other replay of any of them, on any broker (SPEC.md §13):
//
//  1. in one transaction, it takes a transaction-scoped advisory lock per id
//     (sql/dlq_replay_lock.sql; it waits while another replay holds one, as
//     long as ctx allows, whatever the pool's lock_timeout), then reads those
//     dead letters that still exist (a fresh snapshot, after the wait, so a
//     letter the other replay removed is absent);
//  2. it calls replay with them, by id (none: replay still runs, with nil),
//     which pushes them back and returns the ids to remove;
//  3. it deletes those ids and commits, releasing the locks.
//
// So two replays of one dead letter never both push it: the second waits
// for the first and then finds it removed (or, when the first did not
// push it, replays it itself). ctx bounds the whole transaction, replay's
// push included; replay must not use this transaction (it pushes through
// other sessions) and should bound its push to leave time for the delete.
//
// removed lists the ids deleted. err is queen.ErrUnavailable (or
// ErrTimeout when ctx ended) when the database failed: before replay was
// called nothing was pushed; after it, the pushes stand and the dead
// letters stay (a later replay answers duplicate).
func (s *Store) ReplayDeadLetters(ctx context.Context, queueName, group string, ids []int64,
	replay func(letters []queen.DeadLetter) (remove []int64)) (removed []int64, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after the commit
	b := &pgx.Batch{}
	b.Queue(sqlDLQReplayWait)
	b.Queue(sqlDLQReplayLock, ids)
	b.Queue(sqlDLQByID, queueName, group, ids)
	br := tx.SendBatch(ctx, b)
	var letters []queen.DeadLetter
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var total int64
			letters, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (queen.DeadLetter, error) { return scanDeadLetter(r, &total) })
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, unavailable(err)
	}
	remove := replay(letters)
	if len(remove) > 0 {
		rows, err := tx.Query(ctx, sqlDLQDelete, remove)
		if err != nil {
			return nil, unavailable(err)
		}
		if removed, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return nil, unavailable(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, unavailable(err)
	}
	return removed, nil
}
