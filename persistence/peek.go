package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

var (
	sqlPeekMessages          = q("peek_messages")
	sqlQueueDetailPartitions = q("queue_detail_partitions")
	sqlQueueDetailCursors    = q("queue_detail_cursors")
)

// Peek returns the stored messages of partition p.Partition of queue
// p.Queue with offsets above p.After, in offset order, at most p.Limit (see
// sql/peek_messages.sql). It reads only: no row lock, no lease, no cursor
// moved, so consumers see every message afterwards as before.
//
// Errors: queen.ErrNotFound when the queue or the partition does not exist;
// queen.ErrUnavailable (or ErrTimeout) when the database does not answer.
func (s *Store) Peek(ctx context.Context, p queen.PeekQuery) (queen.PeekResult, error) {
	out := queen.PeekResult{Queue: p.Queue, Partition: p.Partition, Messages: []queen.PeekMessage{}}
	if p.Limit <= 0 {
		p.Limit = queen.DefaultPeekLimit
	}
	rows, err := s.pool.Query(ctx, sqlPeekMessages, p.Queue, p.Partition, p.After, int64(p.Limit))
	if err != nil {
		return out, unavailable(err)
	}
	defer rows.Close()
	found := false
	var pid pgtype.UUID
	for rows.Next() {
		var (
			last    *int64
			first   *int64
			created *time.Time
			ids     []byte
			frames  []byte
			sub     *string
		)
		if err := rows.Scan(&pid, &last, &first, &created, &ids, &frames, &sub); err != nil {
			return out, unavailable(err)
		}
		found = true
		if last != nil {
			out.LastOffset = *last
		}
		if first == nil || created == nil {
			continue
		}
		fs, err := UnpackFrames(SegmentIDs{Stored: ids, Partition: uuid.UUID(pid.Bytes), First: *first, At: *created}, frames)
		if err != nil {
			return out, fmt.Errorf("%w: queue %q partition %q segment at offset %d", err, p.Queue, p.Partition, *first)
		}
		for i := range fs {
			off := *first + int64(i)
			if off <= p.After || len(out.Messages) >= p.Limit {
				continue
			}
			data := fs[i].Payload
			if len(data) == 0 {
				data = []byte("null") // not stored by a push (payloads default to {}), but valid JSON
			}
			out.Messages = append(out.Messages, queen.PeekMessage{
				Partition: p.Partition, Offset: off, ID: fs[i].MessageID.String(), TransactionID: fs[i].TransactionID,
				TraceID: fs[i].TraceID, CreatedAt: created.UTC(), Data: data, ProducerSub: producerSub(sub),
			})
		}
	}
	if err := rows.Err(); err != nil {
		return out, unavailable(err)
	}
	if !found {
		return out, queen.ErrNotFound.With("queue %q does not exist", p.Queue)
	}
	if !pid.Valid {
		return out, queen.ErrNotFound.With("queue %q has no partition %q", p.Queue, p.Partition)
	}
	out.PartitionID = uuid.UUID(pid.Bytes).String()
	return out, nil
}

// QueueDetail returns queue queueName's partitions (by name, at most
// queen.MaxDetailPartitions) and its consumer groups' cursors with their
// lag (at most queen.MaxDetailCursors), read in one read-only snapshot.
//
// Errors: queen.ErrNotFound when the queue does not exist;
// queen.ErrUnavailable (or ErrTimeout) when the database does not answer.
func (s *Store) QueueDetail(ctx context.Context, queueName string) (queen.QueueDetail, error) {
	out := queen.QueueDetail{Queue: queueName, Partitions: []queen.PartitionDetail{}, ConsumerGroups: []queen.GroupDetail{}}
	exists := false
	var cursors int64
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ")
	b.Queue(sqlGetQueue, queueName).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			exists = true
		}
		return rows.Err()
	})
	b.Queue(sqlQueueDetailPartitions, queueName, queen.MaxDetailPartitions).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p queen.PartitionDetail
			var id uuid.UUID
			if err := rows.Scan(&p.Name, &id, &p.LastOffset, &p.CreatedAt, &out.PartitionCount); err != nil {
				return err
			}
			p.ID = id.String()
			out.Partitions = append(out.Partitions, p)
		}
		return rows.Err()
	})
	b.Queue(sqlQueueDetailCursors, queueName, queen.MaxDetailCursors).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var group string
			var c queen.GroupCursor
			if err := rows.Scan(&group, &c.Partition, &c.Cursor, &c.LastOffset, &c.LeaseExpiresAt, &cursors); err != nil {
				return err
			}
			c.Lag = max(c.LastOffset-c.Cursor, 0)
			n := len(out.ConsumerGroups)
			if n == 0 || out.ConsumerGroups[n-1].ConsumerGroup != group {
				out.ConsumerGroups = append(out.ConsumerGroups, queen.GroupDetail{ConsumerGroup: group})
				n++
			}
			g := &out.ConsumerGroups[n-1]
			g.Cursors = append(g.Cursors, c)
			g.Lag += c.Lag
		}
		return rows.Err()
	})
	b.Queue("COMMIT")
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		var qe *queen.Error
		if errors.As(err, &qe) {
			return out, err
		}
		return out, unavailable(err)
	}
	if !exists {
		return out, queen.ErrNotFound.With("queue %q does not exist", queueName)
	}
	out.Truncated = out.PartitionCount > int64(len(out.Partitions)) || cursors > queen.MaxDetailCursors
	return out, nil
}
