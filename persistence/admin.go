package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	queen "github.com/queen-mq/queen-go"
)

var (
	sqlAdminDeadLetters = q("admin_dead_letters")
	sqlAdminDeleteQueue = q("admin_delete_queue")
	sqlAdminListQueues  = q("admin_list_queues")
	sqlAdminDeleteGroup = q("admin_delete_group")
	sqlAdminSeek        = q("admin_seek")
)

// DeadLetters lists the dead letters f selects, oldest first, at most
// f.Limit from row f.Offset and no more once they hold f.MaxBytes bytes of
// frames and error texts (queen.MaxDLQReplyBytes when <= 0; the first is
// always listed), and the filter's total.
func (s *Store) DeadLetters(ctx context.Context, f queen.DLQFilter) ([]queen.DeadLetter, int64, error) {
	budget := int64(f.MaxBytes)
	if budget <= 0 {
		budget = queen.MaxDLQReplyBytes
	}
	rows, err := s.pool.Query(ctx, sqlAdminDeadLetters, f.Queue, f.ConsumerGroup, f.Limit, f.Offset, f.Partition, f.From, f.To, budget)
	if err != nil {
		return nil, 0, unavailable(err)
	}
	var total int64
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queen.DeadLetter, error) { return scanDeadLetter(r, &total) })
	if err != nil {
		return nil, 0, unavailable(err)
	}
	if len(out) == 0 {
		out = []queen.DeadLetter{}
		if f.Offset > 0 {
			// A page past the end reads no row to carry the filter's
			// total: the first page's does.
			first := f
			first.Offset, first.Limit, first.MaxBytes = 0, 1, 1
			if _, total, err = s.DeadLetters(ctx, first); err != nil {
				return nil, 0, err
			}
		}
	}
	return out, total, nil
}

// scanDeadLetter reads one row of admin_dead_letters (or dlq_by_id) and
// decodes its frame; the row's last column, the filter's count, goes to total.
func scanDeadLetter(r pgx.CollectableRow, total *int64) (queen.DeadLetter, error) {
	var d queen.DeadLetter
	var pid, mid uuid.UUID
	var frame []byte
	if err := r.Scan(&d.ID, &d.Queue, &d.Partition, &pid, &d.ConsumerGroup, &d.Offset, &mid, &frame,
		&d.CreatedAt, &d.Error, &d.Attempts, &d.DeadAt, &d.ProducerSub, total); err != nil {
		return d, err
	}
	fs, err := UnpackFrames(StoredIDs(mid[:]), frame)
	if err != nil || len(fs) != 1 {
		return d, fmt.Errorf("%w: dead letter %d", ErrCorruptSegment, d.ID)
	}
	d.PartitionID, d.MessageID = pid.String(), mid.String()
	d.TransactionID, d.TraceID, d.Data = fs[0].TransactionID, fs[0].TraceID, fs[0].Payload
	d.ErrorMessage, d.RetryCount = d.Error, max(d.Attempts-1, 0) // retries: deliveries after the first
	d.ProducerSub = producerSub(d.ProducerSub)
	return d, nil
}

// DeleteQueue removes a queue with its partitions, segments, sidecar rows,
// cursors, subscriptions and dead letters, in one transaction. existed is
// false when there was no such queue (not an error).
func (s *Store) DeleteQueue(ctx context.Context, queueName string) (existed bool, partitions int64, err error) {
	// Two statements in one transaction: the locks, then the deletes with
	// a snapshot taken once the pushes in flight have committed
	// (admin_delete_queue_lock).
	var id *int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked, ends int64
		if err := tx.QueryRow(ctx, sqlAdminDeleteQueueLock, queueName).Scan(&id, &locked, &ends); err != nil || id == nil {
			return err
		}
		var gone int64
		return tx.QueryRow(ctx, sqlAdminDeleteQueue, queueName).Scan(&gone, &partitions)
	})
	s.known.reset() // its consumer rows are gone (or may be)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && id == nil) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, unavailable(err)
	}
	return true, partitions, nil
}

// ListQueues lists every queue by name, with its effective options.
func (s *Store) ListQueues(ctx context.Context) ([]queen.QueueSummary, error) {
	rows, err := s.pool.Query(ctx, sqlAdminListQueues)
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queen.QueueSummary, error) {
		var q queen.QueueSummary
		var opts []byte
		if err := r.Scan(&q.Name, &q.Namespace, &q.Task, &q.CreatedAt, &q.Partitions, &q.Messages, &q.Depth, &opts); err != nil {
			return q, err
		}
		return q, json.Unmarshal(opts, &q.Options)
	})
	if err != nil {
		return nil, unavailable(err)
	}
	if out == nil {
		out = []queen.QueueSummary{}
	}
	return out, nil
}

// DeleteGroup drops a consumer group's cursors, leases and subscriptions in
// every queue and returns how many consumer rows it removed.
func (s *Store) DeleteGroup(ctx context.Context, group string) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, sqlAdminDeleteGroup, group).Scan(&n)
	s.known.reset() // its consumer rows are gone (or may be)
	return n, unavailable(err)
}

// Seek moves group's cursors in every partition of queueName (see
// queen.SeekRequest) and returns how many partitions it moved.
func (s *Store) Seek(ctx context.Context, queueName, group string, req queen.SeekRequest) (int, error) {
	if _, err := s.Queue(ctx, queueName); err != nil {
		return 0, err // queen.ErrNotFound for a queue that does not exist
	}
	var ts *time.Time
	if !req.ToEnd {
		ts = req.Timestamp
	}
	tag, err := s.pool.Exec(ctx, sqlAdminSeek, queueName, group, ts, req.ToBeginning)
	if err != nil {
		return 0, unavailable(err)
	}
	return int(tag.RowsAffected()), nil
}

var (
	sqlAdminGroupQueues     = q("admin_group_queues")
	sqlAdminSetSubscription = q("admin_set_subscription")
)

// SetSubscription moves consumer group's subscription point to ts in every
// queue it consumes: its cursors move to just below the first message stored
// at or after ts (queen.SeekRequest), and partitions it meets later start
// there too. It returns how many queues it touched.
func (s *Store) SetSubscription(ctx context.Context, group string, ts time.Time) (int, error) {
	rows, err := s.pool.Query(ctx, sqlAdminGroupQueues, group)
	if err != nil {
		return 0, unavailable(err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, unavailable(err)
	}
	if _, err := s.pool.Exec(ctx, sqlAdminSetSubscription, group, ts); err != nil {
		return 0, unavailable(err)
	}
	for _, q := range queues {
		if _, err := s.Seek(ctx, q, group, queen.SeekRequest{Timestamp: &ts}); err != nil {
			return 0, err
		}
	}
	return len(queues), nil
}

var sqlAdminQueuesByLabel = q("admin_queues_by_label")

// QueuesByLabel returns the names of the queues labelled namespace and task
// ("" = any), at most 1,000, by name.
func (s *Store) QueuesByLabel(ctx context.Context, namespace, task string) ([]string, error) {
	rows, err := s.pool.Query(ctx, sqlAdminQueuesByLabel, namespace, task)
	if err != nil {
		return nil, unavailable(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return names, unavailable(err)
}
