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
	"github.com/queen-mq/queen-go/rules"
)

var (
	sqlTxnLeases = q("txn_leases")
)

// txnRef is where a push item sits in a transaction: operation and item index.
type txnRef struct{ op, item int }

// txnPartition is one partition a transaction pushes to: its items in
// request order (operation order, then item order) and where each came from.
type txnPartition struct {
	batch queen.PushBatch
	refs  []txnRef
	out   queen.PushOutcome
	// segs is what assign made to write (one segment unless the items'
	// producers differ); nil when nothing.
	segs []newSegment
	// retained: the queue has retentionSeconds (bundle_stamp).
	retained bool
	// num is the partition's number, which its segments store (bundle_lock).
	num int64
}

// Transaction runs the operations of req in one PostgreSQL transaction
// (SPEC.md §5) and returns one result per operation, in order; on any error
// nothing of it is written.
//
// Pushes keep the push path's semantics (partitions and queues created on
// first use, the window read from the queue row under the row lock, a window
// of 0 checks nothing, offsets in request order, one segment per
// partition, UUIDv7 message ids), except that a duplicate
// is not a verdict: a push whose transactionId is inside its partition's
// window, or repeats an earlier push of the same partition in this
// transaction (window > 0), aborts everything with a *queen.TxnConflict
// matching queen.ErrDuplicate. Acks are applied as Store.Ack applies them
// (an offset commit per consumer row), after the pushes, so an ack may name
// a message pushed earlier in the same transaction; an ack answered
// unresolvable or lease_invalid aborts everything (a *queen.TxnConflict
// matching queen.ErrUnresolvable or queen.ErrLeaseInvalid), as does a
// required lease that is not live when its consumer row is locked.
//
// Lock order (the global one, so concurrent transactions cannot deadlock):
// the row of every partition pushed to or acked in, in ascending id order,
// then every consumer row, in ascending (partition id, group) order. Acked
// partitions are locked too because a first ack of a group creates its
// consumer row, whose foreign key takes a lock on the partition row: taken
// out of order, that lock could deadlock two transactions. Partitions of the
// pushes are resolved (and created) before the transaction begins. A lock
// not granted within Config.LockTimeout rolls the whole transaction back
// with queen.ErrLockTimeout (503, retryable); a database out of disk space
// with queen.ErrStorageFull (503, retryable; Store.StorageFull).
func (s *Store) Transaction(ctx context.Context, req *queen.TxnRequest) (_ []queen.TxnOpResult, err error) {
	defer func() { s.full.note(err) }()
	plan, err := s.planTxn(ctx, req)
	if err != nil {
		return nil, err
	}
	// The connection is released idle after a COMMIT the server answered
	// (commitTxn sends it as a statement, which the pgx.Tx does not see):
	// a ROLLBACK after it would be a round trip for nothing.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback(context.Background()) //nolint:errcheck // the transaction is over either way
		}
	}()

	if len(plan.lockPIDs) > 0 {
		if err := s.txnPush(ctx, tx, plan.lockPIDs, plan.pushPIDs, plan.parts); err != nil {
			return nil, err
		}
	}
	plan.pushResults()
	rows, err := lockConsumerRows(ctx, tx, plan.keys, plan.byKey)
	if err != nil {
		return nil, err
	}
	if err := checkRequiredLeases(req.RequiredLeases, rows); err != nil {
		return nil, err
	}
	if err := plan.applyAcks(ctx, tx); err != nil {
		return nil, err
	}
	if err := s.commitTxn(ctx, tx); err != nil {
		return nil, err
	}
	committed = true
	s.leases.add(plan.leases)
	return plan.res, nil
}

// txnPlan is a transaction's operations grouped for its locks, built before
// the transaction begins: the pushes by partition, the acks by consumer row,
// and the rows to lock, in the global lock order.
type txnPlan struct {
	// res is the answer, one result per operation; pushResults and
	// applyAcks fill it in.
	res []queen.TxnOpResult
	// parts are the partitions pushed to, pushPIDs their ids ascending.
	parts    map[uuid.UUID]*txnPartition
	pushPIDs []uuid.UUID
	// acks are the ack operations in request order, ackOps their operation
	// indexes, ackOut their answers (Index: the ack's position in acks until
	// applyAcks sets the operation's), byKey the positions of each consumer
	// row's acks.
	acks   []queen.AckItem
	ackOps []int
	ackOut []queen.AckResult
	byKey  map[ackKey][]int
	// lockPIDs are the partition rows to lock (pushed to or acked in),
	// keys the consumer rows (acked, or holding a required lease), both
	// ascending.
	lockPIDs []uuid.UUID
	keys     []ackKey
	// leases is what the acks settled of expired leases (Store.LeaseStats).
	leases queen.LeaseStats
}

