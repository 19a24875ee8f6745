package persistence

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

// PopPartitions is the pop (SPEC.md §4), of one partition or of several
// (queen.PopRequest.Partitions): it tries the partitions pids of one queue,
// in that order, for consumer group spec.Group, and claims of each the span
// above its cursor that is deliverable, under the group's consumer row
// lock: only messages stored at least delayedProcessing seconds ago, and
// only once the partition's newest message is windowBuffer seconds old; an
// expired lease's unacked rest is delivered again (see expireLease), a
// single unacked message counting one failed delivery first and several
// bisected (rules.Bisection), so a delivery holds fewer than spec.Batch
// until the expired range is passed. It claims until most partitions are claimed (<= 0: no bound), spec.Batch messages
// or spec.MaxBytes are reached. Every claimed span is leased under one id
// (spec.LeaseID, or a new UUIDv7), or with spec.AutoAck the cursors move
// past them. The messages come partition by partition, each naming its
// partition; the reply's Queue, Partition and PartitionID name the first
// claimed partition.
//
// It is one transaction of three round trips whatever len(pids): the
// first creates the consumer rows on first use (in ascending partition id
// order, as Ack does) and locks them (skipping a row another request holds
// when spec.SkipLocked, else waiting in ascending order); the second reads
// the segments of every locked partition that has something above its
// cursor and no live lease, keyed by what the lock read (the partition's
// number, the cursor and its segment's time), so no row is looked up
// twice; the third writes the claimed rows and commits. The locks, the
// reads and the writes are one statement each whatever len(pids)
// (consumer_lock, consume_segments_many, consume_update_many), run with
// enable_seqscan off (consume_plan_begin); only the creation of rows not
// yet known is a statement per partition. An expired lease to settle (see
// expireLease) costs its settlement's reads, and its row's write rides
// on the second round trip. states has one queen.PopState per pid: PopDelivered, PopCut, PopEmpty,
// PopBusy (another consumer's live lease or a skipped lock), PopNotYet
// (nothing visible) or PopUnreached (not tried: the pop was full). On an
// error nothing is claimed.
func (s *Store) PopPartitions(ctx context.Context, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, error) {
	states := make([]queen.PopState, len(pids))
	if len(pids) == 0 {
		return queen.PopResult{}, states, nil
	}
	var res queen.PopResult
	var settled queen.LeaseStats
	err := s.inKnownSession(ctx, func(conn *session) error {
		settled = queen.LeaseStats{} // a retried attempt settles afresh
		var err error
		res, err = popManyTx(ctx, conn, spec, pids, most, states, &settled, s.known)
		if err != nil {
			rollback(conn)
		}
		return err
	})
	if err != nil {
		for i := range states {
			states[i] = queen.PopBusy
		}
		return queen.PopResult{}, states, unavailable(err)
	}
	s.leases.add(settled)
	return res, states, nil
}

