package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

var (
	sqlConsumeEnsure     = q("consume_ensure")
	sqlConsumeForget     = q("consume_forget")
	sqlConsumeHashAt     = q("consume_hash_at")
	sqlConsumeHashAtMany = q("consume_hash_at_many")
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

// LeaseExpiredError is the error text of a failed delivery counted for an
// expired lease, and of the dead letter it may cause (SPEC.md §4).
const LeaseExpiredError = "lease expired"

// PopState says why a partition pop returned what it returned.
type PopState int

// The pop states.
const (
	// PopDelivered: messages were returned.
	PopDelivered PopState = iota
	// PopEmpty: nothing above the group's cursor; the partition is drained
	// for the group until the next push.
	PopEmpty
	// PopBusy: a live lease of another consumer holds the partition for the
	// group, or another request is popping or acking it right now.
	PopBusy
	// PopNotYet: messages exist above the cursor but are not visible yet
	// (delayedProcessing, windowBuffer), or are all leased.
	PopNotYet
)

// PopSpec is one partition pop.
type PopSpec struct {
	PartitionID uuid.UUID
	Group       string
	// Batch is the most messages returned (>= 1).
	Batch   int
	AutoAck bool
	// SkipLocked makes a pop skip a consumer row another request holds
	// (wildcard pops) instead of waiting for it.
	SkipLocked bool
	// SubscriptionFrom / SubscriptionNew record the group's subscription of
	// the queue on its first pop (queen.PopRequest).
	SubscriptionFrom *time.Time
	SubscriptionNew  bool
	// LeaseID, when not uuid.Nil, is the lease id to take instead of a new
	// one: a multi-partition pop leases every partition it claims under one
	// id, so one extension renews them all (queen.PopRequest.Partitions).
	LeaseID uuid.UUID
	// MaxBytes bounds the bytes returned, each message counted as its
	// payload plus PopMessageOverhead (the first message is always
	// returned unless BytesStrict); <= 0 means queen.MaxPopReplyBytes. It
	// keeps a reply of large messages below the NATS max_payload (SPEC.md §11).
	MaxBytes int
	// BytesStrict makes MaxBytes bind the first message too (a
	// multi-partition pop's later claims): when it does not fit, nothing is
	// returned or leased (PopNotYet).
	BytesStrict bool
}

// PopMessageOverhead is what one message adds to a pop reply besides its
// payload (ids, names, offsets and keys), counted against PopSpec.MaxBytes.
const PopMessageOverhead = 512

// consumerState is a locked consumer row with what the consume paths need.
type consumerState struct {
	cursor       int64
	leaseID      pgtype.UUID
	live         bool
	leaseTo      *int64
	failCounts   map[int64]int32
	lastOffset   int64
	partition    string
	queue        string
	leaseTime    int64
	retryLimit   int64
	delayed      int64
	windowBuffer int64
	now          time.Time
	lockWait     float64 // seconds, read by ack_lock only
	// bisect is the row's poison isolation (SPEC.md §4); expireLease and
	// the pop change it, every write of the row stores it.
	bisect rules.Bisection
	// leases is what this transaction settled of expired leases and
	// bisections, counted in the Store's LeaseStats once it commits.
	leases LeaseStats
}

func (c *consumerState) scan(row pgx.Row) error { return c.scanRow(row, false) }

// scanRow reads consume_lock's columns, and with wait ack_lock's lock wait.
func (c *consumerState) scanRow(row pgx.Row, wait bool) error { return c.scanAfter(row, nil, wait) }

// scanAfter reads the columns pre (a many statement's position column),
// then consume_lock's, and with wait ack_lock's lock wait.
func (c *consumerState) scanAfter(row pgx.Row, pre []any, wait bool) error {
	var counts, bisect []byte
	dst := append(pre, &c.cursor, &c.leaseID, &c.live, &c.leaseTo, &counts,
		&c.lastOffset, &c.partition, &c.queue, &c.leaseTime, &c.retryLimit, &c.delayed, &c.windowBuffer, &c.now, &bisect)
	if wait {
		dst = append(dst, &c.lockWait)
	}
	if err := row.Scan(dst...); err != nil {
		return err
	}
	var m map[string]int32
	if err := json.Unmarshal(counts, &m); err != nil {
		return fmt.Errorf("persistence: consumer fail_counts: %w", err)
	}
	c.failCounts = make(map[int64]int32, len(m))
	for k, v := range m {
		off, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return fmt.Errorf("persistence: consumer fail_counts key %q: %w", k, err)
		}
		c.failCounts[off] = v
	}
	return decodeBisection(bisect, &c.bisect)
}

// storedBisection is rules.Bisection as the consumer row's bisect column
// stores it (a JSON object; the column is NULL when no bisection is active).
type storedBisection struct {
	To    int64     `json:"to"`
	Hot   int64     `json:"hot"`
	Size  int64     `json:"size"`
	Cap   int64     `json:"cap"`
	Mark  int64     `json:"mark"`
	Since time.Time `json:"since"`
}