// planTxn groups the operations of req (creating the queues and partitions
// of its pushes) and finds the consumer rows of its required leases.
func (s *Store) planTxn(ctx context.Context, req *queen.TxnRequest) (*txnPlan, error) {
	plan := &txnPlan{res: make([]queen.TxnOpResult, len(req.Ops))}
	if err := s.groupPushes(ctx, req, plan); err != nil {
		return nil, err
	}
	plan.groupAcks(req)
	leaseKeys, err := s.leaseRows(ctx, req.RequiredLeases)
	if err != nil {
		return nil, err
	}
	plan.lockPIDs, plan.keys = lockOrder(plan.pushPIDs, plan.byKey, leaseKeys)
	return plan, nil
}

// groupPushes sorts the push items of req into plan.parts by partition (in
// request order within each), resolving each (queue, partition) once, and
// marks each partition's leaders (rules.Leaders).
func (s *Store) groupPushes(ctx context.Context, req *queen.TxnRequest, plan *txnPlan) error {
	type pkey struct{ queue, partition string }
	pidOf := map[pkey]uuid.UUID{}
	plan.parts = map[uuid.UUID]*txnPartition{}
	for i, op := range req.Ops {
		if op.Type != queen.TxnPush {
			continue
		}
		plan.res[i].Push = make([]queen.Result, len(op.Items))
		for j := range op.Items {
			it := &op.Items[j]
			k := pkey{it.Queue, it.Partition}
			pid, ok := pidOf[k]
			if !ok {
				var err error
				if pid, err = s.EnsurePartition(ctx, it.Queue, it.Partition); err != nil {
					return err
				}
				pidOf[k] = pid
			}
			p := plan.parts[pid]
			if p == nil {
				p = &txnPartition{batch: queen.PushBatch{PartitionID: pid, Watermark: -1}}
				plan.parts[pid] = p
				plan.pushPIDs = append(plan.pushPIDs, pid)
			}
			p.batch.Items = append(p.batch.Items, it)
			p.refs = append(p.refs, txnRef{i, j})
		}
	}
	sortUUIDs(plan.pushPIDs)
	for _, pid := range plan.pushPIDs {
		p := plan.parts[pid]
		p.batch.LeaderOf = rules.Leaders(p.batch.Items)
	}
	return nil
}

// groupAcks lists the ack operations of req by consumer row, each with a
// blank answer.
func (plan *txnPlan) groupAcks(req *queen.TxnRequest) {
	plan.byKey = map[ackKey][]int{}
	for i, op := range req.Ops {
		if op.Type != queen.TxnAck {
			continue
		}
		k := ackKey{op.Ack.PartitionID, op.Ack.ConsumerGroup}
		plan.byKey[k] = append(plan.byKey[k], len(plan.acks))
		plan.acks = append(plan.acks, op.Ack)
		plan.ackOps = append(plan.ackOps, i)
	}
	plan.ackOut = make([]queen.AckResult, len(plan.acks))
	for n, a := range plan.acks {
		plan.ackOut[n] = queen.AckResult{Index: n, TransactionID: a.TransactionID, PartitionID: a.PartitionID.String()}
	}
}

