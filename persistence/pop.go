package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

// PopPartition pops up to spec.Batch messages of one partition for a
// consumer group (SPEC.md §4), in one transaction under the group's consumer
// row lock: from just above the cursor, only messages stored at least
// delayedProcessing seconds ago, and only once the partition's newest message
// is windowBuffer seconds old. Without AutoAck the returned span is leased
// for the queue's leaseTime; with it the cursor moves past the span. An
// expired lease's unacked rest is delivered again (see expireLease): a
// single unacked message counts one failed delivery first, several are
// bisected, so the delivery holds fewer than spec.Batch until the expired
// range is passed (rules.Bisection). On an error the transaction is rolled
// back and the result is empty, queen.PopBusy.
func (s *Store) PopPartition(ctx context.Context, spec queen.PopSpec) (queen.PopResult, queen.PopState, error) {
	var res queen.PopResult
	var state queen.PopState
	var settled queen.LeaseStats
	var err error
	for try := 0; ; try++ {
		err = s.inSession(ctx, func(conn *session) error {
			var err error
			settled = queen.LeaseStats{} // a retried attempt settles afresh
			res, state, err = popTx(ctx, conn, spec, &settled, s.known)
			if err != nil {
				rollback(conn)
			}
			return err
		})
		if !errors.Is(err, errStaleKnown) || try >= staleRetries {
			break
		}
	}
	if err != nil {
		err = unavailable(err)
		return queen.PopResult{}, queen.PopBusy, err
	}
	s.leases.add(settled)
	return res, state, nil
}

// popTx runs PopPartition's transaction on tx: claim the consumer row and
// read the span above its cursor (claimSpan), build the messages that fit
// (spanMessages, at most what the row's bisection allows), then move the
// cursor (autoAck) or take the lease, and commit. What it settled of
// expired leases and bisections is added to *settled once committed. On an
// error the caller rolls back. A committed pop that found its consumer row
// adds it to known (nil: none).
func popTx(ctx context.Context, tx querier, spec queen.PopSpec, settled *queen.LeaseStats, known *knownRows) (_ queen.PopResult, _ queen.PopState, err error) {
	st, found, segs, err := claimSpan(ctx, tx, spec, known)
	if err != nil {
		return queen.PopResult{}, queen.PopBusy, err
	}
	defer func() {
		if found && err == nil {
			known.add(ackKey{spec.PartitionID, spec.Group})
		}
	}()
	if !found || st.live {
		return queen.PopResult{}, queen.PopBusy, commitPop(ctx, tx, nil)
	}
	limit, stall, changed := st.bisect.Deliver(st.cursor, spec.Batch, st.now)
	if changed && !st.bisect.Active {
		st.leases.Stalls++
		st.leases.StallSeconds += stall.Seconds()
	}
	spec.Batch = limit
	// A pop that delivers nothing still stores a bisection it changed (one
	// that ended above all): the row holds no lease here (claimSpan
	// released an expired one).
	idle := func(state queen.PopState) (queen.PopResult, queen.PopState, error) {
		var write func(b *pgx.Batch)
		if changed {
			counts, bisect, err := rowState(&st)
			if err != nil {
				return queen.PopResult{}, queen.PopBusy, err
			}
			write = func(b *pgx.Batch) {
				b.Queue(sqlConsumeUpdate, spec.PartitionID, spec.Group, st.cursor, nil, nil, nil, counts, bisect)
			}
		}
		if err := commitPop(ctx, tx, write); err != nil {
			return queen.PopResult{}, queen.PopBusy, err
		}
		settled.Add(st.leases)
		return queen.PopResult{}, state, nil
	}
	if st.cursor >= st.lastOffset {
		return idle(queen.PopEmpty)
	}
	res, last, err := spanMessages(spec, &st, segs)
	if err != nil {
		return queen.PopResult{}, queen.PopBusy, err
	}
	if len(res.Messages) == 0 {
		return idle(queen.PopNotYet)
	}
	if spec.AutoAck {
		err = moveCursor(ctx, tx, spec, &st, last)
	} else {
		err = takeLease(ctx, tx, spec, &st, last, &res)
	}
	if err == nil {
		settled.Add(st.leases)
	}
	return res, queen.PopDelivered, err
}

// popSegment is one segment read for a pop: its first offset, when it was
// stored, its packed message ids and frames (UnpackFrames), and its
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

// readSegments returns a consume_segments row reader that appends to *segs.
func readSegments(segs *[]popSegment) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var sg popSegment
			var last int64
			if err := rows.Scan(&sg.first, &last, &sg.created, &sg.ids, &sg.frames, &sg.producer); err != nil {
				return err
			}
			sg.producer = producerSub(sg.producer)
			*segs = append(*segs, sg)
		}
		return rows.Err()
	}
}

