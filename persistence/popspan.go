package persistence

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	queen "github.com/queen-mq/queen-go"
)

// popSegment is one segment read for a pop: its first offset, when it was
// stored, its stored message ids (empty: derived, SegmentIDs) and packed
// frames (UnpackFrames), and its
// messages' producer (nil: none).
type popSegment struct {
	first    int64
	created  time.Time
	ids      []byte
	frames   []byte
	producer *string
}

// producerSub is a stored producer (segments.producer_sub, empty or NULL for
// none, migration 0018) as messages carry it: nil for none.
func producerSub(stored *string) *string {
	if stored == nil || *stored == "" {
		return nil
	}
	return stored
}

// readSegmentsMany returns a consume_segments_many row reader that appends
// each row to segs[at[position-1]] (at: the index in segs of each element
// the statement was given).
func readSegmentsMany(segs [][]popSegment, at []int) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var i, last int64
			var sg popSegment
			if err := rows.Scan(&i, &sg.first, &last, &sg.created, &sg.ids, &sg.frames, &sg.producer); err != nil {
				return err
			}
			sg.producer = producerSub(sg.producer)
			if i < 1 || i > int64(len(at)) {
				return fmt.Errorf("persistence: consume_segments_many returned position %d of %d", i, len(at))
			}
			segs[at[i-1]] = append(segs[at[i-1]], sg)
		}
		return rows.Err()
	}
}

// spanMessages builds the messages of segs above st's cursor, in offset
// order: at most spec.Batch, and within spec.MaxBytes (each message counted
// as queen.PopMessageBytes; the first always fits unless
// spec.BytesStrict), the rest left unleased for the next pop. The reply's
// queue, partition and group are set when it holds any message; last is
// the offset of its last message. cut says a span it returned was cut
// short (queen.PopCut): a message of segs above the cursor was left out,
// or the batch is full and st's partition ends above last. It reads no
// database.
func spanMessages(spec queen.PopSpec, st *consumerState, segs []popSegment) (res queen.PopResult, last int64, cut bool, err error) {
	pidText := spec.PartitionID.String()
	maxBytes, size := spec.MaxBytes, 0
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
segments:
	for _, sg := range segs {
		fs, err := UnpackFrames(SegmentIDs{Stored: sg.ids, Partition: spec.PartitionID, First: sg.first, At: sg.created}, sg.frames)
		if err != nil {
			return queen.PopResult{}, 0, false, fmt.Errorf("%w: partition %s segment at offset %d", err, spec.PartitionID, sg.first)
		}
		for i := range fs {
			off := sg.first + int64(i)
			if off <= st.cursor {
				continue
			}
			// The batch or the bytes end here: the rest stays unleased
			// for the next pop, and the segments after it are not unpacked.
			if len(res.Messages) >= spec.Batch {
				cut = true
				break segments
			}
			if size += queen.PopMessageBytes(len(fs[i].Payload), sg.producer); size > maxBytes && (len(res.Messages) > 0 || spec.BytesStrict) {
				cut = true
				break segments
			}
			m := queen.Message{
				ID: fs[i].MessageID.String(), TransactionID: fs[i].TransactionID, TraceID: fs[i].TraceID,
				Data: fs[i].Payload, CreatedAt: sg.created, PartitionID: pidText, Partition: st.partition,
				Queue: st.queue, Offset: off, ConsumerGroup: spec.Group, ProducerSub: sg.producer,
			}
			m.RetryCount = int(st.failCounts[off])
			res.Messages = append(res.Messages, m)
			last = off
		}
	}
	if len(res.Messages) > 0 {
		res.Queue, res.Partition, res.PartitionID, res.ConsumerGroup = st.queue, st.partition, pidText, spec.Group
		// consume_segments_many reads no more segments than fill the
		// batch, so a batch that ended at the last message read may still
		// have stored messages after it.
		cut = cut || (len(res.Messages) >= spec.Batch && last < st.lastOffset)
		return res, last, cut, nil
	}
	return res, last, false, nil
}