// leaseRows returns the consumer rows that hold the leases (found before the
// locks, checked under them by checkRequiredLeases); empty for no leases.
func (s *Store) leaseRows(ctx context.Context, leases []uuid.UUID) (map[ackKey]bool, error) {
	keys := map[ackKey]bool{}
	if len(leases) == 0 {
		return keys, nil
	}
	// Planned for its arguments on every call, as ExtendLease's statement
	// (QueryExecModeExec sends no describe: the ids go as pgtype.UUID,
	// whose type pgx knows).
	ids := make([]pgtype.UUID, len(leases))
	for i, id := range leases {
		ids[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	rows, err := s.pool.Query(ctx, sqlTxnLeases, pgx.QueryExecModeExec, ids)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k ackKey
		if err := rows.Scan(&k.pid, &k.group); err != nil {
			return nil, unavailable(err)
		}
		keys[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return keys, nil
}

// lockOrder returns the partition rows to lock (those pushed to and those
// acked in), ascending, and the consumer rows to lock (those acked and those
// of leaseKeys), ascending by (partition id, group).
func lockOrder(pushPIDs []uuid.UUID, byKey map[ackKey][]int, leaseKeys map[ackKey]bool) ([]uuid.UUID, []ackKey) {
	lockSet := map[uuid.UUID]bool{}
	for _, pid := range pushPIDs {
		lockSet[pid] = true
	}
	keys := make([]ackKey, 0, len(byKey)+len(leaseKeys))
	for k := range byKey {
		lockSet[k.pid] = true
		keys = append(keys, k)
	}
	for k := range leaseKeys {
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
	}
	lockPIDs := make([]uuid.UUID, 0, len(lockSet))
	for pid := range lockSet {
		lockPIDs = append(lockPIDs, pid)
	}
	sortUUIDs(lockPIDs)
	sort.Slice(keys, func(a, b int) bool {
		if c := bytes.Compare(keys[a].pid[:], keys[b].pid[:]); c != 0 {
			return c < 0
		}
		return keys[a].group < keys[b].group
	})
	return lockPIDs, keys
}

// pushResults copies each partition's verdicts to the push operations they
// answer.
func (plan *txnPlan) pushResults() {
	for _, pid := range plan.pushPIDs {
		p := plan.parts[pid]
		for n, ref := range p.refs {
			plan.res[ref.op].Push[ref.item] = p.out.Results[n]
		}
	}
}

// lockedRow is a consumer row as lockConsumerRows found it under its lock;
// found is false for a row that does not exist.
type lockedRow struct {
	state consumerState
	found bool
}

// lockConsumerRows locks the consumer rows keys in order, creating the row
// of an acked group (a key of byKey) on first use, and returns them in the
// same order.
func lockConsumerRows(ctx context.Context, tx pgx.Tx, keys []ackKey, byKey map[ackKey][]int) ([]lockedRow, error) {
	rows := make([]lockedRow, len(keys))
	if len(keys) == 0 {
		return rows, nil
	}
	b := &pgx.Batch{}
	b.Queue(sqlConsumePlanBegin)
	for _, k := range keys {
		if _, ok := byKey[k]; ok {
			ensureConsumer(b, k.pid, k.group, false, nil, false)
		}
	}
	lockRows(b, keys, false, func(n int, st *consumerState) {
		rows[n].state, rows[n].found = *st, true
	})
	b.Queue(sqlPlanEnd)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, unavailable(err)
	}
	return rows, nil
}

// checkRequiredLeases refuses the transaction (a TxnRequiredLease conflict
// naming the first one) unless each of leases is the live lease of one of
// the locked rows. It runs before any ack moves a cursor or releases a
// lease.
func checkRequiredLeases(leases []uuid.UUID, rows []lockedRow) error {
	for n, id := range leases {
		live := false
		for m := range rows {
			if r := &rows[m]; r.found && r.state.live && r.state.leaseID.Valid && uuid.UUID(r.state.leaseID.Bytes) == id {
				live = true
				break
			}
		}
		if !live {
			return &queen.TxnConflict{Kind: queen.TxnRequiredLease, Op: n, LeaseID: &id}
		}
	}
	return nil
}

// applyAcks applies the acks row by row, in lock order, as Store.Ack does;
// an ack answered unresolvable or lease_invalid refuses the transaction (the
// first in request order is named). Otherwise each answer goes to its
// operation.
func (plan *txnPlan) applyAcks(ctx context.Context, tx pgx.Tx) error {
	for _, k := range plan.keys {
		idx, ok := plan.byKey[k]
		if !ok {
			continue
		}
		if err := ackConsumerRow(ctx, tx, k, plan.acks, idx, plan.ackOut, &plan.leases); err != nil {
			return err
		}
	}
	for n, r := range plan.ackOut {
		if r.Result == queen.Unresolvable || r.Result == queen.LeaseInvalid {
			return ackConflict(plan.ackOps[n], plan.acks[n], r)
		}
	}
	for n, r := range plan.ackOut {
		r.Index = plan.ackOps[n]
		plan.res[plan.ackOps[n]].Ack = r
	}
	return nil
}

// commitTxn commits tx: a commit PostgreSQL refused is ErrUnavailable
// (ErrStorageFull when the database is out of disk space; nothing
// written), one whose answer was lost ErrCommitUnknown. Once the server
// answered the COMMIT the transaction committed, whatever the round trip
// returns after it (a restart's 57P01 can end the session right after the
// COMMIT ran; queueCommit): it is not reported as failed.
func (s *Store) commitTxn(ctx context.Context, tx pgx.Tx) error {
	b := &pgx.Batch{}
	committed := queueCommit(tx, b)
	if s.afterCommit != "" {
		b.Queue(s.afterCommit)
	}
	err := tx.SendBatch(ctx, b).Close()
	switch {
	case err == nil && !*committed:
		// The server answered the COMMIT with a rollback: an earlier
		// statement had failed (each is checked, so it cannot happen).
		return queen.ErrUnavailable.With("transaction failed: rolled back at its commit")
	case err == nil || *committed:
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if storageFull(err) {
			return storageFullError(err)
		}
		return queen.ErrUnavailable.With("transaction failed: %v", err)
	}
	return queen.ErrCommitUnknown.With("transaction commit outcome unknown: %v", err)
}

// txnPush locks lockPIDs (ascending) and writes the pushes of parts (keyed
// by the ascending pushPIDs): the window probe, verdicts under the locks (a
// duplicate aborts), one segment per partition.
func (s *Store) txnPush(ctx context.Context, tx pgx.Tx, lockPIDs, pushPIDs []uuid.UUID, parts map[uuid.UUID]*txnPartition) error {
	lk, err := s.lockAndProbe(ctx, tx, lockPIDs, pushPIDs, parts)
	if err != nil {
		return err
	}
	if err := s.txnVerdicts(pushPIDs, parts, lk.locked, lk.hits, lk.stamp.at); err != nil {
		return err
	}
	return writeTxnSegments(ctx, tx, pushPIDs, parts, lk.stamp)
}

// lockAndProbe locks the allocator rows of lockPIDs (ascending), looks up
// the leaders' hashes of each pushed partition in its whole window and,
// when there are pushes, reads their stamp (bundle_stamp), in one round
// trip; it returns the locked rows, the hashes found by partition and the
// stamp.
func (s *Store) lockAndProbe(ctx context.Context, tx pgx.Tx, lockPIDs, pushPIDs []uuid.UUID, parts map[uuid.UUID]*txnPartition) (*bundleLocks, error) {
	ids := make([]pgtype.UUID, len(lockPIDs))
	for k, pid := range lockPIDs {
		ids[k] = pgUUID(pid)
	}
	// A transaction does not pass through the actors' caches: no watermark,
	// no suspects, every hash looked up in the whole window.
	var probe probeArgs
	for _, pid := range pushPIDs {
		probe.add(&parts[pid].batch, -1, 0)
	}

	lk := &bundleLocks{locked: make(map[[16]byte]lockedPartition, len(lockPIDs)), hits: map[[16]byte]map[queen.Hash]hit{}}
	var wait float64
	pb := &pgx.Batch{}
	// A transaction is rare: it rebuilds any allocator row a crash emptied
	// (queen.partition_ends, migration 0019) before it locks them, in the
	// same round trip (a row it inserts is its own until it commits).
	pb.Queue(sqlPartitionEndsEnsure, ids)
	pb.Queue(sqlBundleLock, ids).Query(scanLocked(lk.locked, &wait))
	if len(pushPIDs) > 0 {
		probe.queue(pb, lk.locked, lk.hits)
		queueStamp(pb, &lk.stamp)
	}
	start := time.Now()
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		if lockTimedOut(err) {
			s.observe(LockEvent{Op: "transaction", Wait: time.Since(start), TimedOut: true})
		}
		return nil, unavailable(err)
	}
	s.observe(LockEvent{Op: "transaction", Wait: seconds(wait)})
	return lk, nil
}

// txnVerdicts assigns the verdicts of each pushed partition under its lock
// (offsets, message ids, the segment to write); any duplicate refuses the
// transaction, naming the first in request order. A partition deleted
// meanwhile is ErrPartitionGone.
func (s *Store) txnVerdicts(pushPIDs []uuid.UUID, parts map[uuid.UUID]*txnPartition, locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit, at time.Time) error {
	var dup *queen.TxnConflict
	var dupRef txnRef
	for _, pid := range pushPIDs {
		p := parts[pid]
		lp, ok := locked[pid]
		if !ok || lp.window < 0 {
			return queen.ErrPartitionGone.With("transaction: partition %q of queue %q was deleted (its queue was deleted); retry", p.batch.Items[0].Partition, p.batch.Items[0].Queue)
		}
		p.out = queen.PushOutcome{Results: make([]queen.Result, len(p.batch.Items)), LastOffset: -1, Window: lp.window, FullProbe: true}
		p.segs, _ = s.assign(&p.batch, lp.window, lp.last, hits[pid], at, &p.out)
		p.retained = lp.retained
		p.num = lp.num
		// refs are in request order: the partition's first duplicate is its
		// lowest.
		for n, r := range p.out.Results {
			if r.Verdict != queen.Duplicate {
				continue
			}
			if ref := p.refs[n]; dup == nil || ref.op < dupRef.op || (ref.op == dupRef.op && ref.item < dupRef.item) {
				dup, dupRef = dupConflict(p, n, lp.window), ref
			}
			break
		}
	}
	if dup != nil {
		return dup
	}
	return nil
}

// writeTxnSegments writes the segments (frames and hashes) of every pushed
// partition that has any, bumps their allocators and writes their sidecar
// rows (copySegments, then bundle_bump and bundle_insert), stamped st, and
// stamps their outcomes with it.
func writeTxnSegments(ctx context.Context, tx pgx.Tx, pushPIDs []uuid.UUID, parts map[uuid.UUID]*txnPartition, st stamp) error {
	w := &bundleRows{st: st}
	var written []*txnPartition
	for _, pid := range pushPIDs {
		p := parts[pid]
		if len(p.segs) == 0 {
			continue
		}
		written = append(written, p)
		w.addSegments(pid, p.num, p.segs, p.retained)
	}
	if len(written) == 0 {
		return nil
	}
	if err := w.copySegments(ctx, tx); err != nil {
		return unavailable(err)
	}
	// The rows are locked (lockAndProbe) and the stamp read: the bump finds
	// every partition where the offsets assumed.
	pb := &pgx.Batch{}
	bumped := 0
	w.queueBump(pb, &bumped)
	pb.Queue(sqlBundleInsert, w.insertArgs()...)
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return unavailable(err)
	}
	if bumped != len(w.bumpPIDs) {
		return queen.ErrInternal.With("transaction: %d of %d partitions' allocators moved under their row locks", len(w.bumpPIDs)-bumped, len(w.bumpPIDs))
	}
	for _, p := range written {
		p.out.CreatedAt = st.at
	}
	return nil
}

