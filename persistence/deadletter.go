package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	queen "github.com/queen-mq/queen-go"
)

// deadLetter copies the frame at offset off of partition k.pid to the DLQ.
func deadLetter(ctx context.Context, tx querier, k ackKey, off int64, errText string, attempts int32) error {
	var first int64
	var created time.Time
	var ids, frames []byte
	var producer *string
	err := tx.QueryRow(ctx, sqlConsumeSegmentAt, k.pid, off).Scan(&first, &created, &ids, &frames, &producer)
	if errors.Is(err, pgx.ErrNoRows) {
		return queen.ErrNotFound.With("the message at offset %d of partition %s is gone (retention); it cannot be dead-lettered", off, k.pid)
	}
	if err != nil {
		return unavailable(err)
	}
	return deadLetterFrom(ctx, tx, k, off, first, created, ids, frames, producer, errText, attempts)
}

// deadLetterFrom copies the frame at offset off, held by the segment that
// starts at first (its created_at, message ids and frames as stored, and its
// producer as stored), to the DLQ. The dead letter stores that one frame
// raw (packed as in a segment, never compressed: one frame does not
// compress) and the segment's producer.
func deadLetterFrom(ctx context.Context, tx querier, k ackKey, off, first int64, created time.Time, ids, frames []byte, producer *string, errText string, attempts int32) error {
	fs, err := UnpackFrames(SegmentIDs{Stored: ids, Partition: k.pid, First: first, At: created}, frames)
	if err != nil || off < first || off-first >= int64(len(fs)) {
		return fmt.Errorf("%w: partition %s segment at offset %d", ErrCorruptSegment, k.pid, first)
	}
	f := fs[off-first]
	frame := AppendFrame(nil, f.TransactionID, f.TraceID, f.Payload)
	if _, err := tx.Exec(ctx, sqlConsumeDeadLetter, k.pid, k.group, off, f.MessageID, frame, created, errText, attempts, producerSub(producer)); err != nil {
		return unavailable(err)
	}
	return nil
}