// popManyTx runs PopPartitions' transaction on tx (a connection outside a
// transaction) and fills states (queen.PopBusy unless found otherwise);
// what it settled of expired leases and bisections is added to *settled
// once committed. On an error the caller rolls back. pids must be distinct. Consumer rows in known are not
// created (see knownRows): one found missing is dropped from known and
// answers queen.PopBusy with spec.SkipLocked, else the call fails with
// errStaleKnown. Once committed, every row found is added to known.
func popManyTx(ctx context.Context, tx querier, spec queen.PopSpec, pids []uuid.UUID, most int, states []queen.PopState, settled *queen.LeaseStats, known *knownRows) (queen.PopResult, error) {
	n := len(pids)
	for i := range states {
		states[i] = queen.PopBusy
	}
	pm := &popMany{spec: spec, pids: pids, states: states, known: known,
		sts: make([]consumerState, n), found: make([]bool, n), segs: make([][]popSegment, n)}
	if err := pm.read(ctx, tx); err != nil {
		return queen.PopResult{}, err
	}
	if err := pm.readSpans(ctx, tx); err != nil {
		return queen.PopResult{}, err
	}
	lease := spec.LeaseID
	if lease == uuid.Nil && !spec.AutoAck {
		var err error
		if lease, err = uuid.NewV7(); err != nil {
			return queen.PopResult{}, err
		}
	}
	// Round trip 3: write the claimed rows (and the bisections a pop that
	// delivers nothing changed) in one statement (consume_update_many) and
	// commit.
	var w rowWrites
	out, claimed, err := pm.claim(&w, lease, most)
	if err != nil {
		return queen.PopResult{}, err
	}
	if err := commitPop(ctx, tx, func(b *pgx.Batch) { w.queue(b, spec.Group, &pm.expires) }); err != nil {
		return queen.PopResult{}, err
	}
	for i := range pm.sts {
		settled.Add(pm.sts[i].leases)
		if pm.found[i] {
			known.add(ackKey{pids[i], spec.Group})
		}
	}
	if claimed > 0 && !spec.AutoAck {
		ls := lease.String()
		out.LeaseID, out.LeaseExpiresAt = &ls, pm.expires
		for i := range out.Messages {
			out.Messages[i].LeaseID = &ls
		}
	}
	return out, nil
}

// popMany is one PopPartitions transaction's state: per partition (by
// index into pids) its consumer row, whether it was locked, and its span's
// segments.
type popMany struct {
	spec    queen.PopSpec
	pids    []uuid.UUID
	states  []queen.PopState
	sts     []consumerState
	found   []bool
	segs    [][]popSegment
	expires *time.Time // the lease's expiry: the earliest of the leased rows'
	known   *knownRows // consumer rows not to create (see knownRows)
}

// read is round trip 1: BEGIN and consume_plan_begin (no sequential
// scans in this transaction), then create the consumer rows (unless known,
// one statement per partition, ascending partition id) and lock them (one
// statement, consumer_lock: ascending partition id).
func (pm *popMany) read(ctx context.Context, tx querier) error {
	order := make([]int, len(pm.pids))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(pm.pids[order[a]][:], pm.pids[order[b]][:]) < 0 })
	spec := pm.spec
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlConsumePlanBegin)
	skipped := make([]bool, len(pm.pids))
	for _, i := range order {
		if skipped[i] = pm.known.has(ackKey{pm.pids[i], spec.Group}); !skipped[i] {
			ensureConsumer(b, pm.pids[i], spec.Group, true, spec.SubscriptionFrom, spec.SubscriptionNew)
		}
	}
	lockMany(b, pm.pids, spec.Group, spec.SkipLocked, pm.sts, pm.found)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return unavailable(err)
	}
	stale := false
	for i, pid := range pm.pids {
		if skipped[i] && !pm.found[i] {
			pm.known.drop(ackKey{pid, spec.Group})
			stale = true
		}
	}
	if stale && !spec.SkipLocked {
		return errStaleKnown
	}
	return nil
}

// readSpans is round trip 2: it settles the expired leases nobody
// released (rare; see expireLease, whose reads are round trips of their
// own) and writes their rows (one consume_update_many for them all), then
// reads the spans of every locked row without a live lease whose partition
// ends above its cursor, in one consume_segments_many fed by the lock's
// columns, so no consumer, partition or queue row is looked up twice.
func (pm *popMany) readSpans(ctx context.Context, tx querier) error {
	var w rowWrites
	b := &pgx.Batch{}
	for i, pid := range pm.pids {
		st := &pm.sts[i]
		if !pm.found[i] || st.live {
			continue
		}
		locked := st.cursor
		expired, err := expireLease(ctx, tx, ackKey{pid, pm.spec.Group}, st)
		if err != nil {
			return err
		}
		if !expired {
			continue
		}
		if st.cursor != locked {
			// A dead letter moved the cursor: the time of its segment is
			// not known here, so no range is pruned.
			st.since = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
		}
		counts, bisect, err := rowState(st)
		if err != nil {
			return err
		}
		w.add(pid, st.cursor, uuid.Nil, nil, nil, counts, bisect)
	}
	w.queue(b, pm.spec.Group, nil)
	var at []int
	var nums, cursors, delayed, buffers []int64
	var since []pgtype.Timestamptz
	for i := range pm.pids {
		st := &pm.sts[i]
		if !pm.found[i] || st.live || st.cursor >= st.lastOffset {
			continue
		}
		at = append(at, i)
		nums, cursors, since = append(nums, st.num), append(cursors, st.cursor), append(since, st.since)
		delayed, buffers = append(delayed, st.delayed), append(buffers, st.windowBuffer)
	}
	if len(at) > 0 {
		b.Queue(sqlConsumeSegsMany, nums, cursors, since, delayed, buffers, pm.spec.Batch).Query(readSegmentsMany(pm.segs, at))
	}
	return sendAcks(ctx, tx, b)
}