// dupConflict is the conflict naming item n of p, a duplicate (SPEC.md §5).
func dupConflict(p *txnPartition, n int, window int64) *queen.TxnConflict {
	it, ref, r := p.batch.Items[n], p.refs[n], p.out.Results[n]
	c := &queen.TxnConflict{Kind: queen.TxnDuplicate, Op: ref.op, Item: ref.item, Queue: it.Queue, Partition: it.Partition,
		PartitionID: p.batch.PartitionID, TransactionID: it.TransactionID}
	if l := leaderOf(&p.batch, n); l != n {
		c.Kind, c.EarlierOp, c.EarlierItem = queen.TxnRepeat, p.refs[l].op, p.refs[l].item
	} else {
		c.Original, c.OriginalOffset, c.WindowSeconds = r.MessageID, r.Offset, window
	}
	return c
}

// ackConflict is the conflict naming ack operation op, answered r
// (unresolvable or lease_invalid).
func ackConflict(op int, a queen.AckItem, r queen.AckResult) *queen.TxnConflict {
	c := &queen.TxnConflict{Kind: queen.TxnUnresolvable, Op: op, PartitionID: a.PartitionID, TransactionID: a.TransactionID,
		ByOffset: a.Offset >= 0, Detail: r.Error, LeaseID: a.LeaseID}
	if r.Result == queen.LeaseInvalid {
		c.Kind = queen.TxnLeaseInvalid
	}
	return c
}

func sortUUIDs(ids []uuid.UUID) {
	sort.Slice(ids, func(a, b int) bool { return bytes.Compare(ids[a][:], ids[b][:]) < 0 })
}
