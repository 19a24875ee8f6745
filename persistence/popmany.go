package persistence

import (
	"bytes"
	"context"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	queen "github.com/queen-mq/queen-go"
)

// PopPartitions is a multi-partition pop (queen.PopRequest.Partitions): it
// tries the partitions pids of one queue, in that order, for consumer group
// spec.Group and claims the span of each that has deliverable messages, as
// PopPartition claims one partition's (same consumer row locks, same
// visibility rules, same bisection per (partition, group), SPEC.md §4),
// until most partitions are claimed (<= 0: no bound), spec.Batch messages
// or spec.MaxBytes are reached. Every claimed span is leased under one id
// (spec.LeaseID, or a new UUIDv7), or with spec.AutoAck the cursors move
// past them. The messages come partition by partition, each naming its
// partition; the reply's Queue, Partition and PartitionID name the first
// claimed partition.
//
// It is one transaction of two round trips whatever len(pids): the first
// creates the consumer rows on first use (in ascending partition id order,
// as Ack does), locks them (skipping a row another request holds when
// spec.SkipLocked, else waiting in ascending order) and reads every
// partition's segments; the second writes the claimed rows and commits. An
// expired lease to settle (see expireLease) costs its settlement's round
// trips. states has one PopState per pid: PopDelivered, PopEmpty, PopBusy
// (another consumer's live lease or a skipped lock), PopNotYet (nothing
// visible, or not tried because the pop was full). On an error nothing is
// claimed.
func (s *Store) PopPartitions(ctx context.Context, spec PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []PopState, error) {
	states := make([]PopState, len(pids))
	if len(pids) == 0 {
		return queen.PopResult{}, states, nil
	}
	var res queen.PopResult
	var settled LeaseStats
	err := s.inSession(ctx, func(conn *session) error {
		var err error
		settled = LeaseStats{} // a retried attempt settles afresh
		res, err = popManyTx(ctx, conn, spec, pids, most, states, &settled)
		if err != nil {
			rollback(conn)
		}
		return err
	})
	if err != nil {
		for i := range states {
			states[i] = PopBusy
		}
		return queen.PopResult{}, states, err
	}
	s.leases.add(settled)
	return res, states, nil
}

// popManyTx runs PopPartitions' transaction on tx (a connection outside a
// transaction) and fills states (PopBusy unless found otherwise); what it settled of expired leases and
// bisections is added to *settled once committed. On an error the caller
// rolls back. pids must be distinct.
func popManyTx(ctx context.Context, tx querier, spec PopSpec, pids []uuid.UUID, most int, states []PopState, settled *LeaseStats) (queen.PopResult, error) {
	n := len(pids)
	for i := range states {
		states[i] = PopBusy
	}
	sts := make([]consumerState, n)
	found := make([]bool, n)
	segs := make([][]popSegment, n)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(pids[order[a]][:], pids[order[b]][:]) < 0 })

	// Round trip 1: create, lock and read every partition's span.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, i := range order {
		ensureConsumer(b, pids[i], spec.Group, true, spec.SubscriptionFrom, spec.SubscriptionNew)
	}
	for _, i := range order {
		lockOnly(b, pids[i], spec.Group, spec.SkipLocked, &sts[i], &found[i])
		b.Queue(sqlConsumeSegments, pids[i], spec.Group, spec.Batch).Query(readSegments(&segs[i]))
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return queen.PopResult{}, unavailable(err)
	}

	// Expired leases nobody released are settled first (rare): their rows
	// are written and their segments read again, in one more round trip.
	b = &pgx.Batch{}
	for _, i := range order {
		st := &sts[i]
		if !found[i] || st.live {
			continue
		}
		expired, err := expireLease(ctx, tx, ackKey{pids[i], spec.Group}, st)
		if err != nil {
			return queen.PopResult{}, err
		}
		if !expired {
			continue
		}
		counts, bisect, err := rowState(st)
		if err != nil {
			return queen.PopResult{}, err
		}
		segs[i] = segs[i][:0]
		b.Queue(sqlConsumeUpdate, pids[i], spec.Group, st.cursor, nil, nil, nil, counts, bisect)
		b.Queue(sqlConsumeSegments, pids[i], spec.Group, spec.Batch).Query(readSegments(&segs[i]))
	}
	if err := sendAcks(ctx, tx, b); err != nil {
		return queen.PopResult{}, err
	}

	lease := spec.LeaseID
	if lease == uuid.Nil && !spec.AutoAck {
		var err error
		if lease, err = uuid.NewV7(); err != nil {
			return queen.PopResult{}, err
		}
	}
	maxBytes := spec.MaxBytes
	if maxBytes <= 0 {
		maxBytes = queen.MaxPopReplyBytes
	}
	var out queen.PopResult
	var expires *time.Time
	size, claimed, leased := 0, 0, false
	// Round trip 2: write the claimed rows (and the bisections a pop that
	// delivers nothing changed) and commit.
	b = &pgx.Batch{}
	for i, pid := range pids {
		st := &sts[i]
		if !found[i] || st.live {
			continue // PopBusy
		}
		left := spec.Batch - len(out.Messages)
		if left <= 0 || (most > 0 && claimed >= most) || size+PopMessageOverhead > maxBytes {
			states[i] = PopNotYet
			continue
		}
		limit, stall, changed := st.bisect.Deliver(st.cursor, left, st.now)
		if changed && !st.bisect.Active {
			st.leases.Stalls++
			st.leases.StallSeconds += stall.Seconds()
		}
		counts, bisect, err := rowState(st)
		if err != nil {
			return queen.PopResult{}, err
		}
		idle := func(state PopState) {
			states[i] = state
			if changed {
				b.Queue(sqlConsumeUpdate, pid, spec.Group, st.cursor, nil, nil, nil, counts, bisect)
			}
		}
		if st.cursor >= st.lastOffset {
			idle(PopEmpty)
			continue
		}
		ps := spec
		ps.PartitionID, ps.Batch, ps.MaxBytes, ps.BytesStrict = pid, limit, maxBytes-size, len(out.Messages) > 0
		res, last, err := spanMessages(ps, st, segs[i])
		if err != nil {
			return queen.PopResult{}, err
		}
		if len(res.Messages) == 0 {
			idle(PopNotYet)
			continue
		}
		states[i] = PopDelivered
		if spec.AutoAck {
			for off := range st.failCounts {
				if off <= last {
					delete(st.failCounts, off)
				}
			}
			if counts, err = encodeCounts(st.failCounts); err != nil {
				return queen.PopResult{}, err
			}
			b.Queue(sqlConsumeUpdate, pid, spec.Group, last, nil, nil, nil, counts, bisect)
		} else {
			q := b.Queue(sqlConsumeUpdate, pid, spec.Group, st.cursor, lease, float64(st.leaseTime), last, counts, bisect)
			if !leased { // every row's expiry is within the round trip: the first answers
				leased = true
				q.QueryRow(func(row pgx.Row) error { return row.Scan(&expires) })
			}
		}
		if claimed == 0 {
			out = res
		} else {
			out.Messages = append(out.Messages, res.Messages...)
		}
		for _, m := range res.Messages {
			size += len(m.Data) + PopMessageOverhead
		}
		claimed++
	}
	b.Queue("COMMIT")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return queen.PopResult{}, unavailable(err)
	}
	for i := range sts {
		settled.add(sts[i].leases)
	}
	if claimed > 0 && !spec.AutoAck {
		ls := lease.String()
		out.LeaseID, out.LeaseExpiresAt = &ls, expires
		for i := range out.Messages {
			out.Messages[i].LeaseID = &ls
		}
	}
	return out, nil
}