// claim takes, partition by partition in pids' order, the messages that
// fit (the batch, most partitions, the reply's bytes, each row's
// bisection), gathers each claimed row's write in w, and sets states.
func (pm *popMany) claim(w *rowWrites, lease uuid.UUID, most int) (queen.PopResult, int, error) {
	spec := pm.spec
	maxBytes := spec.MaxBytes
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
	var out queen.PopResult
	size, claimed := 0, 0
	for i, pid := range pm.pids {
		st := &pm.sts[i]
		if !pm.found[i] || st.live {
			continue // queen.PopBusy
		}
		left := spec.Batch - len(out.Messages)
		if left <= 0 || (most > 0 && claimed >= most) || (len(out.Messages) > 0 && size+queen.PopMessageOverhead > maxBytes) {
			pm.states[i] = queen.PopUnreached
			continue
		}
		limit, stall, changed := st.bisect.Deliver(st.cursor, left, st.now)
		if changed && !st.bisect.Active {
			st.leases.Stalls++
			st.leases.StallSeconds += stall.Seconds()
		}
		counts, bisect, err := rowState(st)
		if err != nil {
			return out, 0, err
		}
		idle := func(state queen.PopState) {
			pm.states[i] = state
			if changed {
				w.add(pid, st.cursor, uuid.Nil, nil, nil, counts, bisect)
			}
		}
		if st.cursor >= st.lastOffset {
			idle(queen.PopEmpty)
			continue
		}
		ps := spec
		ps.PartitionID, ps.Batch, ps.MaxBytes, ps.BytesStrict = pid, limit, maxBytes-size, spec.BytesStrict || len(out.Messages) > 0
		res, last, cut, err := spanMessages(ps, st, pm.segs[i])
		if err != nil {
			return out, 0, err
		}
		if len(res.Messages) == 0 {
			idle(queen.PopNotYet)
			continue
		}
		pm.states[i] = queen.PopDelivered
		if cut {
			pm.states[i] = queen.PopCut
		}
		if spec.AutoAck {
			for off := range st.failCounts {
				if off <= last {
					delete(st.failCounts, off)
				}
			}
			if counts, err = encodeCounts(st.failCounts); err != nil {
				return out, 0, err
			}
			w.add(pid, last, uuid.Nil, nil, nil, counts, bisect)
		} else {
			secs, to := float64(st.leaseTime), last
			w.add(pid, st.cursor, lease, &secs, &to, counts, bisect)
		}
		size += out.Join(res)
		claimed++
	}
	return out, claimed, nil
}

// commitPop sends the statements extra queues (when not nil) and COMMIT in
// one round trip; an error after the server answered the COMMIT is not
// the pop's (it committed).
func commitPop(ctx context.Context, tx querier, extra func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	if extra != nil {
		extra(b)
	}
	// Answered, the COMMIT took the lease (run again, the pop would find
	// the span leased and answer nothing until the lease expired).
	committed := queueCommit(tx, b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil && !*committed {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered an error: the transaction rolled back.
			notCommitted(tx)
		}
		return unavailable(err)
	}
	return nil
}
