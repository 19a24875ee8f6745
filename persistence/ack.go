package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

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
	err := s.inKnownSession(ctx, func(conn *session) error {
		out, rows = groupByConsumerRow(items) // afresh for a retried attempt
		if err := ackTx(ctx, conn, items, out, rows, s.observe, s.known); err != nil {
			rollback(conn)
			return err
		}
		return nil
	})
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
// update and COMMIT. The statements do not grow with the rows:
// consume_plan_begin (no sequential scans), one consumer_lock, one
// consume_hash_at, and one consume_update_many per consumer group (one
// consume_resolve per row acked by transactionId alone), the same for one
// row as for many. Settling an expired lease or writing a DLQ copy (rare)
// adds its own round trips. A failed COMMIT round trip is queen.ErrCommitUnknown,
// unless the server answered an error (the transaction rolled back); on any
// error the caller rolls back. A row in known is not created (see
// knownRows); found missing, it is dropped from known and the call fails
// with errStaleKnown before anything is written.
func ackTx(ctx context.Context, conn querier, items []queen.AckItem, out []queen.AckResult, rows []*consumerAcks, obs func(LockEvent), known *knownRows) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlConsumePlanBegin)
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
	lockAcks(b, rows, items)
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
	var ws groupWrites
	for _, a := range rows {
		if err := a.settle(ctx, conn, items, out, b, &ws); err != nil {
			return err
		}
	}
	ws.queue(b)
	// Answered, the COMMIT applied the acks (run again, they would answer
	// stale, and a failed ack count its delivery twice).
	committed := queueCommit(conn, b)
	if err := conn.SendBatch(ctx, b).Close(); err != nil && !*committed {
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

// ackConsumerRow applies the acks idx of items to consumer row k (see Ack)
// inside tx, a transaction the caller began and commits, whose locks come
// before this row's in the lock order. The answers go to out[idx]; what it
// settled of an expired lease is added to *settled.
func ackConsumerRow(ctx context.Context, tx querier, k ackKey, items []queen.AckItem, idx []int, out []queen.AckResult, settled *queen.LeaseStats) error {
	a := &consumerAcks{key: k, idx: idx}
	b := &pgx.Batch{}
	// The array statements run with enable_seqscan off, as an ack's do
	// (consume_plan_begin), until plan_end.
	b.Queue(sqlConsumePlanBegin)
	lockAcks(b, []*consumerAcks{a}, items)
	if err := sendAcks(ctx, tx, b); err != nil {
		return err
	}
	b = &pgx.Batch{}
	var ws groupWrites
	if err := a.settle(ctx, tx, items, out, b, &ws); err != nil {
		return err
	}
	ws.queue(b)
	b.Queue(sqlPlanEnd)
	settled.Add(a.st.leases)
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
	// an offset whose segment is gone (retention) is absent.
	hashAt map[int64]queen.Hash
}

// resolvedTxn is where consume_resolve found a transactionId in the
// partition's sidecar: the lowest offset above the cursor (nil: none),
// and whether any offset holds it.
type resolvedTxn struct {
	above *int64
	any   bool
}

// lockAcks queues on b, after what the caller queued there (BEGIN,
// consumer rows to create), the locks of rows (in lock order) and what
// their acks need to read, in as few statements as the rows allow: every
// row's lock in one consumer_lock, the hashes at the offsets of every item
// naming both an offset and a transactionId in one consume_hash_at, and
// one consume_resolve per row with items acked by transactionId alone. The
// results land in rows once the caller has sent b.
func lockAcks(b *pgx.Batch, rows []*consumerAcks, items []queen.AckItem) {
	keys := make([]ackKey, len(rows))
	for k, a := range rows {
		keys[k] = a.key
	}
	lockRows(b, keys, false, func(k int, st *consumerState) {
		rows[k].st, rows[k].found = *st, true
	})
	var hp []uuid.UUID
	var ho []int64
	var hg []string
	var owner []*consumerAcks
	for _, a := range rows {
		a.queueResolve(b, items)
		for _, i := range a.idx {
			if items[i].Offset >= 0 && items[i].TransactionID != "" {
				hp, ho, hg, owner = append(hp, a.key.pid), append(ho, items[i].Offset), append(hg, a.key.group), append(owner, a)
			}
		}
	}
	queueHashesAt(b, hp, ho, hg, owner)
}

// queueHashesAt queues on b, when hp is not empty, the transactionId hashes
// stored at offsets ho of partitions hp acked by groups hg (parallel
// arrays, one element per ack item naming both an offset and a
// transactionId; consume_hash_at), each landing in its owner's hashAt. An
// offset whose segment is gone, or that was never allocated, lands nowhere.
func queueHashesAt(b *pgx.Batch, hp []uuid.UUID, ho []int64, hg []string, owner []*consumerAcks) {
	if len(hp) == 0 {
		return
	}
	b.Queue(sqlConsumeHashAt, hp, ho, hg).Query(func(res pgx.Rows) error {
		for res.Next() {
			var i int64
			var h []byte
			if err := res.Scan(&i, &h); err != nil {
				return err
			}
			if i < 1 || i > int64(len(hp)) {
				return fmt.Errorf("persistence: consume_hash_at returned position %d of %d", i, len(hp))
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
// decides the rest. The DLQ copies are written at once; statements the
// acks need (forgetting a row this call created) are queued on b, and the
// row's update (cursor, lease, failure counts) is gathered in ws; the
// caller queues ws on b and sends b, with COMMIT or not. The answers stand
// once b is sent. A partition that does not exist answers every item
// unresolvable and queues nothing.
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
	kept := uuid.Nil
	if d.KeepLease {
		kept = uuid.UUID(st.leaseID.Bytes)
	}
	ws.add(a.key.group, a.key.pid, d.Cursor, kept, nil, st.leaseTo, counts, bisect)
	for _, i := range a.idx {
		c := d.Cursor
		out[i].Cursor = &c
	}
	return nil
}

// checkNamed refuses, with 400 invalid_field naming the item, an ack whose
// offset and transactionId name different messages (the transactionId's
// hash is not the one stored at the offset): nothing of the call is
// applied. When the offset's hash is no longer known (its segment is gone) the offset decides alone and the reply does not echo the
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

// expireLease settles an expired lease that no ack or failure released
// (SPEC.md §4), on st, the consumer row locked by this transaction, by
// rules.Bisection: an unacked span of several messages (from the lowest
// stored offset above the cursor to the lease's end) charges none of them
// and bisects the next deliveries; a span of one message counts one failed
// delivery of it, like a failed ack, and past the queue's retryLimit it is
// dead-lettered with the error text queen.LeaseExpiredError and the cursor moves
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
	var producer *string
	err := tx.QueryRow(ctx, sqlConsumeFirstAbove, k.pid, st.cursor).Scan(&first, &created, &ids, &frames, &producer)
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
		if err := deadLetterFrom(ctx, tx, k, off, first, created, ids, frames, producer, queen.LeaseExpiredError, attempts); err != nil {
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