// rowWrites gathers writes of consumer rows of one group, each as
// consume_update writes it, for one consume_update_many statement.
type rowWrites struct {
	pids    []uuid.UUID
	cursors []int64
	leases  []pgtype.UUID
	secs    []*float64
	leaseTo []*int64
	counts  [][]byte
	bisects [][]byte
}

// add gathers the write of pid's row: consume_update's $3..$8 (lease
// uuid.Nil releases the lease; secs nil keeps the expiry).
func (w *rowWrites) add(pid uuid.UUID, cursor int64, lease uuid.UUID, secs *float64, leaseTo *int64, counts, bisect []byte) {
	w.pids = append(w.pids, pid)
	w.cursors = append(w.cursors, cursor)
	w.leases = append(w.leases, pgtype.UUID{Bytes: lease, Valid: lease != uuid.Nil})
	w.secs = append(w.secs, secs)
	w.leaseTo = append(w.leaseTo, leaseTo)
	w.counts = append(w.counts, counts)
	w.bisects = append(w.bisects, bisect)
}

// queue queues the gathered writes on b as one consume_update_many (none
// when nothing was gathered); expires, when not nil, receives the earliest
// lease expiry written (nil when no row holds a lease).
func (w *rowWrites) queue(b *pgx.Batch, group string, expires **time.Time) {
	if len(w.pids) == 0 {
		return
	}
	b.Queue(sqlConsumeUpdateMany, w.pids, group, w.cursors, w.leases, w.secs, w.leaseTo, w.counts, w.bisects).Query(func(rows pgx.Rows) error {
		n := 0
		for rows.Next() {
			var i int64
			var at *time.Time
			if err := rows.Scan(&i, &at); err != nil {
				return err
			}
			n++
			if expires != nil && at != nil && (*expires == nil || at.Before(**expires)) {
				*expires = at
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(w.pids) {
			return fmt.Errorf("persistence: consume_update_many wrote %d of %d consumer rows", n, len(w.pids))
		}
		return nil
	})
}

// groupWrites gathers consumer row writes per consumer group (an ack's
// rows may belong to several), each group's for one consume_update_many.
type groupWrites struct {
	groups []string
	by     map[string]*rowWrites
}

// add gathers the write of (pid, group)'s row (see rowWrites.add).
func (g *groupWrites) add(group string, pid uuid.UUID, cursor int64, lease uuid.UUID, secs *float64, leaseTo *int64, counts, bisect []byte) {
	if g.by == nil {
		g.by = map[string]*rowWrites{}
	}
	w := g.by[group]
	if w == nil {
		w = &rowWrites{}
		g.by[group] = w
		g.groups = append(g.groups, group)
	}
	w.add(pid, cursor, lease, secs, leaseTo, counts, bisect)
}

// queue queues one consume_update_many per group gathered on b.
func (g *groupWrites) queue(b *pgx.Batch) {
	for _, group := range g.groups {
		g.by[group].queue(b, group, nil)
	}
}

// readSegmentsMany returns a consume_segments_many row reader that appends
// each row to segs[position-1].
func readSegmentsMany(segs [][]popSegment) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var i, last int64
			var sg popSegment
			if err := rows.Scan(&i, &sg.first, &last, &sg.created, &sg.ids, &sg.frames, &sg.producer); err != nil {
				return err
			}
			sg.producer = producerSub(sg.producer)
			if i < 1 || i > int64(len(segs)) {
				return fmt.Errorf("persistence: consume_segments_many returned position %d of %d", i, len(segs))
			}
			segs[i-1] = append(segs[i-1], sg)
		}
		return rows.Err()
	}
}

