// What a bundle writes once its verdicts are known: offsets assigned
// (assign), the segments copied, the level-0 sidecar rows and the
// allocators' bump (bundleRows, bundle_insert.sql, bundle_bump.sql).

package persistence

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// bundleRows is a bundle's or a transaction's writes, stamped st: per
// partition written (its allocator's bump, bundle_bump's parallel arrays:
// the end its offsets follow and its new end), per segment (one per run of
// queued items with the same producer in a partition, newSegment; the rows
// of copySegments) and per frame (its sidecar row, bundle_insert's parallel
// arrays); written lists the batches (indexes into bs) that have a segment;
// want the segments holding originals to compare payloads with, whose
// frames fill originals after the commit.
type bundleRows struct {
	st                   stamp
	stamped              bool // st read with the locks, before the bump
	bumpPIDs             []pgtype.UUID
	bumpFrom, bumpTo     []int64
	segNums              []int64
	segFirst, segLast    []int64
	segFrames, segHashes [][]byte
	segRetained          []bool
	segProducers         []string
	rowPIDs              []pgtype.UUID
	rowHashes            []pgtype.UUID
	rowOffsets           []int64
	rowSegments          []int64
	written              []int
	want                 map[segmentKey]struct{}
	originals            map[segmentKey][]byte
}

// reserve sizes the rows for about parts partitions (one segment each, the
// usual case) and items frames, so that gathering them does not grow the
// slices step by step: spread over many partitions, a bundle gathers about
// one segment per message, and the growing was most of the Go heap a
// commit allocated.
func (w *bundleRows) reserve(parts, items int) {
	w.bumpPIDs = make([]pgtype.UUID, 0, parts)
	w.bumpFrom, w.bumpTo = make([]int64, 0, parts), make([]int64, 0, parts)
	w.segNums, w.segFirst, w.segLast = make([]int64, 0, parts), make([]int64, 0, parts), make([]int64, 0, parts)
	w.segFrames, w.segHashes = make([][]byte, 0, parts), make([][]byte, 0, parts)
	w.segRetained, w.segProducers = make([]bool, 0, parts), make([]string, 0, parts)
	w.rowPIDs, w.rowHashes = make([]pgtype.UUID, 0, items), make([]pgtype.UUID, 0, items)
	w.rowOffsets, w.rowSegments = make([]int64, 0, items), make([]int64, 0, items)
	w.written = make([]int, 0, parts)
}

// addSegments adds partition pid's new segments (assign: consecutive
// offsets, at least one segment) to the rows, each with its frames' sidecar
// rows, and the partition's bump; num is the partition's number (bundle_lock
// or its actor), retained: its queue has retentionSeconds.
func (w *bundleRows) addSegments(pid [16]byte, num int64, segs []newSegment, retained bool) {
	w.bumpPIDs = append(w.bumpPIDs, pgUUID(pid))
	w.bumpFrom = append(w.bumpFrom, segs[0].first-1)
	w.bumpTo = append(w.bumpTo, segs[len(segs)-1].last)
	for _, sg := range segs {
		w.segNums = append(w.segNums, num)
		w.segFirst = append(w.segFirst, sg.first)
		w.segLast = append(w.segLast, sg.last)
		w.segFrames = append(w.segFrames, sg.frames)
		w.segHashes = append(w.segHashes, sg.hashes)
		w.segRetained = append(w.segRetained, retained)
		w.segProducers = append(w.segProducers, sg.producer)
		for j, k := range sg.keys {
			w.rowPIDs = append(w.rowPIDs, pgUUID(pid))
			w.rowHashes = append(w.rowHashes, pgUUID(k))
			w.rowOffsets = append(w.rowOffsets, sg.first+int64(j))
			w.rowSegments = append(w.rowSegments, sg.first)
		}
	}
}

// segmentColumns are the columns copySegments writes, in its rows' order.
// A segment stores no message ids (layout 3, migration 0022): readers
// derive them (messageID); legacy_ids keeps its default, an empty bytea. It
// names its partition by number (layout 4, migration 0025).
var segmentColumns = []string{"partition_num", "first_offset", "last_offset", "created_at", "frames", "hashes", "timed", "producer_sub"}