// decodeBisection reads the bisect column (nil: none) into b.
func decodeBisection(col []byte, b *rules.Bisection) error {
	*b = rules.Bisection{}
	if col == nil {
		return nil
	}
	var sb storedBisection
	if err := json.Unmarshal(col, &sb); err != nil {
		return fmt.Errorf("persistence: consumer bisect: %w", err)
	}
	*b = rules.Bisection{Active: true, To: sb.To, Hot: sb.Hot, Size: sb.Size, Cap: sb.Cap, Mark: sb.Mark, Since: sb.Since}
	return nil
}

// encodeBisection writes b as the bisect column: nil (SQL NULL) when it is
// not active.
func encodeBisection(b rules.Bisection) ([]byte, error) {
	if !b.Active {
		return nil, nil
	}
	return json.Marshal(storedBisection{To: b.To, Hot: b.Hot, Size: b.Size, Cap: b.Cap, Mark: b.Mark, Since: b.Since})
}

// rowState encodes the failure counts and the bisection of st for
// consume_update ($7, $8).
func rowState(st *consumerState) (counts, bisect []byte, err error) {
	if counts, err = encodeCounts(st.failCounts); err != nil {
		return nil, nil, err
	}
	bisect, err = encodeBisection(st.bisect)
	return counts, bisect, err
}

// encodeCounts writes failure counts as the fail_counts jsonb object.
func encodeCounts(counts map[int64]int32) ([]byte, error) {
	m := make(map[string]int32, len(counts))
	for off, n := range counts {
		m[strconv.FormatInt(off, 10)] = n
	}
	return json.Marshal(m)
}

// lockConsumer queues, on b, the statements that create (partition, group)'s
// consumer row on first use and lock it; *found reports whether the lock
// statement returned the row.
func lockConsumer(b *pgx.Batch, pid uuid.UUID, group string, skipLocked, subscribe bool, from *time.Time, isNew bool, st *consumerState, found *bool) {
	ensureConsumer(b, pid, group, subscribe, from, isNew)
	lockOnly(b, pid, group, skipLocked, st, found)
}

// ensureConsumer queues the statement that creates (partition, group)'s
// consumer row on first use. Creating one takes a key-share lock on the
// partition row (the foreign key), so a call that creates several does it
// for all of them, in ascending order, before it locks any consumer row.
func ensureConsumer(b *pgx.Batch, pid uuid.UUID, group string, subscribe bool, from *time.Time, isNew bool) {
	b.Queue(sqlConsumeEnsure, pid, group, from, isNew, subscribe)
}