// claimSpan begins the pop's transaction and, in one round trip, creates
// (partition, group)'s consumer row on first use, locks it (skipping it
// when another request holds it and spec.SkipLocked) and reads the segments
// to deliver (the statement sees the locked row). found is false when the
// lock was skipped. An expired lease is settled first (expireLease): the row
// is written and the segments read again from its cursor, in this
// transaction. A row in known is not created (see knownRows): found
// missing, it is dropped from known, and without spec.SkipLocked the call
// fails with errStaleKnown (the caller rolls back and runs it again).
func claimSpan(ctx context.Context, tx querier, spec queen.PopSpec, known *knownRows) (st consumerState, found bool, segs []popSegment, err error) {
	key := ackKey{spec.PartitionID, spec.Group}
	skipped := known.has(key)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if !skipped {
		ensureConsumer(b, spec.PartitionID, spec.Group, true, spec.SubscriptionFrom, spec.SubscriptionNew)
	}
	lockOnly(b, spec.PartitionID, spec.Group, spec.SkipLocked, &st, &found)
	b.Queue(sqlConsumeSegments, spec.PartitionID, spec.Group, spec.Batch).Query(readSegments(&segs))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return st, false, nil, unavailable(err)
	}
	if skipped && !found {
		known.drop(key)
		if !spec.SkipLocked {
			return st, false, nil, errStaleKnown
		}
	}
	if !found || st.live {
		return st, found, segs, nil
	}
	expired, err := expireLease(ctx, tx, ackKey{spec.PartitionID, spec.Group}, &st)
	if err != nil || !expired {
		return st, found, segs, err
	}
	counts, bisect, err := rowState(&st)
	if err != nil {
		return st, found, nil, err
	}
	segs = segs[:0]
	b = &pgx.Batch{}
	b.Queue(sqlConsumeUpdate, spec.PartitionID, spec.Group, st.cursor, nil, nil, nil, counts, bisect)
	b.Queue(sqlConsumeSegments, spec.PartitionID, spec.Group, spec.Batch).Query(readSegments(&segs))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return st, found, nil, unavailable(err)
	}
	return st, found, segs, nil
}

// spanMessages builds the messages of segs above st's cursor, in offset
// order: at most spec.Batch, and within spec.MaxBytes (each message counted
// as its payload plus queen.PopMessageOverhead; the first always fits unless
// spec.BytesStrict), the rest left unleased for the next pop. The reply's
// queue, partition and group are set when it holds any message; last is
// the offset of its last message. It reads no database.
func spanMessages(spec queen.PopSpec, st *consumerState, segs []popSegment) (res queen.PopResult, last int64, err error) {
	pidText := spec.PartitionID.String()
	maxBytes, size := spec.MaxBytes, 0
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
	full := false
	for _, sg := range segs {
		producer := 0 // the producer's bytes in each message (a token's sub may be long)
		if sg.producer != nil {
			producer = len(*sg.producer)
		}
		fs, err := UnpackFrames(sg.ids, sg.frames)
		if err != nil {
			return queen.PopResult{}, 0, fmt.Errorf("%w: partition %s segment at offset %d", err, spec.PartitionID, sg.first)
		}
		for i := range fs {
			off := sg.first + int64(i)
			if off <= st.cursor || full || len(res.Messages) >= spec.Batch {
				continue
			}
			if size += len(fs[i].Payload) + producer + queen.PopMessageOverhead; size > maxBytes && (len(res.Messages) > 0 || spec.BytesStrict) {
				full = true // the rest stays unleased for the next pop
				continue
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
	}
	return res, last, nil
}

// moveCursor acknowledges an autoAck pop's span: the cursor moves to last,
// the failure counts at or below it go, and the transaction commits.
func moveCursor(ctx context.Context, tx querier, spec queen.PopSpec, st *consumerState, last int64) error {
	for off := range st.failCounts {
		if off <= last {
			delete(st.failCounts, off)
		}
	}
	counts, bisect, err := rowState(st)
	if err != nil {
		return err
	}
	return commitPop(ctx, tx, func(b *pgx.Batch) {
		b.Queue(sqlConsumeUpdate, spec.PartitionID, spec.Group, last, nil, nil, nil, counts, bisect)
	})
}

// takeLease leases the span up to last for the queue's leaseTime under
// spec.LeaseID (a new UUIDv7 when nil), commits, and writes the lease id
// and its expiry into res and its messages.
func takeLease(ctx context.Context, tx querier, spec queen.PopSpec, st *consumerState, last int64, res *queen.PopResult) error {
	counts, bisect, err := rowState(st)
	if err != nil {
		return err
	}
	lease := spec.LeaseID
	if lease == uuid.Nil {
		if lease, err = uuid.NewV7(); err != nil {
			return err
		}
	}
	var expires *time.Time
	if err := commitPop(ctx, tx, func(b *pgx.Batch) {
		b.Queue(sqlConsumeUpdate, spec.PartitionID, spec.Group, st.cursor, lease, float64(st.leaseTime), last, counts, bisect).
			QueryRow(func(row pgx.Row) error { return row.Scan(&expires) })
	}); err != nil {
		return err
	}
	ls := lease.String()
	res.LeaseID, res.LeaseExpiresAt = &ls, expires
	for i := range res.Messages {
		res.Messages[i].LeaseID = &ls
	}
	return nil
}

// commitPop sends the statements extra queues (when not nil) and COMMIT in
// one round trip.
func commitPop(ctx context.Context, tx querier, extra func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	if extra != nil {
		extra(b)
	}
	b.Queue("COMMIT")
	willCommit(tx)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered an error: the transaction rolled back.
			notCommitted(tx)
		}
		return unavailable(err)
	}
	return nil
}