// copyer is what copySegments writes through: a pooled session or a
// transaction.
type copyer interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// copySegments writes the segments with COPY (one WAL record per page of
// rows, where an INSERT of the same rows writes one per row: about 45 B of
// WAL less per segment, most of a message's share when traffic is spread
// thin), stamped w.st.at; a segment of a queue with retentionSeconds goes
// to segments_timed when a range holds the stamp, else to segments_kept
// (bundle_stamp). Nothing is sent when there is no segment.
func (w *bundleRows) copySegments(ctx context.Context, c copyer) error {
	if len(w.segNums) == 0 {
		return nil
	}
	// One row buffer for every segment: COPY encodes a row before it asks
	// for the next.
	row := make([]any, len(segmentColumns))
	row[3] = w.st.at
	_, err := c.CopyFrom(ctx, pgx.Identifier{"queen", "segments"}, segmentColumns, pgx.CopyFromSlice(len(w.segNums), func(i int) ([]any, error) {
		row[0], row[1], row[2] = w.segNums[i], w.segFirst[i], w.segLast[i]
		row[4], row[5], row[6], row[7] = w.segFrames[i], w.segHashes[i], w.segRetained[i] && w.st.ranged, w.segProducers[i]
		return row, nil
	}))
	return err
}

// insertArgs are bundle_insert's arguments, $1 to $5.
func (w *bundleRows) insertArgs() []any {
	return []any{w.st.at, w.rowPIDs, w.rowHashes, w.rowOffsets, w.rowSegments}
}

// queueBump queues bundle_bump on pb: the allocators' bump, which takes
// the row locks the commit does not hold yet; *bumped gets the number of
// allocators bumped (fewer than w.bumpPIDs: a partition did not end where
// its offsets assumed).
func (w *bundleRows) queueBump(pb *pgx.Batch, bumped *int) {
	pb.Queue(sqlBundleBump, w.bumpPIDs, w.bumpFrom, w.bumpTo).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			*bumped++
		}
		return rows.Err()
	})
}

// bundleWrites assigns each locked partition's verdicts and offsets
// (assign: rules.Assign over the probe's hits) into outs and gathers the
// rows to write.
func (s *Store) bundleWrites(bs []*queen.PushBatch, outs []queen.PushOutcome, order []int, lk *bundleLocks) *bundleRows {
	w := &bundleRows{st: lk.stamp, stamped: lk.stamped, want: map[segmentKey]struct{}{}, originals: map[segmentKey][]byte{}}
	items := 0
	for _, i := range order {
		items += len(bs[i].Items)
	}
	w.reserve(len(order), items)
	for _, i := range order {
		b, out := bs[i], &outs[i]
		lp := lk.locked[b.PartitionID]
		out.Window = lp.window
		out.FullProbe = b.Watermark < 0
		out.PartitionNum = lp.num
		// Unless every row was locked first, the stamp is read at the bump:
		// the new messages' ids, which derive from it, are set then
		// (stampIDs).
		segs, clean := s.assign(b, lp.window, lp.last, lk.hits[b.PartitionID], lk.stamp.at, out)
		if lp.checkPayload {
			wantOriginals(b, out, lk.hits[b.PartitionID], w.want)
		}
		if clean == 0 {
			continue
		}
		w.written = append(w.written, i)
		w.addSegments(b.PartitionID, lp.num, segs, lp.retained)
	}
	return w
}

// newSegment is one segment a commit writes: a run of consecutive queued
// items of one batch with the same producer (queen.Item.ProducerSub), their
// frames (as segments.frames stores them) and hashes, and the
// producer, stored once per segment (segments.producer_sub, "" for none).
type newSegment struct {
	first, last    int64
	frames, hashes []byte
	keys           [][16]byte
	producer       string
}