// lockOnly queues the consumer row lock (see lockConsumer): consume_lock,
// or with skipLocked consume_lock_skip, which finds no row when another
// request holds it.
func lockOnly(b *pgx.Batch, pid uuid.UUID, group string, skipLocked bool, st *consumerState, found *bool) {
	lock := sqlConsumeLock
	if skipLocked {
		lock = sqlConsumeLockSkip
	}
	b.Queue(lock, pid, group).QueryRow(func(row pgx.Row) error {
		err := st.scan(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		*found = err == nil
		return err
	})
}

// lockMany queues the lock of the consumer rows of pids (distinct) for
// group in one statement (consume_lock_many, or with skipLocked
// consume_lock_many_skip, which finds no row another request holds): the
// rows are locked in ascending partition id whatever pids' order; sts[i]
// and found[i] receive pids[i]'s row (found false: no row, or skipped).
func lockMany(b *pgx.Batch, pids []uuid.UUID, group string, skipLocked bool, sts []consumerState, found []bool) {
	lock := sqlConsumeLockMany
	if skipLocked {
		lock = sqlConsumeLockManySk
	}
	b.Queue(lock, pids, group).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i int64
			var st consumerState
			if err := st.scanAfter(rows, []any{&i}, false); err != nil {
				return err
			}
			if i < 1 || i > int64(len(pids)) || found[i-1] {
				return fmt.Errorf("persistence: consume_lock_many returned position %d of %d", i, len(pids))
			}
			sts[i-1], found[i-1] = st, true
		}
		return rows.Err()
	})
}

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
// back and the result is empty, PopBusy.
func (s *Store) PopPartition(ctx context.Context, spec PopSpec) (queen.PopResult, PopState, error) {
	var res queen.PopResult
	var state PopState
	var settled LeaseStats
	var err error
	for try := 0; ; try++ {
		err = s.inSession(ctx, func(conn *session) error {
			var err error
			settled = LeaseStats{} // a retried attempt settles afresh
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
		return queen.PopResult{}, PopBusy, err
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
func popTx(ctx context.Context, tx querier, spec PopSpec, settled *LeaseStats, known *knownRows) (_ queen.PopResult, _ PopState, err error) {
	st, found, segs, err := claimSpan(ctx, tx, spec, known)
	if err != nil {
		return queen.PopResult{}, PopBusy, err
	}
	defer func() {
		if found && err == nil {
			known.add(ackKey{spec.PartitionID, spec.Group})
		}
	}()
	if !found || st.live {
		return queen.PopResult{}, PopBusy, commitPop(ctx, tx, nil)
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
	idle := func(state PopState) (queen.PopResult, PopState, error) {
		var write func(b *pgx.Batch)
		if changed {
			counts, bisect, err := rowState(&st)
			if err != nil {
				return queen.PopResult{}, PopBusy, err
			}
			write = func(b *pgx.Batch) {
				b.Queue(sqlConsumeUpdate, spec.PartitionID, spec.Group, st.cursor, nil, nil, nil, counts, bisect)
			}
		}
		if err := commitPop(ctx, tx, write); err != nil {
			return queen.PopResult{}, PopBusy, err
		}
		settled.add(st.leases)
		return queen.PopResult{}, state, nil
	}
	if st.cursor >= st.lastOffset {
		return idle(PopEmpty)
	}
	res, last, err := spanMessages(spec, &st, segs)
	if err != nil {
		return queen.PopResult{}, PopBusy, err
	}
	if len(res.Messages) == 0 {
		return idle(PopNotYet)
	}
	if spec.AutoAck {
		err = moveCursor(ctx, tx, spec, &st, last)
	} else {
		err = takeLease(ctx, tx, spec, &st, last, &res)
	}
	if err == nil {
		settled.add(st.leases)
	}
	return res, PopDelivered, err
}

// popSegment is one segment read for a pop: its first offset, when it was
// stored, and its packed message ids and frames (UnpackFrames).
type popSegment struct {
	first   int64
	created time.Time
	ids     []byte
	frames  []byte
}

// readSegments returns a consume_segments row reader that appends to *segs.
func readSegments(segs *[]popSegment) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var sg popSegment
			var last int64
			if err := rows.Scan(&sg.first, &last, &sg.created, &sg.ids, &sg.frames); err != nil {
				return err
			}
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
			if err := rows.Scan(&i, &sg.first, &last, &sg.created, &sg.ids, &sg.frames); err != nil {
				return err
			}
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
func claimSpan(ctx context.Context, tx querier, spec PopSpec, known *knownRows) (st consumerState, found bool, segs []popSegment, err error) {
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
// as its payload plus PopMessageOverhead; the first always fits unless
// spec.BytesStrict), the rest left unleased for the next pop. The reply's
// queue, partition and group are set when it holds any message; last is
// the offset of its last message. It reads no database.
func spanMessages(spec PopSpec, st *consumerState, segs []popSegment) (res queen.PopResult, last int64, err error) {
	pidText := spec.PartitionID.String()
	maxBytes, size := spec.MaxBytes, 0
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
	full := false
	for _, sg := range segs {
		fs, err := UnpackFrames(sg.ids, sg.frames)
		if err != nil {
			return queen.PopResult{}, 0, fmt.Errorf("%w: partition %s segment at offset %d", err, spec.PartitionID, sg.first)
		}
		for i := range fs {
			off := sg.first + int64(i)
			if off <= st.cursor || full || len(res.Messages) >= spec.Batch {
				continue
			}
			if size += len(fs[i].Payload) + PopMessageOverhead; size > maxBytes && (len(res.Messages) > 0 || spec.BytesStrict) {
				full = true // the rest stays unleased for the next pop
				continue
			}
			m := queen.Message{
				ID: fs[i].MessageID.String(), TransactionID: fs[i].TransactionID, TraceID: fs[i].TraceID,
				Data: fs[i].Payload, CreatedAt: sg.created, PartitionID: pidText, Partition: st.partition,
				Queue: st.queue, Offset: off, ConsumerGroup: spec.Group,
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
func moveCursor(ctx context.Context, tx querier, spec PopSpec, st *consumerState, last int64) error {
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
func takeLease(ctx context.Context, tx querier, spec PopSpec, st *consumerState, last int64, res *queen.PopResult) error {
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

// Subscribe records group's subscription of queue at its first pop (SPEC.md
// §4): from, or now when isNew, or from the oldest message. It is a no-op
// once the group is subscribed. exists is false when the queue does not
// exist (nothing is recorded).
func (s *Store) Subscribe(ctx context.Context, queueName, group string, from *time.Time, isNew bool) (exists bool, err error) {
	var tag pgconn.CommandTag
	err = s.retryBroken(ctx, func() (err error) {
		tag, err = s.pool.Exec(ctx, sqlConsumeSubscribe, queueName, group, from, isNew)
		return err
	})
	if err != nil {
		return false, unavailable(err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Already subscribed, or no such queue.
	if _, err := s.Queue(ctx, queueName); err != nil {
		if errors.Is(err, queen.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// PartitionID returns the id of partition (queue, name), or uuid.Nil when it
// does not exist (pops never create partitions).
func (s *Store) PartitionID(ctx context.Context, queueName, partition string) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.retryBroken(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlGetPartition, queueName, partition).Scan(&id)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, nil
	}
	return id, unavailable(err)
}

// Candidates returns up to limit partitions of queue that may hold messages
// group can take now (allocator above the cursor, no live lease): the
// correction for a wildcard pop's in-memory hint.
func (s *Store) Candidates(ctx context.Context, queueName, group string, limit int) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := s.retryBroken(ctx, func() error {
		rows, err := s.pool.Query(ctx, sqlConsumeCandidates, queueName, group, limit)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	return ids, unavailable(err)
}

// ExtendLease extends live lease id to at least seconds from now (<= 0: the
// queue's leaseTime; capped at the greater of the queue's leaseTime and
// queen.MaxLeaseExtendSeconds) and returns its expiry (the earliest of the
// consumer rows still held under it, for a multi-partition pop's lease); it
// never shortens a lease. A lease that is not live (expired, released,
// unknown) is queen.ErrLeaseInvalid (SPEC.md §4). Any broker of a cluster
// can extend any lease: the rows are found through the lease's row of
// queen.consumer_leases (migration 0014), which the pop wrote, then by
// primary key; the statement is planned for its arguments on every call
// (pgx.QueryExecModeExec), never with a generic plan cached while the
// tables were small.
func (s *Store) ExtendLease(ctx context.Context, id uuid.UUID, seconds int64) (time.Time, error) {
	var t time.Time
	err := s.retryBroken(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlConsumeExtend, pgx.QueryExecModeExec, id, seconds, int64(queen.MaxLeaseExtendSeconds)).Scan(&t)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return t, queen.ErrLeaseInvalid.With("lease %s is not live (expired, released or unknown)", id)
	}
	return t, unavailable(err)
}

// ackKey is one consumer row an ack call touches.
type ackKey struct {
	pid   uuid.UUID
	group string
}

// Ack applies acks as offset commits (SPEC.md §4) in one transaction and
// returns one result per item, in order. Items are grouped by (partition,
// group); each group's consumer row is locked in ascending (partition id,
// group) order, so concurrent ack calls cannot deadlock. Per consumer row:
// an item resolves to an offset (by offset, or by transactionId through the
// sidecar to the lowest offset above the cursor); unresolvable, stale and
// lease_invalid items change nothing; the lowest failed/dlq/retry signal S
// stops the cursor below it, so completed items above S are not applied
// (retry_scheduled, success false); completed items below S commit the
// cursor to the highest of them. Every failed item counts a failure of its
// message; a message past the queue's retryLimit (or acked dlq) is copied to
// the DLQ and the cursor moves past it, so it does not stop the sweep. Any
// failure signal releases the lease (the rest of the span is delivered
// again); a cursor that reaches the leased span's end releases it too. An expired lease that nothing released is
// settled first (its failed delivery counted, see expireLease), so a late
// ack never makes an expiry go uncounted. A consumer row (or, creating one,
// a partition row) whose lock another session holds past Config.LockTimeout
// fails the call with queen.ErrLockTimeout (503, retryable); nothing is
// applied.
func (s *Store) Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error) {
	var out []queen.AckResult
	var rows []*consumerAcks
	var err error
	for try := 0; ; try++ {
		err = s.inSession(ctx, func(conn *session) error {
			out, rows = groupByConsumerRow(items) // afresh for a retried attempt
			if err := ackTx(ctx, conn, items, out, rows, s.observe, s.known); err != nil {
				rollback(conn)
				return err
			}
			return nil
		})
		if !errors.Is(err, errStaleKnown) || try >= staleRetries {
			break
		}
	}
	if err != nil {
		return nil, unavailable(err)
	}
	for _, a := range rows {
		s.leases.add(a.st.leases)
		if a.found && !a.forgot {
			s.known.add(a.key)
		}
	}
	return out, nil
}

// groupByConsumerRow returns a blank answer per item and the consumer rows
// items touch, each with the positions of its items, in the lock order:
// ascending (partition id, group).
func groupByConsumerRow(items []queen.AckItem) ([]queen.AckResult, []*consumerAcks) {
	out := make([]queen.AckResult, len(items))
	byKey := map[ackKey]*consumerAcks{}
	var rows []*consumerAcks
	for i, it := range items {
		out[i] = queen.AckResult{Index: i, TransactionID: it.TransactionID, PartitionID: it.PartitionID.String()}
		k := ackKey{it.PartitionID, it.ConsumerGroup}
		a := byKey[k]
		if a == nil {
			a = &consumerAcks{key: k}
			byKey[k] = a
			rows = append(rows, a)
		}
		a.idx = append(a.idx, i)
	}
	sort.Slice(rows, func(a, b int) bool {
		ka, kb := rows[a].key, rows[b].key
		if c := bytes.Compare(ka.pid[:], kb.pid[:]); c != 0 {
			return c < 0
		}
		return ka.group < kb.group
	})
	return out, rows
}

// ackTx runs Ack's transaction on conn, a connection outside a transaction,
// over rows in lock order, in two round trips whatever the number of rows:
// the first carries BEGIN, every consumer row's creation (partition
// key-share locks, ascending, before any consumer row is locked, as
// transactions do, so the two cannot deadlock), every row's lock
// (ascending) and the resolution of its items; the second every row's
// update and COMMIT. With several rows the statements do not grow with
// them: consume_plan_begin (no sequential scans), one ack_lock_many, one
// consume_hash_at_many, and one consume_update_many per consumer group (one
// consume_resolve per row acked by transactionId alone); one row uses
// ack_lock, consume_hash_at and consume_update, as a transaction's acks do. Settling an expired lease or writing a DLQ copy (rare) adds its
// own round trips. A failed COMMIT round trip is queen.ErrCommitUnknown,
// unless the server answered an error (the transaction rolled back); on any
// error the caller rolls back. A row in known is not created (see
// knownRows); found missing, it is dropped from known and the call fails
// with errStaleKnown before anything is written.
func ackTx(ctx context.Context, conn querier, items []queen.AckItem, out []queen.AckResult, rows []*consumerAcks, obs func(LockEvent), known *knownRows) error {
	// One row (the common ack of a one-partition pop): its own statements,
	// planned as usual; several: the array statements, without sequential
	// scans (consume_plan_begin).
	many := len(rows) > 1
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if many {
		b.Queue(sqlConsumePlanBegin)
	}
	for _, a := range rows {
		if a.known = known.has(a.key); a.known {
			continue
		}
		ensureConsumer(b, a.key.pid, a.key.group, false, nil, false)
		b.QueuedQueries[len(b.QueuedQueries)-1].Exec(func(ct pgconn.CommandTag) error {
			a.created = ct.RowsAffected() == 1
			return nil
		})
	}
	if many {
		lockAcks(b, rows, items)
	} else {
		for _, a := range rows {
			a.queueLock(b, items)
		}
	}
	start := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if obs != nil && lockTimedOut(err) {
			obs(LockEvent{Op: "ack", Wait: time.Since(start), TimedOut: true})
		}
		return unavailable(err)
	}
	stale := false
	for _, a := range rows {
		if a.known && !a.found {
			known.drop(a.key)
			stale = true
		}
	}
	if stale {
		return errStaleKnown
	}
	if obs != nil {
		for _, a := range rows {
			if a.found {
				obs(LockEvent{Op: "ack", Wait: seconds(a.st.lockWait)})
			}
		}
	}
	b = &pgx.Batch{}
	var ws *groupWrites // nil: settle queues consume_update
	if many {
		ws = &groupWrites{}
	}
	for _, a := range rows {
		if err := a.settle(ctx, conn, items, out, b, ws); err != nil {
			return err
		}
	}
	if ws != nil {
		ws.queue(b)
	}
	b.Queue("COMMIT")
	willCommit(conn)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered an error (a statement before the
			// COMMIT failed, or the session was ended before it ran,
			// 57P01; or the COMMIT itself failed): the transaction
			// rolled back.
			notCommitted(conn)
			return unavailable(err)
		}
		return queen.ErrCommitUnknown.With("ack commit: %v", err)
	}
	return nil
}

// querier is what the consume paths need of a connection or transaction.
type querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ackConsumerRow applies the acks idx of items to consumer row k (see Ack)
// inside tx, a transaction the caller began and commits, whose locks come
// before this row's in the lock order. The answers go to out[idx]; what it
// settled of an expired lease is added to *settled.
func ackConsumerRow(ctx context.Context, tx querier, k ackKey, items []queen.AckItem, idx []int, out []queen.AckResult, settled *LeaseStats) error {
	a := &consumerAcks{key: k, idx: idx}
	b := &pgx.Batch{}
	a.queueLock(b, items)
	if err := sendAcks(ctx, tx, b); err != nil {
		return err
	}
	b = &pgx.Batch{}
	if err := a.settle(ctx, tx, items, out, b, nil); err != nil {
		return err
	}
	settled.add(a.st.leases)
	return sendAcks(ctx, tx, b)
}

// sendAcks sends b, the statements settle queued, when it holds any.
func sendAcks(ctx context.Context, tx querier, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return unavailable(err)
	}
	return nil
}

// consumerAcks is one consumer row's acks in an ack call or a transaction:
// the row, the positions idx of its items, and, once lock has run, the row
// as locked (found is false when the partition does not exist) and where
// its transactionIds resolve.
type consumerAcks struct {
	key   ackKey
	idx   []int
	st    consumerState
	found bool
	txns  map[queen.Hash]resolvedTxn
	// created: this ack call created the row (its group never popped or
	// acked there); settle removes it again when the acks changed nothing.
	created bool
	// known: the row was in the Store's knownRows, so this call did not
	// create it; forgot: settle removed the row it created.
	known, forgot bool
	// hashAt holds the transactionId hash stored at the offsets of the
	// items that name both an offset and a transactionId (consume_hash_at);
	// an offset whose log_txns row is gone is absent.
	hashAt map[int64]queen.Hash
}

// resolvedTxn is where consume_resolve found a transactionId in the
// partition's sidecar: the lowest offset above the cursor (nil: none),
// and whether any offset holds it.
type resolvedTxn struct {
	above *int64
	any   bool
}

// queueLock queues on b, for one row (a transaction's acks,
// ackConsumerRow; an ack call's rows go through lockAcks), after what the
// caller queued there, the row's lock (ack_lock),
// the resolution of its items acked by transactionId (consume_resolve) and
// the hashes at the offsets of items that name both (consume_hash_at). The
// results land in a once the caller has sent b.
func (a *consumerAcks) queueLock(b *pgx.Batch, items []queen.AckItem) {
	b.Queue(sqlAckLock, a.key.pid, a.key.group).QueryRow(func(row pgx.Row) error {
		err := a.st.scanRow(row, true)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		a.found = err == nil
		return err
	})
	a.queueResolve(b, items)
	var both []int64
	for _, i := range a.idx {
		if items[i].Offset >= 0 && items[i].TransactionID != "" {
			both = append(both, items[i].Offset)
		}
	}
	if len(both) > 0 {
		b.Queue(sqlConsumeHashAt, a.key.pid, both).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var off int64
				var h []byte
				if err := rows.Scan(&off, &h); err != nil {
					return err
				}
				if len(h) == len(queen.Hash{}) {
					a.hashAt[off] = queen.Hash(h)
				}
			}
			return rows.Err()
		})
	}
}

// lockAcks queues on b, after what the caller queued there (BEGIN,
// consumer rows to create), what queueLock queues for each of rows (in lock
// order), in as few statements as the rows allow: every row's lock in one
// ack_lock_many, the hashes at the offsets of every item naming both an
// offset and a transactionId in one consume_hash_at_many, and one
// consume_resolve per row with items acked by transactionId alone.
func lockAcks(b *pgx.Batch, rows []*consumerAcks, items []queen.AckItem) {
	pids := make([]uuid.UUID, len(rows))
	groups := make([]string, len(rows))
	for k, a := range rows {
		pids[k], groups[k] = a.key.pid, a.key.group
	}
	b.Queue(sqlAckLockMany, pids, groups).Query(func(res pgx.Rows) error {
		for res.Next() {
			var i int64
			var st consumerState
			if err := st.scanAfter(res, []any{&i}, true); err != nil {
				return err
			}
			if i < 1 || i > int64(len(rows)) || rows[i-1].found {
				return fmt.Errorf("persistence: ack_lock_many returned position %d of %d", i, len(rows))
			}
			rows[i-1].st, rows[i-1].found = st, true
		}
		return res.Err()
	})
	var hp []uuid.UUID
	var ho []int64
	var owner []*consumerAcks
	for _, a := range rows {
		a.queueResolve(b, items)
		for _, i := range a.idx {
			if items[i].Offset >= 0 && items[i].TransactionID != "" {
				hp, ho, owner = append(hp, a.key.pid), append(ho, items[i].Offset), append(owner, a)
			}
		}
	}
	if len(hp) == 0 {
		return
	}
	b.Queue(sqlConsumeHashAtMany, hp, ho).Query(func(res pgx.Rows) error {
		for res.Next() {
			var i int64
			var h []byte
			if err := res.Scan(&i, &h); err != nil {
				return err
			}
			if i < 1 || i > int64(len(hp)) {
				return fmt.Errorf("persistence: consume_hash_at_many returned position %d of %d", i, len(hp))
			}
			if len(h) == len(queen.Hash{}) {
				owner[i-1].hashAt[ho[i-1]] = queen.Hash(h)
			}
		}
		return res.Err()
	})
}

// queueResolve queues the resolution of the row's items acked by
// transactionId (consume_resolve) and readies a.txns and a.hashAt.
func (a *consumerAcks) queueResolve(b *pgx.Batch, items []queen.AckItem) {
	var hashes []pgtype.UUID
	for _, i := range a.idx {
		if items[i].Offset < 0 {
			hashes = append(hashes, pgtype.UUID{Bytes: items[i].Hash, Valid: true})
		}
	}
	a.txns = map[queen.Hash]resolvedTxn{}
	if len(hashes) > 0 {
		b.Queue(sqlConsumeResolve, a.key.pid, hashes, a.key.group).Query(a.readResolved)
	}
	a.hashAt = map[int64]queen.Hash{}
}

// readResolved reads consume_resolve's rows into a.txns.
func (a *consumerAcks) readResolved(rows pgx.Rows) error {
	for rows.Next() {
		var h pgtype.UUID
		var above, anyOff *int64
		if err := rows.Scan(&h, &above, &anyOff); err != nil {
			return err
		}
		a.txns[h.Bytes] = resolvedTxn{above: above, any: anyOff != nil}
	}
	return rows.Err()
}

// settle decides the row's acks under its lock (taken by lock) and answers
// them in out: an expired lease nobody released counts its failed delivery
// first (expireLease), so a late ack cannot make the expiry go uncounted;
// every item is resolved to an offset or answered now (targets); rules.Ack
// decides the rest. The DLQ copies are written at once; the row's update
// (cursor, lease, failure counts) is queued on b, which the caller sends,
// with COMMIT or not; with ws the update is gathered there instead (the
// caller queues ws on b before COMMIT). The answers stand once b is sent. A
// partition that does not exist answers every item unresolvable and queues
// nothing.
func (a *consumerAcks) settle(ctx context.Context, tx querier, items []queen.AckItem, out []queen.AckResult, b *pgx.Batch, ws *groupWrites) error {
	if !a.found {
		for _, i := range a.idx {
			out[i].Result = queen.Unresolvable
			out[i].Error = fmt.Sprintf("partition %s does not exist", a.key.pid)
		}
		return nil
	}
	if err := a.checkNamed(items, out); err != nil {
		return err
	}
	st := &a.st
	if _, err := expireLease(ctx, tx, a.key, st); err != nil {
		return err
	}
	row := rules.ConsumerRow{Partition: a.key.pid.String(), Group: a.key.group, Cursor: st.cursor,
		HasLease: st.leaseID.Valid, Live: st.live, LeaseTo: st.leaseTo, RetryLimit: st.retryLimit, FailCounts: st.failCounts}
	if st.leaseID.Valid {
		row.Lease = st.leaseID.Bytes
	}
	targets, at := a.targets(items, out)
	d := rules.Ack(row, targets)
	for n, v := range d.Verdicts {
		out[at[n]].Result, out[at[n]].Success, out[at[n]].Error = v.Result, v.Success, v.Error
	}
	for _, dl := range d.DeadLetters {
		if err := deadLetter(ctx, tx, a.key, dl.Offset, dl.Error, dl.Attempts); err != nil {
			return err
		}
	}
	counts, err := encodeCounts(d.FailCounts)
	if err != nil {
		return err
	}
	if a.created && d.Cursor == st.cursor && len(d.DeadLetters) == 0 && len(d.FailCounts) == 0 {
		// Nothing applied (every ack unresolvable, stale or refused): no
		// cursor row for a group that never popped.
		b.Queue(sqlConsumeForget, a.key.pid, a.key.group)
		a.forgot = true
		for _, i := range a.idx {
			c := st.cursor
			out[i].Cursor = &c
		}
		return nil
	}
	bisect, err := encodeBisection(st.bisect)
	if err != nil {
		return err
	}
	var lease any
	if d.KeepLease {
		lease = uuid.UUID(st.leaseID.Bytes)
	}
	if ws != nil {
		kept := uuid.Nil
		if d.KeepLease {
			kept = uuid.UUID(st.leaseID.Bytes)
		}
		ws.add(a.key.group, a.key.pid, d.Cursor, kept, nil, st.leaseTo, counts, bisect)
	} else {
		b.Queue(sqlConsumeUpdate, a.key.pid, a.key.group, d.Cursor, lease, nil, st.leaseTo, counts, bisect)
	}
	for _, i := range a.idx {
		c := d.Cursor
		out[i].Cursor = &c
	}
	return nil
}

// checkNamed refuses, with 400 invalid_field naming the item, an ack whose
// offset and transactionId name different messages (the transactionId's
// hash is not the one stored at the offset): nothing of the call is
// applied. When the offset's hash is no longer known (its log_txns row was
// purged) the offset decides alone and the reply does not echo the
// transactionId, which could not be checked.
func (a *consumerAcks) checkNamed(items []queen.AckItem, out []queen.AckResult) error {
	for _, i := range a.idx {
		it := &items[i]
		if it.Offset < 0 || it.TransactionID == "" {
			continue
		}
		h, ok := a.hashAt[it.Offset]
		if !ok {
			out[i].TransactionID = ""
			continue
		}
		if h != queen.HashTxn(it.TransactionID) {
			return queen.ErrInvalidField.With("transactionId %q is not the message at offset %d of partition %s: give one of them, or both of the same message", it.TransactionID, it.Offset, a.key.pid).At(i, "transactionId")
		}
	}
	return nil
}

// targets resolves the row's items to offsets for rules.Ack, answering
// now (in out) those that resolve to none: an offset never allocated or a
// transactionId not in the sidecar is unresolvable, a transactionId with no
// offset above the cursor stale. at is the item position of each target.
func (a *consumerAcks) targets(items []queen.AckItem, out []queen.AckResult) (targets []rules.AckTarget, at []int) {
	for _, i := range a.idx {
		it := &items[i]
		var off int64
		switch {
		case it.Offset >= 0:
			if it.Offset > a.st.lastOffset {
				out[i].Result = queen.Unresolvable
				out[i].Error = fmt.Sprintf("offset %d was never allocated in partition %s (last offset %d)", it.Offset, a.key.pid, a.st.lastOffset)
				continue
			}
			off = it.Offset
		default:
			r, ok := a.txns[it.Hash]
			switch {
			case !ok || !r.any:
				out[i].Result = queen.Unresolvable
				out[i].Error = fmt.Sprintf("transactionId %q is not in partition %s's sidecar (never pushed there, or aged out); ack by offset instead", it.TransactionID, a.key.pid)
				continue
			case r.above == nil:
				out[i].Result, out[i].Success = queen.Stale, true
				continue
			}
			off = *r.above
		}
		o := off
		out[i].Offset = &o
		targets = append(targets, rules.AckTarget{Offset: off, Status: it.Status, LeaseID: it.LeaseID, Error: it.Error})
		at = append(at, i)
	}
	return targets, at
}

// deadLetter copies the frame at offset off of partition k.pid to the DLQ.
func deadLetter(ctx context.Context, tx querier, k ackKey, off int64, errText string, attempts int32) error {
	var first int64
	var created time.Time
	var ids, frames []byte
	err := tx.QueryRow(ctx, sqlConsumeSegmentAt, k.pid, off).Scan(&first, &created, &ids, &frames)
	if errors.Is(err, pgx.ErrNoRows) {
		return queen.ErrNotFound.With("the message at offset %d of partition %s is gone (retention); it cannot be dead-lettered", off, k.pid)
	}
	if err != nil {
		return unavailable(err)
	}
	return deadLetterFrom(ctx, tx, k, off, first, created, ids, frames, errText, attempts)
}

// deadLetterFrom copies the frame at offset off, held by the segment that
// starts at first (its created_at, message ids and frames as stored), to the
// DLQ. The dead letter stores that one frame raw (packed as in a segment,
// never compressed: one frame does not compress).
func deadLetterFrom(ctx context.Context, tx querier, k ackKey, off, first int64, created time.Time, ids, frames []byte, errText string, attempts int32) error {
	fs, err := UnpackFrames(ids, frames)
	if err != nil || off < first || off-first >= int64(len(fs)) {
		return fmt.Errorf("%w: partition %s segment at offset %d", ErrCorruptSegment, k.pid, first)
	}
	f := fs[off-first]
	frame := AppendFrame(nil, f.TransactionID, f.TraceID, f.Payload)
	if _, err := tx.Exec(ctx, sqlConsumeDeadLetter, k.pid, k.group, off, f.MessageID, frame, created, errText, attempts); err != nil {
		return unavailable(err)
	}
	return nil
}

// expireLease settles an expired lease that no ack or failure released
// (SPEC.md §4), on st, the consumer row locked by this transaction, by
// rules.Bisection: an unacked span of several messages (from the lowest
// stored offset above the cursor to the lease's end) charges none of them
// and bisects the next deliveries; a span of one message counts one failed
// delivery of it, like a failed ack, and past the queue's retryLimit it is
// dead-lettered with the error text LeaseExpiredError and the cursor moves
// past it. The lease is released in st (lease id, span end cleared), so
// the caller's write of the row records the expiry once: a later pop or
// ack, on any broker, finds no lease to settle. What it settled is added
// to st.leases. It reports whether st changed (false: no expired lease);
// the caller writes the row.
func expireLease(ctx context.Context, tx querier, k ackKey, st *consumerState) (bool, error) {
	if st.live || !st.leaseID.Valid {
		return false, nil
	}
	leaseTo := st.leaseTo
	st.leaseID, st.leaseTo = pgtype.UUID{}, nil
	if leaseTo == nil || st.cursor >= *leaseTo {
		return true, nil
	}
	var first int64
	var created time.Time
	var ids, frames []byte
	err := tx.QueryRow(ctx, sqlConsumeFirstAbove, k.pid, st.cursor).Scan(&first, &created, &ids, &frames)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil // retention took the span
	}
	if err != nil {
		return false, unavailable(err)
	}
	off := max(first, st.cursor+1)
	if off > *leaseTo {
		return true, nil
	}
	st.leases.Expiries++
	charge, bisected := st.bisect.Expire(st.cursor, off, *leaseTo, st.now)
	if bisected {
		st.leases.Bisections++
	}
	if !charge {
		return true, nil
	}
	st.failCounts[off]++
	if attempts := st.failCounts[off]; int64(attempts) > st.retryLimit {
		if err := deadLetterFrom(ctx, tx, k, off, first, created, ids, frames, LeaseExpiredError, attempts); err != nil {
			return false, err
		}
		st.leases.DeadLettered++
		st.cursor = off
		st.bisect.Mark = off // the next delivery starts small: nothing was acked
		for o := range st.failCounts {
			if o <= off {
				delete(st.failCounts, o)
			}
		}
	}
	return true, nil
}