// assign gives verdicts under the lock (rules.Assign: leaders found by the
// probe are duplicates of the original, clean leaders get consecutive
// offsets after last in item order, followers echo their leader; with
// window 0 every item is clean) and packs the clean items' frames and
// hashes for the insert, the frames as segments.frames stores them
// (packSegment: compressed when that saves bytes). A queued item's message
// id is derived from its partition, offset and the commit's stamp at
// (messageID), as every reader derives it: segments store none. A zero at
// (the stamp not read yet: it is read at the bump) leaves the ids nil for
// stampIDs to set.
//
// A segment stores one producer, so the clean items are split into
// segments at each change of producer, in offset order: one segment when
// they share it (always with JWT off, and for the items of one request),
// one per run when the actor fused requests of different producers into
// this commit. The segments are consecutive offset ranges of the
// partition, like those of consecutive commits: readers see nothing
// different.
func (s *Store) assign(b *queen.PushBatch, window, last int64, hits map[queen.Hash]hit, at time.Time, out *queen.PushOutcome) (segs []newSegment, clean int) {
	clean = rules.Assign(out.Results, b.Items, b.LeaderOf, b.PartitionID, window, last, func(h queen.Hash) (rules.Original, bool) {
		x, ok := hits[h]
		return rules.Original{Offset: x.offset, MessageID: x.id}, ok
	}, func(off int64) uuid.UUID {
		if at.IsZero() {
			return uuid.Nil
		}
		return messageID(b.PartitionID, off, at)
	})
	out.FirstOffset, out.LastOffset = last+1, last+int64(clean)
	packed := 0 // clean items placed so far
	for i, it := range b.Items {
		r := &out.Results[i]
		if r.Verdict != queen.Queued {
			continue
		}
		if len(segs) == 0 || segs[len(segs)-1].producer != it.ProducerSub {
			if len(segs) > 0 {
				sg := &segs[len(segs)-1]
				sg.frames = packSegment(sg.frames)
			}
			n := clean - packed
			segs = append(segs, newSegment{first: r.Offset, producer: it.ProducerSub,
				frames: make([]byte, 0, 64*n), hashes: make([]byte, 0, 16*n), keys: make([][16]byte, 0, n)})
		}
		sg := &segs[len(segs)-1]
		sg.last = r.Offset
		sg.frames = AppendFrame(sg.frames, it.TransactionID, it.TraceID, it.Payload)
		sg.hashes = append(sg.hashes, it.Hash[:]...)
		sg.keys = append(sg.keys, it.Hash)
		packed++
	}
	if len(segs) > 0 {
		sg := &segs[len(segs)-1]
		sg.frames = packSegment(sg.frames)
	}
	return segs, clean
}

// bumpFirst bumps the allocators (bundle_bump, which takes the row locks of
// the partitions not locked yet) and reads the stamp (bundle_stamp), in one
// round trip, before anything else of the bundle is written. A partition
// that did not end where its offsets assumed, had no allocator row, or
// deadlocked with another writer rolls the transaction back: errEndMoved.
func (s *Store) bumpFirst(ctx context.Context, conn *session, w *bundleRows) error {
	start := time.Now()
	pb := &pgx.Batch{}
	bumped := 0
	w.queueBump(pb, &bumped)
	// Read after the bump: every write of the commit is stamped under all of
	// its row locks (SPEC.md §2).
	queueStamp(pb, &w.st)
	if err := conn.SendBatch(ctx, pb).Close(); err != nil {
		if deadlocked(err) {
			// Known partitions locked at the bump, in the order of its plan,
			// against another writer's: run again with every lock first.
			rollback(conn)
			s.observe(LockEvent{Op: "push", Moved: true})
			return errEndMoved
		}
		return s.notWritten(conn, err, start)
	}
	if bumped != len(w.bumpPIDs) {
		// A known partition moved, or lost its allocator row: nothing is
		// written yet.
		rollback(conn)
		s.observe(LockEvent{Op: "push", Moved: true})
		return errEndMoved
	}
	return nil
}

// stampIDs sets the message ids of b's new messages (out's offsets
// FirstOffset to LastOffset: the queued items and the duplicates that
// follow one of them), derived from their partition, offset and the
// commit's stamp at (messageID), once the stamp is read.
func stampIDs(b *queen.PushBatch, out *queen.PushOutcome, at time.Time) {
	for i := range out.Results {
		if r := &out.Results[i]; r.Offset >= out.FirstOffset && r.Offset <= out.LastOffset {
			r.MessageID = messageID(b.PartitionID, r.Offset, at)
		}
	}
}
